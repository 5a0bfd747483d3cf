"""The same call sequences through the official ``pgmq`` client against real PGMQ 1.13.0 and
against our interface, compared field by field (ids by their order of first appearance,
timestamps by what they say: see tests/pgmq_support.py's Shaper).

Each script returns what the client answered at every step (or the error a step raised:
SQLSTATE and message), so a difference anywhere shows as a difference of two lists.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from django.db import transaction

import pgq_django as pgq
from tests.conftest import direct_dsn, wait_until
from tests.pgmq_support import (
    Shaper,
    client,
    outcome,
    pgmq_sql,
    reference_dsn,
    run_script,
    unique_queue,
)

__all__ = ["pgmq_sql", "reference_dsn"]  # the fixtures, imported for the tests below

# The client warns on every list_queues() that its answer changed type in 1.1 (it did).
pytestmark = pytest.mark.filterwarnings("ignore:list_queues\\(\\) now returns:UserWarning")

Script = Callable[[Any, Shaper], list[Any]]


def both(ours: str, theirs: str, script: Script) -> list[Any]:
    """Run ``script`` on both databases; assert the answers are equal; return ours."""
    expected = run_script(theirs, script)
    got = run_script(ours, script)
    assert got == expected
    return got


def _sql(c: Any, text: str, params: Any = None) -> list[tuple[Any, ...]]:
    """A call the client has no method for, on one of its pooled connections."""
    with c.pool.connection() as conn:
        cur = conn.execute(text, params)
        return cur.fetchall() if cur.description else []


def _sorted(messages: Any) -> Any:
    """Messages in msg_id order, for calls whose row order PGMQ leaves open."""
    return sorted(messages, key=lambda m: m.msg_id) if isinstance(messages, list) else messages


def test_sending_reading_and_removing_messages(pgmq_sql: str, reference_dsn: str) -> None:
    q = unique_queue()

    def script(c: Any, shape: Shaper) -> list[Any]:
        later = datetime.now(UTC) + timedelta(hours=1)
        sent = []
        steps = [
            outcome(lambda: c.create_queue(q), shape),
            outcome(lambda: c.create_queue(q), shape),  # again: nothing changes
        ]
        for call in (
            lambda: c.send(q, {"a": 1}),
            lambda: c.send(q, {"b": 2}, headers={"k": "v"}),
            lambda: c.send(q, {"c": 3}, delay=100),
            lambda: c.send(q, {"d": 4}, delay=later),
            lambda: c.send(q, {"e": 5}, headers={"x": 1}, delay=100),
            lambda: c.send(q, {"f": 6}, headers={"x": 2}, delay=later),
            lambda: c.send_batch(q, [{"g": 7}, {"h": 8}]),
            lambda: c.send_batch(q, [{"i": 9}, {"j": 10}], headers=[{"n": 1}, {"n": 2}]),
            lambda: c.send_batch(q, [{"k": 11}], delay=50),
            lambda: c.send_batch(q, [{"l": 12}], delay=later),
            lambda: c.send_batch(q, [{"m": 13}], headers=[{"n": 3}], delay=50),
            lambda: c.send_batch(q, [{"o": 14}], headers=[{"n": 4}], delay=later),
        ):
            result = call()
            sent.extend(result if isinstance(result, list) else [result])
            steps.append(shape(result))
        steps += [
            outcome(lambda: c.read(q, vt=30, qty=2), shape),
            outcome(lambda: c.read(q, vt=30, qty=5, conditional={"h": 8}), shape),
            outcome(lambda: c.read(q, vt=10, qty=10), shape),
            outcome(lambda: c.read(q, vt=10, qty=10), shape),  # all leased or delayed
            outcome(lambda: c.set_vt(q, sent[0], 0), shape),
            outcome(lambda: c.set_vt(q, [sent[1], sent[6]], 0), shape),
            outcome(lambda: c.set_vt(q, sent[7], later), shape),
            outcome(lambda: c.set_vt(q, [sent[8]], later), shape),
            outcome(lambda: c.pop(q), shape),
            outcome(lambda: c.pop(q, qty=5), shape),
            outcome(lambda: c.delete(q, sent[2]), shape),
            outcome(lambda: c.delete(q, sent[2]), shape),  # gone already: False
            outcome(lambda: c.delete_batch(q, [sent[3], sent[4], sent[-1] + 10_000]), shape),
            outcome(lambda: c.archive(q, sent[5]), shape),
            outcome(lambda: c.archive(q, sent[5]), shape),
            outcome(lambda: c.archive_batch(q, [sent[7], sent[8]]), shape),
            outcome(lambda: c.metrics(q), shape),
            outcome(lambda: [m for m in c.metrics_all() if m.queue_name == q], shape),
            outcome(lambda: [r for r in c.list_queues() if r.queue_name == q], shape),
            outcome(
                lambda: _sql(c, f"SELECT count(*), min(read_ct) FROM pgmq.a_{q}"), shape, raw=True
            ),
            outcome(lambda: _sql(c, f"SELECT count(*) FROM pgmq.q_{q}"), shape, raw=True),
            outcome(lambda: c.purge(q), shape, raw=True),
            outcome(lambda: c.metrics(q), shape),
            outcome(lambda: c.drop_queue(q), shape),
            outcome(lambda: c.drop_queue(q), shape),
        ]
        return steps

    both(pgmq_sql, reference_dsn, script)


def test_errors_a_client_sees(pgmq_sql: str, reference_dsn: str) -> None:
    q, missing = unique_queue(), unique_queue("missing")

    def script(c: Any, shape: Shaper) -> list[Any]:
        c.create_queue(q)
        calls: list[Callable[[], Any]] = [
            lambda: c.send(missing, {"a": 1}),
            lambda: c.read(missing),
            lambda: c.pop(missing),
            lambda: c.delete(missing, 1),
            lambda: c.archive(missing, 1),
            lambda: c.set_vt(missing, 1, 10),
            lambda: c.purge(missing),
            lambda: c.metrics(missing),
            lambda: c.drop_queue(missing),
            lambda: c.create_queue("q" * 48),
            lambda: c.create_queue("bad$name"),
            lambda: c.send("bad;name", {"a": 1}),
            lambda: c.send("it's", {"a": 1}),
            lambda: _sql(c, "SELECT * FROM pgmq.send_batch(%s, ARRAY[]::jsonb[])", [q]),
            lambda: _sql(c, "SELECT * FROM pgmq.send_batch(%s, NULL::jsonb[])", [q]),
            lambda: _sql(
                c,
                "SELECT * FROM pgmq.send_batch(%s, ARRAY['{}']::jsonb[],"
                " ARRAY['{}', '{}']::jsonb[])",
                [q],
            ),
            lambda: c.detach_archive(q),
            lambda: c.metrics(q),
        ]
        return [outcome(call, shape) for call in calls]

    both(pgmq_sql, reference_dsn, script)


def test_names_differing_only_in_case_are_one_queue(pgmq_sql: str, reference_dsn: str) -> None:
    name = "Mixed" + unique_queue()

    def script(c: Any, shape: Shaper) -> list[Any]:
        return [
            outcome(lambda: c.create_queue(name), shape),
            outcome(lambda: c.send(name.lower(), {"a": 1}), shape),
            outcome(lambda: c.read(name.upper()), shape),
            outcome(lambda: [r for r in c.list_queues() if r.queue_name == name], shape),
            outcome(lambda: c.metrics(name.lower()), shape),
            outcome(lambda: c.drop_queue(name), shape),
        ]

    both(pgmq_sql, reference_dsn, script)


def test_a_send_rolled_back_is_not_there(pgmq_sql: str, reference_dsn: str) -> None:
    q = unique_queue()

    def script(c: Any, shape: Shaper) -> list[Any]:
        c.create_queue(q)
        with c.pool.connection() as conn:
            with pytest.raises(ZeroDivisionError), conn.transaction():
                c.send(q, {"never": True}, conn=conn)
                c.send_batch(q, [{"never": 2}], conn=conn)
                1 / 0  # noqa: B018
            with conn.transaction():
                kept = c.send(q, {"kept": True}, conn=conn)
        return [shape(kept), outcome(lambda: c.read(q, qty=10), shape)]

    both(pgmq_sql, reference_dsn, script)


def test_read_with_poll_returns_a_message_sent_while_it_waits(
    pgmq_sql: str, reference_dsn: str
) -> None:
    q = unique_queue()

    def script(c: Any, shape: Shaper) -> list[Any]:
        c.create_queue(q)
        got: list[Any] = []
        poll = threading.Thread(
            target=lambda: got.extend(
                c.read_with_poll(q, vt=30, qty=2, max_poll_seconds=20, poll_interval_ms=50)
            )
        )
        poll.start()
        wait_until(lambda: _polling(c, q), what="read_with_poll to be waiting")
        c.send(q, {"woke": True})
        poll.join(timeout=30)
        empty = c.read_with_poll(q, vt=30, qty=1, max_poll_seconds=1, poll_interval_ms=50)
        return [shape(got), shape(empty)]

    both(pgmq_sql, reference_dsn, script)


def _polling(c: Any, q: str) -> bool:
    rows = _sql(
        c,
        "SELECT count(*) FROM pg_stat_activity WHERE state = 'active'"
        " AND datname = current_database()"
        " AND query LIKE '%%read_with_poll%%' AND pid <> pg_backend_pid()",
    )
    return bool(rows[0][0])


def test_fifo_grouped_reads(pgmq_sql: str, reference_dsn: str) -> None:
    q = unique_queue()
    groups = ["A", "A", "B", None, "B", "C", "A"]

    def script(c: Any, shape: Shaper) -> list[Any]:
        steps: list[Any] = []
        for read in ("read_grouped", "read_grouped_rr", "read_grouped_head"):
            shape = Shaper()  # PGMQ's msg_ids start again in each queue
            name = f"{q}_{read[13:] or 'sqs'}"
            c.create_queue(name)
            steps.append(outcome(lambda name=name: c.create_fifo_index(name), shape))
            headers = [{"x-pgmq-group": g} if g else {} for g in groups]
            steps.append(shape(c.send_batch(name, [{"n": i} for i in range(7)], headers=headers)))
            for qty in (3, 3, 3):
                rows = _sql(
                    c,
                    f"SELECT msg_id FROM pgmq.{read}(%s, 30, %s)",
                    [name, qty],
                )
                ids = [r[0] for r in rows]
                if read != "read_grouped_rr":
                    ids.sort()  # PGMQ leaves these rows' order open
                steps.append((read, shape(ids)))
            c.drop_queue(name)
        steps.append(outcome(lambda: c.create_fifo_indexes_all(), shape))
        return steps

    both(pgmq_sql, reference_dsn, script)


def test_topics(pgmq_sql: str, reference_dsn: str) -> None:
    one, two = unique_queue("one"), unique_queue("two")

    def script(c: Any, shape: Shaper) -> list[Any]:
        c.create_queue(one)
        c.create_queue(two)
        steps = [
            outcome(lambda: c.bind_topic("logs.*", one), shape),
            outcome(lambda: c.bind_topic("logs.#", two), shape),
            outcome(lambda: c.bind_topic("#.error", one), shape),
            outcome(lambda: c.bind_topic("#.error", one), shape),  # again: no change
            outcome(lambda: c.bind_topic("logs.*", "nope"), shape),
            outcome(lambda: c.bind_topic("logs..x", one), shape),
            outcome(lambda: c.bind_topic("logs.**", one), shape),
            outcome(lambda: _sorted_routes(c.test_routing("logs.error")), shape),
            outcome(lambda: c.test_routing("logs.*"), shape),
            outcome(lambda: c.send_topic("logs.error", {"t": 1}), shape, raw=True),
            outcome(lambda: c.send_topic("app.error", {"t": 2}, delay=0), shape, raw=True),
            outcome(lambda: c.send_topic("nothing.here", {"t": 3}), shape, raw=True),
            outcome(
                lambda: _per_queue(c.send_batch_topic("logs.info", [{"t": 4}, {"t": 5}])),
                shape,
                raw=True,
            ),
            outcome(lambda: _routes(c.list_topic_bindings(one)), shape),
            outcome(lambda: _routes(c.list_topic_bindings()), shape),
            # PGMQ's msg_ids start again in each queue: one shaper per queue.
            outcome(lambda: _sorted(c.read(one, qty=10)), Shaper()),
            outcome(lambda: _sorted(c.read(two, qty=10)), Shaper()),
            outcome(lambda: c.unbind_topic("logs.*", one), shape),
            outcome(lambda: c.unbind_topic("logs.*", one), shape),
            outcome(lambda: c.validate_routing_key("a.b-c_d"), shape),
            outcome(lambda: c.validate_routing_key(".a"), shape),
            outcome(lambda: c.validate_routing_key("a b"), shape),
            outcome(lambda: c.validate_topic_pattern("a.*.#"), shape),
            outcome(lambda: c.validate_topic_pattern("a.*#"), shape),
        ]
        c.drop_queue(one)
        c.drop_queue(two)
        steps.append(outcome(lambda: _routes(c.list_topic_bindings()), shape))
        return steps

    both(pgmq_sql, reference_dsn, script)


def _per_queue(sent: list[Any]) -> list[tuple[str, int]]:
    """How many messages a topic send put in each queue (ids aside)."""
    return sorted(Counter(r.queue_name for r in sent).items())


def _routes(bindings: list[Any]) -> list[tuple[str, str, str]]:
    """Bindings without their time, in a fixed order (ours share a transaction's time)."""
    return sorted((b.pattern, b.queue_name, b.compiled_regex) for b in bindings)


def _sorted_routes(routes: list[Any]) -> list[tuple[str, str, str]]:
    return sorted((r.pattern, r.queue_name, r.compiled_regex) for r in routes)


def test_insert_notifications_on_pgmqs_channel(pgmq_sql: str, reference_dsn: str) -> None:
    q = unique_queue()

    def script(c: Any, shape: Shaper) -> list[Any]:
        c.create_queue(q)
        steps = [
            outcome(lambda: c.update_notify(q, 10), shape),
            outcome(lambda: c.enable_notify(q, 0), shape),
            outcome(
                lambda: [
                    (t.queue_name, t.throttle_interval_ms)
                    for t in c.list_notify_throttles()
                    if t.queue_name == q
                ],
                shape,
            ),
        ]
        dsn = direct_dsn(c.pool.conninfo)  # LISTEN past any pooler, as clients must
        with psycopg.connect(dsn, autocommit=True) as listener:
            listener.execute(f'LISTEN "pgmq.q_{q}.INSERT"')
            c.send(q, {"n": 1})
            heard = [(n.channel, n.payload) for n in listener.notifies(timeout=10, stop_after=1)]
        steps.append(heard)
        steps += [
            outcome(lambda: c.update_notify(q, 60_000), shape),
            outcome(lambda: c.update_notify(q, -1), shape),
            outcome(lambda: c.enable_notify("nope", 0), shape),
            outcome(lambda: c.disable_notify(q), shape),
            outcome(lambda: [t for t in c.list_notify_throttles() if t.queue_name == q], shape),
        ]
        return steps

    both(pgmq_sql, reference_dsn, script)


def test_pgq_and_pgmq_interleave_on_one_queue(pgmq_sql: str) -> None:
    q = unique_queue()
    with client(pgmq_sql) as c:
        c.create_queue(q)
        by_pgq = pgq.send(q, {"by": "pgq"})
        by_pgmq = c.send(q, {"by": "pgmq"})
        read = c.read(q, vt=30, qty=1)
        assert (read.msg_id, read.message) == (by_pgq, {"by": "pgq"})
        [leased] = pgq.read(q, vt=30)
        assert (leased.msg_id, leased.message) == (by_pgmq, {"by": "pgmq"})
        # Each side acknowledges what the other leased.
        assert c.delete(q, leased.msg_id)
        assert pgq.delete(q, read.msg_id)
        assert c.metrics(q).queue_length == 0 and pgq.metrics(q).queue_length == 0
        assert pgq.metrics(q).total_messages == 2


def test_read_with_poll_is_woken_by_pgq_send(pgmq_sql: str) -> None:
    q = unique_queue()
    with client(pgmq_sql) as c:
        c.create_queue(q)
        got: list[Any] = []
        poll = threading.Thread(
            target=lambda: got.extend(
                c.read_with_poll(q, vt=30, qty=1, max_poll_seconds=20, poll_interval_ms=50)
            )
        )
        poll.start()
        wait_until(lambda: _polling(c, q), what="read_with_poll to be waiting")
        sent = pgq.send(q, {"from": "pgq"})
        poll.join(timeout=30)
        assert [(m.msg_id, m.message, m.read_ct) for m in got] == [(sent, {"from": "pgq"}, 1)]


def test_a_pgq_send_rolled_back_is_not_read_by_pgmq(pgmq_sql: str) -> None:
    q = unique_queue()
    with client(pgmq_sql) as c:
        c.create_queue(q)
        with pytest.raises(ZeroDivisionError), transaction.atomic():
            pgq.send(q, {"never": True})
            1 / 0  # noqa: B018
        assert c.read(q) is None
        assert c.metrics(q).queue_length == 0


def test_create_partitioned_makes_a_queue_without_pg_partman(pgmq_sql: str) -> None:
    """PGMQ needs pg_partman for this (the reference database has none); every queue of ours
    lives in msg_id-range partitions already, so the call makes a plain queue."""
    q = unique_queue()
    with client(pgmq_sql) as c:
        c.create_partitioned_queue(q, partition_interval="10000", retention_interval="100000")
        assert [r.queue_name for r in c.list_queues() if r.queue_name == q] == [q]
        with pytest.raises(psycopg.errors.RaiseException, match="premake must be at least 1"):
            _sql(c, "SELECT pgmq.create_partitioned(%s, premake => 0)", [unique_queue()])


def test_the_remaining_shapes(pgmq_sql: str, reference_dsn: str) -> None:
    """The calls the other scripts leave out: unlogged queues, conditional and grouped polls,
    every topic send shape, the deprecated drop, and the name helpers."""
    q, unlogged, one = unique_queue(), unique_queue("unlogged"), unique_queue("topic")

    def script(c: Any, shape: Shaper) -> list[Any]:
        later = datetime.now(UTC) + timedelta(hours=1)
        c.create_queue(q)
        steps: list[Any] = [
            outcome(lambda: c.create_queue(unlogged, unlogged=True), shape),
            outcome(lambda: [r for r in c.list_queues() if r.queue_name == unlogged], shape),
            outcome(lambda: c.send_batch(q, [{"k": 1}, {"k": 2}]), shape),
            outcome(
                lambda: c.read_with_poll(
                    q, vt=30, qty=5, max_poll_seconds=1, poll_interval_ms=20, conditional={"k": 2}
                ),
                shape,
            ),
        ]
        for read in ("read_grouped_with_poll", "read_grouped_rr_with_poll"):
            steps.append(
                outcome(lambda read=read: _sorted(getattr(c, read)(q, 30, 5, 1, 20)), shape)
            )
        steps += [
            outcome(
                lambda: _sql(
                    c,
                    "SELECT count(*) FROM pgmq.read_grouped_head_with_poll(%s, 30, 5, 1, 20)",
                    [q],
                ),
                shape,
                raw=True,
            ),
            outcome(lambda: _sql(c, "SELECT pgmq.validate_queue_name(%s)", ["x" * 48]), shape),
            outcome(
                lambda: _sql(c, "SELECT pgmq.format_table_name(%s, 'q')", ["Mixed_Case"]), shape
            ),
            outcome(lambda: _sql(c, "SELECT pgmq.format_table_name(%s, 'a')", ["x;y"]), shape),
            outcome(lambda: _sql(c, "SELECT pgmq.acquire_queue_lock(%s)", [q]), shape),
        ]
        c.create_queue(one)
        c.bind_topic("t.#", one)
        steps += [
            outcome(
                lambda: c.send_topic("t.a", {"s": 1}, headers={"h": 1}, delay=0), shape, raw=True
            ),
            outcome(lambda: c.send_topic("t.a", {"s": 2}, delay=-1), shape),
            outcome(
                lambda: _per_queue(c.send_batch_topic("t.b", [{"s": 3}], headers=[{"h": 2}])),
                shape,
                raw=True,
            ),
            outcome(
                lambda: _per_queue(c.send_batch_topic("t.b", [{"s": 4}], delay=100)),
                shape,
                raw=True,
            ),
            outcome(
                lambda: _per_queue(c.send_batch_topic("t.b", [{"s": 5}], delay=later)),
                shape,
                raw=True,
            ),
            outcome(
                lambda: _per_queue(
                    c.send_batch_topic("t.b", [{"s": 6}], headers=[{"h": 3}], delay=100)
                ),
                shape,
                raw=True,
            ),
            outcome(lambda: _sorted(c.read(one, vt=30, qty=10)), Shaper()),
            outcome(lambda: _sql(c, "SELECT pgmq.drop_queue(%s, true)", [unlogged]), shape),
            outcome(lambda: [r for r in c.list_queues() if r.queue_name == unlogged], shape),
        ]
        c.drop_queue(one)
        c.drop_queue(q)
        return steps

    both(pgmq_sql, reference_dsn, script)
