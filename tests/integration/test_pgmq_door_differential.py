"""One queue, two doors: the same scenarios through the Python API (``pgq.*``) and through
the PGMQ SQL functions (``pgmq.*``, on a psycopg connection as a PGMQ client makes them)
leave the same rows, counters and notifications.

Each scenario runs twice, on two queues made alike by ``pgq.create_queue``: once through a
:class:`PgqDoor`, once through a :class:`PgmqDoor`. What it leaves is then taken as
:func:`snapshot` sees it (ids by order of appearance, times as what they say), with what each
door answered along the way, and the two must be equal. The differences PGMQ's own contract
forces (docs/pgmq.md, "How it differs from PGMQ") are pinned by the last tests here:
``last_read_at``, which PGMQ's reads set and its archive keeps.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import psycopg
import pytest
from django.db import connection
from django.test.utils import override_settings
from psycopg.types.json import Jsonb

import pgq_django as pgq
from pgq_django.api.upkeep import dead_letter_expired_leases
from pgq_django.conf import settings as pgq_settings
from pgq_django.exceptions import QueueFull, QueuePaused
from pgq_django.pgmq import install
from pgq_django.store import tallies
from tests.conftest import direct_dsn
from tests.pgmq_support import ours_dsn, pgmq_settings

# The scenarios' delays and timeouts are whole tens of seconds; times are compared to ten.
TENS = 10


@pytest.fixture
def doors(transactional_db: Any) -> Iterator[str]:
    """The PGMQ interface installed, every send notifying (no throttle: the two doors'
    notifications then compare one for one); the test database's conninfo."""
    with override_settings(PGQ=pgmq_settings(NOTIFY_INTERVAL=0)):
        install.install()
        try:
            yield ours_dsn()
        finally:
            install.uninstall()


def _group(headers: dict[str, Any] | None) -> str | None:
    """The message group a PGMQ sender names in its headers (PGMQ's FIFO reads group by it)."""
    return (headers or {}).get("x-pgmq-group")


class PgqDoor:
    """The Python API. A PGMQ sender names a message's group in header 'x-pgmq-group'; the
    Python API's sender names it with ``group=``, and here does both, as one sender would."""

    name = "pgq"

    def __init__(self, queue: str) -> None:
        self.queue = queue

    def send(self, body: Any, *, headers: dict[str, Any] | None = None, delay: int = 0) -> Any:
        return pgq.send(
            self.queue, body, headers=headers, delay=delay or None, group=_group(headers)
        )

    def send_batch(self, bodies: list[Any], *, headers: dict[str, Any] | None = None) -> Any:
        return pgq.send_batch(self.queue, bodies, headers=headers, group=_group(headers))

    def read(self, qty: int, vt: int) -> list[Any]:
        return [(m.msg_id, m.message, m.read_ct) for m in pgq.read(self.queue, vt=vt, qty=qty)]

    def pop(self, qty: int) -> list[Any]:
        return [(m.msg_id, m.message, m.read_ct) for m in pgq.pop(self.queue, qty)]

    def delete(self, ids: int | list[int]) -> Any:
        return pgq.delete(self.queue, ids)

    def archive(self, ids: int | list[int]) -> Any:
        return pgq.archive(self.queue, ids)

    def purge(self) -> int:
        return pgq.purge_queue(self.queue)

    def drop(self) -> bool:
        return pgq.drop_queue(self.queue)


class PgmqDoor:
    """PGMQ's SQL functions, each call in a transaction of its own (a PGMQ client's)."""

    name = "pgmq"

    def __init__(self, queue: str, dsn: str) -> None:
        self.queue, self.dsn = queue, dsn

    def _rows(self, statement: str, *params: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            return conn.execute(statement, [self.queue, *params]).fetchall()

    def send(self, body: Any, *, headers: dict[str, Any] | None = None, delay: int = 0) -> Any:
        if headers is None and not delay:
            [(msg_id,)] = self._rows("SELECT * FROM pgmq.send(%s, %s)", Jsonb(body))
        elif not delay:
            [(msg_id,)] = self._rows(
                "SELECT * FROM pgmq.send(%s, %s, %s)", Jsonb(body), Jsonb(headers)
            )
        else:
            header = Jsonb(headers) if headers is not None else None
            [(msg_id,)] = self._rows(
                "SELECT * FROM pgmq.send(%s, %s, %s::jsonb, %s::int)", Jsonb(body), header, delay
            )
        return msg_id

    def send_batch(self, bodies: list[Any], *, headers: dict[str, Any] | None = None) -> Any:
        msgs = [Jsonb(b) for b in bodies]
        if headers is None:
            rows = self._rows("SELECT * FROM pgmq.send_batch(%s, %s::jsonb[])", msgs)
        else:
            rows = self._rows(
                "SELECT * FROM pgmq.send_batch(%s, %s::jsonb[], %s::jsonb[])",
                msgs,
                [Jsonb(headers)] * len(bodies),
            )
        return [r[0] for r in rows]

    def read(self, qty: int, vt: int) -> list[Any]:
        return self._rows("SELECT msg_id, message, read_ct FROM pgmq.read(%s, %s, %s)", vt, qty)

    def pop(self, qty: int) -> list[Any]:
        return self._rows("SELECT msg_id, message, read_ct FROM pgmq.pop(%s, %s)", qty)

    def delete(self, ids: int | list[int]) -> Any:
        if isinstance(ids, int):
            return self._rows("SELECT pgmq.delete(%s, %s::bigint)", ids)[0][0]
        return [r[0] for r in self._rows("SELECT * FROM pgmq.delete(%s, %s::bigint[])", ids)]

    def archive(self, ids: int | list[int]) -> Any:
        if isinstance(ids, int):
            return self._rows("SELECT pgmq.archive(%s, %s::bigint)", ids)[0][0]
        return [r[0] for r in self._rows("SELECT * FROM pgmq.archive(%s, %s::bigint[])", ids)]

    def purge(self) -> int:
        return int(self._rows("SELECT pgmq.purge_queue(%s)")[0][0])

    def drop(self) -> bool:
        return bool(self._rows("SELECT pgmq.drop_queue(%s)")[0][0])


Door = PgqDoor | PgmqDoor
Scenario = Callable[[Door, list[Any]], None]


class Ids:
    """msg_ids as their order of first appearance (each door draws its own)."""

    def __init__(self) -> None:
        self.seen: dict[int, str] = {}

    def __call__(self, value: Any) -> Any:
        if isinstance(value, bool) or value is None:
            return value
        if isinstance(value, int):
            return self.seen.setdefault(value, f"#{len(self.seen) + 1}")
        if isinstance(value, list | tuple):
            return [self(v) for v in value]
        return value


def _tens(seconds: float | None) -> int | None:
    return None if seconds is None else round(seconds / TENS) * TENS


def _ids_of(rows: list[tuple[Any, ...]]) -> Ids:
    ids = Ids()
    for row in sorted(rows):
        ids(row[0])
    return ids


def snapshot(dsn: str, queue_id: int, ids: Ids) -> dict[str, Any]:
    """What a scenario left of queue ``queue_id``: its live and archived rows, its counters,
    its limit row and whether it was dropped. A row's times are what they say about the
    message: visible or not (and in how many seconds, to ten), expiring or not (and after how
    long), archived. last_read_at is left out (see the last tests)."""
    tallies.flush()
    with psycopg.connect(dsn, autocommit=True) as conn:
        live = conn.execute(
            "SELECT msg_id, message, headers, attributes, label, priority, read_ct, group_id,"
            " dedup_id, max_retries, retry_delay, cancel_requested,"
            " extract(epoch FROM vt - clock_timestamp())::float8,"
            " extract(epoch FROM expires_at - enqueued_at)::float8"
            " FROM pgq_message WHERE queue_id = %s ORDER BY msg_id",
            [queue_id],
        ).fetchall()
        archived = conn.execute(
            "SELECT msg_id, message, headers, read_ct, group_id, outcome, result, error,"
            " archived_at IS NOT NULL FROM pgq_archived_message WHERE queue_id = %s"
            " ORDER BY msg_id",
            [queue_id],
        ).fetchall()
        counters = conn.execute(
            "SELECT kind, sum(n)::int FROM pgq_queue_counter WHERE queue_id = %s"
            " GROUP BY kind ORDER BY kind",
            [queue_id],
        ).fetchall()
        limit = conn.execute(
            "SELECT floor(tokens)::int, cardinality(held_ids) FROM pgq_queue_limit"
            " WHERE queue_id = %s",
            [queue_id],
        ).fetchall()
        dropped = conn.execute(
            "SELECT count(*) FROM pgq_dropped_queue WHERE queue_id = %s", [queue_id]
        ).fetchall()
        bindings = conn.execute(
            "SELECT count(*) FROM pgq_binding WHERE queue_id = %s", [queue_id]
        ).fetchall()
    return {
        "live": [
            (ids(r[0]), *r[1:12], "visible" if r[12] <= 0 else _tens(r[12]), _tens(r[13]))
            for r in live
        ],
        "archived": [(ids(r[0]), *r[1:]) for r in archived],
        "counters": counters,
        "limit": limit,
        "dropped": dropped,
        "bindings": bindings,
    }


def run(dsn: str, scenario: Scenario, door: Door, queue_id: int) -> dict[str, Any]:
    """Run ``scenario`` through ``door``; what it answered, left and notified."""
    answers: list[Any] = []
    # A listener past any pooler (docs/howto/pgbouncer.md); a mark sent after the scenario
    # ends what it heard, since notifications arrive in commit order.
    mark = "end-" + uuid.uuid4().hex
    channel = pgq_settings.NOTIFY_CHANNEL
    with psycopg.connect(direct_dsn(dsn), autocommit=True) as listener:
        listener.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel)))
        scenario(door, answers)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_notify(%s, %s)", [channel, mark])
        heard = []
        for notice in listener.notifies(timeout=10):
            if notice.payload == mark:
                break
            heard.append(notice.payload)
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT msg_id FROM pgq_message WHERE queue_id = %s UNION ALL "
            "SELECT msg_id FROM pgq_archived_message WHERE queue_id = %s",
            [queue_id, queue_id],
        ).fetchall()
    ids = _ids_of(rows + [(a,) for a in _flat_ids(answers)])
    names = {door.queue: "Q"}
    return {
        "answers": [_shaped(a, ids) for a in answers],
        "notified": [names.get(p, p) for p in heard],
        **snapshot(dsn, queue_id, ids),
    }


def _flat_ids(answers: list[Any]) -> Iterator[int]:
    for answer in answers:
        if isinstance(answer, int) and not isinstance(answer, bool):
            yield answer
        elif isinstance(answer, list):
            for item in answer:
                if isinstance(item, int) and not isinstance(item, bool):
                    yield item
                elif isinstance(item, tuple) and item:
                    yield item[0]


def _shaped(answer: Any, ids: Ids) -> Any:
    if isinstance(answer, list):
        return [
            (ids(item[0]), *item[1:]) if isinstance(item, tuple) else ids(item) for item in answer
        ]
    if isinstance(answer, datetime):
        return "timestamp"
    return ids(answer)


def both(dsn: str, scenario: Scenario, **queue_options: Any) -> dict[str, Any]:
    """Run ``scenario`` through both doors on two queues made alike; assert they left the
    same; return what the Python API's left."""
    results = {}
    for make in (PgqDoor, lambda name: PgmqDoor(name, dsn)):
        name = "dd_" + uuid.uuid4().hex[:12]
        queue = pgq.create_queue(name, **queue_options)
        door = make(name)
        results[door.name] = run(dsn, scenario, door, queue.pk)
    assert results["pgmq"] == results["pgq"]
    return results["pgq"]


# -- the scenarios -----------------------------------------------------------------------


def sends(door: Door, answers: list[Any]) -> None:
    answers.append(door.send({"a": 1}))
    answers.append(door.send({"b": 2}, headers={"k": "v", "x-pgmq-group": "g"}))
    answers.append(door.send({"c": 3}, delay=30))
    answers.append(door.send({"d": 4}, headers={"n": 1}, delay=60))


def test_sends_leave_the_same_rows_counters_and_wake_ups(doors: str) -> None:
    left = both(doors, sends)
    assert [row[-2] for row in left["live"]] == ["visible", "visible", 30, 60]
    assert left["counters"] == [("sent", 4)]
    assert left["notified"] == ["Q", "Q"]  # the delayed ones wake nobody yet


def batches(door: Door, answers: list[Any]) -> None:
    answers.append(door.send_batch([{"n": i} for i in range(5)]))
    answers.append(door.send_batch([{"m": 1}, {"m": 2}], headers={"h": "x"}))


def test_batches_keep_their_order_and_count(doors: str) -> None:
    left = both(doors, batches)
    assert [row[0] for row in left["live"]] == [f"#{i}" for i in range(1, 8)]
    assert left["counters"] == [("sent", 7)]
    assert left["notified"] == ["Q", "Q"]


def undelayed_sends(door: Door, answers: list[Any]) -> None:
    answers.append(door.send({"late": 1}))
    answers.append(door.send_batch([{"late": 2}, {"late": 3}]))
    answers.append(door.read(5, 30))


def test_a_queues_delivery_delay_holds_sends_that_give_none(doors: str) -> None:
    left = both(doors, undelayed_sends, delivery_delay=40, retention=3600)
    assert [row[-2:] for row in left["live"]] == [(40, 3600)] * 3
    assert left["answers"][-1] == [] and left["notified"] == []


def reads(door: Door, answers: list[Any]) -> None:
    door.send_batch([{"n": i} for i in range(6)])
    answers.append(door.read(2, 30))
    answers.append(door.read(10, 0))  # leased for no time: visible again at once
    answers.append(door.read(3, 60))
    answers.append(door.pop(2))
    answers.append(door.read(10, 30))


def test_reads_lease_pop_and_count_alike(doors: str) -> None:
    left = both(doors, reads, archive_on_ack=True)
    assert [len(a) for a in left["answers"]] == [2, 4, 3, 1, 0]
    assert [row[5] for row in left["archived"]] == ["acked"]  # the pop, archived on ack


def fifo_runs(door: Door, answers: list[Any]) -> None:
    for n, group in enumerate(["A", "A", "B", "A", "B", "C"]):
        pgq.send(door.queue, {"n": n}, group=group)
    answers.append(door.read(4, 30))
    answers.append(door.read(4, 30))
    answers.append(door.delete([m[0] for m in answers[0]]))
    answers.append(door.read(4, 30))


def test_fifo_reads_take_runs_of_a_group_and_block_it_while_leased(doors: str) -> None:
    left = both(doors, fifo_runs, fifo=True)
    first, second, _deleted, third = left["answers"]
    assert [m[1]["n"] for m in first] == [0, 1, 2, 3]  # A's run, then B's head
    assert [m[1]["n"] for m in second] == [5]  # A and B leased: only C
    assert [m[1]["n"] for m in third] == [4]  # B's next, now its head; C still leased
    assert left["counters"] == [("acked", 4), ("sent", 6)]


def limited_reads(door: Door, answers: list[Any]) -> None:
    door.send_batch([{"n": i} for i in range(6)])
    answers.append(door.read(5, 30))
    answers.append(door.read(5, 30))
    answers.append(door.delete(answers[0][0][0]))
    answers.append(door.read(5, 30))


def test_concurrency_limits_hold_for_both_doors(doors: str) -> None:
    left = both(doors, limited_reads, concurrency_limit=2)
    assert [len(a) for a in left["answers"] if isinstance(a, list)] == [2, 0, 1]
    assert left["limit"][0][1] == 2  # two leases held


def test_rate_limits_hold_for_both_doors(doors: str) -> None:
    left = both(doors, limited_reads, rate_limit=0.01)
    # A bucket of one token: one message, then none until it refills (100 s a token).
    assert [len(a) for a in left["answers"] if isinstance(a, list)] == [1, 0, 0]


def removals(door: Door, answers: list[Any]) -> None:
    ids = door.send_batch([{"n": i} for i in range(6)])
    door.read(2, 30)
    answers.append(door.delete(ids[0]))
    answers.append(door.delete(ids[0]))  # gone already
    answers.append(door.delete([ids[1], ids[2], ids[-1] + 10_000]))
    answers.append(door.archive(ids[3]))
    answers.append(door.archive([ids[4], ids[5]]))


@pytest.mark.parametrize("archive_on_ack", [False, True])
def test_deletes_and_archives_leave_the_same_rows(doors: str, archive_on_ack: bool) -> None:
    left = both(doors, removals, archive_on_ack=archive_on_ack)
    assert left["live"] == []
    outcomes = [row[5] for row in left["archived"]]
    acked = ["acked"] * 3 if archive_on_ack else []
    assert outcomes == [*acked, "archived", "archived", "archived"]
    assert left["counters"] == [("acked", 3), ("archived", 3), ("sent", 6)]


def purges(door: Door, answers: list[Any]) -> None:
    door.send_batch([{"n": i} for i in range(4)])
    door.read(1, 30)
    answers.append({"purged": door.purge()})
    answers.append({"purged": door.purge()})


def test_purges_count_alike(doors: str) -> None:
    left = both(doors, purges)
    assert left["answers"] == [{"purged": 4}, {"purged": 0}] and left["counters"] == [
        ("purged", 4),
        ("sent", 4),
    ]


def drops(door: Door, answers: list[Any]) -> None:
    pgq.bind_queue(door.queue, "dd_drops")
    door.send_batch([{"n": i} for i in range(3)])
    door.archive(door.read(1, 30)[0][0])
    answers.append(door.drop())


def test_drops_take_every_row_with_the_queue(doors: str) -> None:
    pgq.create_exchange("dd_drops")
    left = both(doors, drops)
    assert left["answers"] == [True]
    assert (left["live"], left["archived"], left["dropped"]) == ([], [], [(1,)])
    assert left["bindings"] == [(0,)]


def bounded_sends(door: Door, answers: list[Any]) -> None:
    answers.append(door.send_batch([{"n": 1}, {"n": 2}]))
    try:
        door.send({"n": 3})
    except (QueueFull, psycopg.errors.ProgramLimitExceeded):
        answers.append("full")


def test_a_full_queue_refuses_both_doors_sends(doors: str) -> None:
    left = both(doors, bounded_sends, max_length=2)
    assert left["answers"][-1] == "full" and len(left["live"]) == 2


def dead_letters(door: Door, answers: list[Any]) -> None:
    door.send_batch([{"n": 1}, {"n": 2}])
    for _ in range(3):
        answers.append(door.read(1, 0))  # each lease expires at once: a crashed consumer
    answers.append({"dead_lettered": dead_letter_expired_leases()})


def test_leases_past_their_retries_go_to_the_dead_letter_queue_alike(doors: str) -> None:
    dlq = "dlq_" + uuid.uuid4().hex[:12]
    pgq.create_queue(dlq)
    left = both(doors, dead_letters, max_retries=2, dead_letter_queue=dlq)
    assert left["answers"][-1] == {"dead_lettered": 1}  # the message read three times
    assert [row[6] for row in left["live"]] == [0]  # the other one, never read
    arrived = pgq.read(dlq, qty=5)
    assert len(arrived) == 2  # one from each door's queue
    assert all(m.headers["pgq_dead_letter"]["attempts"] == 3 for m in arrived)


# -- what PGMQ's contract makes different -----------------------------------------------


def test_pgmq_reads_set_last_read_at_and_its_archive_keeps_it(doors: str) -> None:
    """PGMQ's message record carries last_read_at, the time of the last read; the Python
    API's reads leave it as it was (docs/pgmq.md)."""
    name = "dd_" + uuid.uuid4().hex[:12]
    pgq.create_queue(name)
    pgmq = PgmqDoor(name, doors)
    by_pgq, by_pgmq = pgmq.send_batch([{"by": "pgq"}, {"by": "pgmq"}])
    pgq.read(name, qty=1)
    pgmq.read(1, 30)
    pgmq.archive([by_pgq, by_pgmq])
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT msg_id, last_read_at IS NOT NULL FROM pgq_archived_message"
            " WHERE msg_id = ANY(%s) ORDER BY msg_id",
            [[by_pgq, by_pgmq]],
        )
        assert cursor.fetchall() == [(by_pgq, False), (by_pgmq, True)]


def test_a_paused_queue_gives_pgmq_reads_nothing_where_pgq_read_raises(doors: str) -> None:
    """PGMQ's read has no error for a paused queue (PGMQ has no pause): it reads nothing."""
    name = "dd_" + uuid.uuid4().hex[:12]
    pgq.create_queue(name)
    pgmq = PgmqDoor(name, doors)
    pgmq.send({"n": 1})
    pgq.pause_queue(name)
    with pytest.raises(QueuePaused):
        pgq.read(name)
    assert pgmq.read(5, 30) == [] and pgmq.pop(5) == []
    pgq.resume_queue(name)
    assert [m[2] for m in pgmq.read(5, 30)] == [1]  # never leased while paused


def test_pgmq_acks_take_a_msg_id_and_no_receipt(doors: str) -> None:
    """PGMQ's delete names a message by its id alone: it acts whoever leased it last, where
    the Python API's receipt of an earlier lease is refused."""
    name = "dd_" + uuid.uuid4().hex[:12]
    pgq.create_queue(name)
    pgq.send(name, {"n": 1})
    [first] = pgq.read(name, vt=0)
    [second] = pgq.read(name, vt=30)
    assert second.read_ct == first.read_ct + 1
    assert pgq.delete(name, first.receipt) is False
    assert PgmqDoor(name, doors).delete(first.msg_id) is True
