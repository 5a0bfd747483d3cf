"""The PGMQ SQL interface: installed and removed by migrate, refusing what it does not own,
its views kept in step with queues made and dropped through either API, and messages
crossing between pgq and pgmq on one queue."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import override_settings
from pgmq.install import get_embedded_install_sql
from psycopg.types.json import Jsonb

import pgq_django as pgq
from pgq_django.pgmq import install
from pgq_django.pgmq.install import PgmqSchemaConflict
from pgq_django.store.sql.fragments import TRANSIENT_FIRST_ID
from tests.conftest import direct_dsn
from tests.pgmq_support import client, ours_dsn, ours_sql, pgmq_settings, pgmq_sql, unique_queue

__all__ = ["pgmq_sql"]  # the fixture, imported for the tests below


def _schema_comment(name: str = "pgmq") -> str | None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT obj_description(oid, 'pg_namespace') FROM pg_namespace WHERE nspname = %s",
            [name],
        )
        row = cursor.fetchone()
    return None if row is None else (row[0] or "")


def _relation_exists(name: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [name])
        return bool(cursor.fetchone()[0])


@pytest.mark.django_db(transaction=True)
def test_migrate_installs_the_schema_when_the_setting_names_it_and_removes_it_when_unset() -> None:
    with override_settings(PGQ=pgmq_settings()):
        call_command("migrate", verbosity=0)
        assert (_schema_comment() or "").startswith("pgq_django:")
        assert ours_sql("SELECT count(*) FROM pgmq.list_queues()") == [(0,)]
        # A second migrate (an upgrade) installs it again, whole.
        call_command("migrate", verbosity=0)
        assert _relation_exists("pgmq.meta")
    call_command("migrate", verbosity=0)
    assert _schema_comment() is None


@pytest.mark.django_db(transaction=True)
def test_a_foreign_pgmq_schema_is_refused_and_left_as_it_was() -> None:
    ours_sql(
        "CREATE SCHEMA pgmq; CREATE TABLE pgmq.theirs (x int); INSERT INTO pgmq.theirs VALUES (1)"
    )
    try:
        with override_settings(PGQ=pgmq_settings()), pytest.raises(PgmqSchemaConflict) as err:
            install.install()
        assert "not made by pgq_django" in str(err.value)
        # Unsetting the setting does not remove someone else's schema either.
        call_command("migrate", verbosity=0)
        assert ours_sql("SELECT x FROM pgmq.theirs") == [(1,)]
        assert not _relation_exists("pgmq.meta")
    finally:
        ours_sql("DROP SCHEMA pgmq CASCADE")


@pytest.mark.django_db(transaction=True)
def test_a_schema_name_that_is_not_a_plain_sql_name_is_refused() -> None:
    bad = pgmq_settings(PGMQ_SCHEMA='pgmq"; DROP TABLE x; --')
    with override_settings(PGQ=bad), pytest.raises(PgmqSchemaConflict, match="lower-case"):
        install.install()


def test_views_follow_queues_made_and_dropped_through_either_api(pgmq_sql: str) -> None:
    ours, theirs = unique_queue("ours"), unique_queue("theirs")
    pgq.create_queue(ours)
    ours_sql("SELECT pgmq.create(%s)", [theirs])
    for name in (ours, theirs):
        assert _relation_exists(f"pgmq.q_{name}") and _relation_exists(f"pgmq.a_{name}")
    names = {r[0] for r in ours_sql("SELECT queue_name FROM pgmq.meta")}
    assert {ours, theirs} <= names

    assert ours_sql("SELECT pgmq.drop_queue(%s)", [ours]) == [(True,)]
    assert pgq.drop_queue(theirs)
    for name in (ours, theirs):
        assert not _relation_exists(f"pgmq.q_{name}") and not _relation_exists(f"pgmq.a_{name}")
    assert not pgq.list_queues() or all(q.name not in (ours, theirs) for q in pgq.list_queues())


def test_update_of_vt_through_a_queue_view_moves_only_that_queues_messages(pgmq_sql: str) -> None:
    a, b = unique_queue("a"), unique_queue("b")
    for name in (a, b):
        ours_sql("SELECT pgmq.create(%s)", [name])
        ours_sql("SELECT pgmq.send(%s, '{\"n\": 1}')", [name])
    ours_sql(f"UPDATE pgmq.q_{a} SET vt = now() + interval '1 hour'")
    assert ours_sql("SELECT count(*) FROM pgmq.read(%s, 30, 10)", [a]) == [(0,)]
    assert ours_sql("SELECT count(*) FROM pgmq.read(%s, 30, 10)", [b]) == [(1,)]
    # An insert through the view cannot say which queue: refused, nothing added.
    with pytest.raises(psycopg.errors.NotNullViolation):
        ours_sql(f"INSERT INTO pgmq.q_{a} (vt, message) VALUES (now(), '{{}}')")
    assert ours_sql(f"SELECT count(*) FROM pgmq.q_{a}") == [(1,)]


def test_a_pgq_send_is_read_by_pgmq_and_a_pgmq_send_by_pgq(pgmq_sql: str) -> None:
    name = unique_queue()
    pgq.create_queue(name)
    first = pgq.send(name, {"from": "pgq"}, headers={"h": 1})
    with client(pgmq_sql) as pgmq:
        got = pgmq.read(name, vt=30)
        assert (got.msg_id, got.message, got.headers, got.read_ct) == (
            first,
            {"from": "pgq"},
            {"h": 1},
            1,
        )
        assert got.last_read_at is not None
        second = pgmq.send(name, {"from": "pgmq"})
        [leased] = pgq.read(name)
        assert (leased.msg_id, leased.message, leased.headers) == (second, {"from": "pgmq"}, {})
        assert pgq.delete(name, leased.receipt)
        assert pgmq.delete(name, first)
    assert pgq.metrics(name).queue_length == 0


def test_a_queue_made_through_pgmq_has_pgmqs_semantics_for_pgq_too(pgmq_sql: str) -> None:
    name = unique_queue()
    ours_sql("SELECT pgmq.create(%s)", [name])
    queue = pgq.list_queues()
    made = next(q for q in queue if q.name == name)
    assert made.dead_letter_queue is None
    assert made.max_retries >= 2**31 - 1 and made.retention >= 100 * 365 * 24 * 3600
    assert made.durable and made.max_length is None and made.delivery_delay == 0
    # A worker's failed delivery is retried after a visibility timeout, not in a hot loop.
    assert (made.retry_delay, made.backoff) == (30, "none")
    # Kept until taken: messages sent through either API carry no expiry at all.
    sent = [
        ours_sql("SELECT * FROM pgmq.send(%s, '1'::jsonb)", [name])[0][0],
        *(
            row[0]
            for row in ours_sql("SELECT * FROM pgmq.send_batch(%s, ARRAY['2'::jsonb])", [name])
        ),
        pgq.send(name, 3),
    ]
    expiry = ours_sql("SELECT expires_at FROM pgq_message WHERE msg_id = ANY(%s)", [sent])
    assert expiry == [(None,)] * 3


def test_a_pgmq_send_wakes_pgq_waiters_on_pgqs_channel(pgmq_sql: str) -> None:
    name = unique_queue()
    pgq.create_queue(name)
    got: list[Any] = []

    def wait() -> None:
        got.extend(pgq.read_with_poll(name, max_poll_seconds=15, poll_interval_ms=60_000))

    # A poll interval longer than the wait: only the notification can deliver in time.
    waiter = threading.Thread(target=wait)
    waiter.start()
    try:
        ours_sql("SELECT pgmq.send(%s, '{\"wake\": true}')", [name])
        waiter.join(timeout=10)
    finally:
        waiter.join()
    assert [m.message for m in got] == [{"wake": True}]


def test_topic_bindings_made_through_pgmq_route_pgq_publish_too(pgmq_sql: str) -> None:
    errors, everything = unique_queue("errors"), unique_queue("all")
    for name in (errors, everything):
        ours_sql("SELECT pgmq.create(%s)", [name])
    ours_sql("SELECT pgmq.bind_topic('*.error', %s)", [errors])
    ours_sql("SELECT pgmq.bind_topic('app.#', %s)", [everything])
    ids = pgq.publish("pgmq_topics", {"e": 1}, routing_key="app.error")
    assert len(ids) == 2
    assert len(pgq.publish("pgmq_topics", {"e": 2}, routing_key="app.db.slow")) == 1
    assert pgq.publish("pgmq_topics", {"e": 3}, routing_key="db.slow") == []
    assert ours_sql("SELECT count(*) FROM pgmq.read(%s, 30, 10)", [errors]) == [(1,)]
    assert ours_sql("SELECT count(*) FROM pgmq.read(%s, 30, 10)", [everything]) == [(2,)]


def test_insert_notifications_fire_for_pgq_sends_and_leave_no_trigger_when_off(
    pgmq_sql: str,
) -> None:
    name = unique_queue()
    pgq.create_queue(name)
    ours_sql("SELECT pgmq.enable_notify_insert(%s, 0)", [name])
    # A listener connects past any pooler, as docs/howto/pgbouncer.md says LISTEN must.
    with psycopg.connect(direct_dsn(pgmq_sql), autocommit=True) as listener:
        listener.execute(f'LISTEN "pgmq.q_{name}.INSERT"')
        pgq.send(name, {"n": 1})
        heard = [n.channel for n in listener.notifies(timeout=10, stop_after=1)]
    assert heard == [f"pgmq.q_{name}.INSERT"]
    ours_sql("SELECT pgmq.disable_notify_insert(%s)", [name])
    trigger = "SELECT count(*) FROM pg_trigger WHERE tgname = 'pgq_pgmq_notify_insert'"
    assert ours_sql(trigger) == [(0,)]


def _sent_count(name: str) -> int:
    return int(
        ours_sql(
            "SELECT coalesce(sum(c.n), 0) FROM pgq_queue_counter c JOIN pgq_queue q "
            "ON q.id = c.queue_id WHERE q.name = %s AND c.kind = 'sent'",
            [name],
        )[0][0]
    )


def test_the_usual_send_and_batch_store_in_order_count_and_wake(pgmq_sql: str) -> None:
    """send(queue_name, msg) and send_batch(queue_name, msgs) write their messages with
    their own statements: ids rise in the order given, every message is counted, and
    pgq_django's channel hears of them, as through the general way."""
    name = unique_queue()
    ours_sql("SELECT pgmq.create(%s)", [name])
    bodies = [{"n": i} for i in range(60)]
    with psycopg.connect(direct_dsn(pgmq_sql), autocommit=True) as listener:
        listener.execute('LISTEN "pgq"')
        one = ours_sql("SELECT * FROM pgmq.send(%s, %s)", [name, Jsonb({"n": -1})])
        many = ours_sql("SELECT * FROM pgmq.send_batch(%s, %s)", [name, [Jsonb(b) for b in bodies]])
        heard = [n.payload for n in listener.notifies(timeout=10, stop_after=2)]
    assert heard == [name, name]
    ids = [one[0][0], *(row[0] for row in many)]
    assert ids == sorted(ids) and len(set(ids)) == 61
    stored = ours_sql(
        "SELECT message, headers, expires_at FROM pgq_message WHERE msg_id = ANY(%s) "
        "ORDER BY msg_id",
        [ids],
    )
    assert stored == [({"n": -1}, {}, None), *((b, {}, None) for b in bodies)]
    assert _sent_count(name) == 61


def test_the_usual_send_and_batch_hand_other_queues_to_the_general_way(pgmq_sql: str) -> None:
    """A queue with a byte budget, a name in another case and a non-durable queue go the
    general way, which keeps each one's rules."""
    small = unique_queue()
    pgq.create_queue(small, max_message_size=64)
    big = Jsonb({"pad": "x" * 100})
    for statement in (
        "SELECT * FROM pgmq.send(%s, %s)",
        "SELECT * FROM pgmq.send_batch(%s, ARRAY[%s]::jsonb[])",
    ):
        with pytest.raises(psycopg.errors.ProgramLimitExceeded, match="max_message_size"):
            ours_sql(statement, [small, big])
    fits = ours_sql("SELECT * FROM pgmq.send_batch(%s, ARRAY['{}', '[]']::jsonb[])", [small])
    assert len(fits) == 2 and _sent_count(small) == 2
    assert pgq.metrics(small).queue_length == 2

    mixed = "Mixed" + unique_queue()
    ours_sql("SELECT pgmq.create(%s)", [mixed])
    ours_sql("SELECT * FROM pgmq.send(%s, '1')", [mixed.upper()])
    ours_sql("SELECT * FROM pgmq.send_batch(%s, ARRAY['2', '3']::jsonb[])", [mixed.lower()])
    with client(pgmq_sql) as pgmq:
        assert [m.message for m in pgmq.read_batch(mixed, vt=30, batch_size=5)] == [1, 2, 3]

    fleeting = unique_queue()
    ours_sql("SELECT pgmq.create_unlogged(%s)", [fleeting])
    sent = ours_sql("SELECT * FROM pgmq.send_batch(%s, ARRAY['1', '2']::jsonb[])", [fleeting])
    assert all(row[0] >= TRANSIENT_FIRST_ID for row in sent)
    with pytest.raises(psycopg.errors.UndefinedTable, match="does not exist"):
        ours_sql("SELECT * FROM pgmq.send_batch(%s, ARRAY['1']::jsonb[])", [unique_queue()])


def _lease_plan(name: str, settings: list[str]) -> str:
    """The plan a fresh session's read of ``name`` makes and keeps for the candidate
    messages (auto_explain of the statements inside the read), under ``settings``."""
    shown: list[str] = []
    with psycopg.connect(ours_dsn()) as conn:  # one transaction, rolled back
        for setting in settings:
            conn.execute(setting)
        conn.execute("LOAD 'auto_explain'")
        for setting in ("log_min_duration = 0", "log_nested_statements = on", "log_level = notice"):
            conn.execute(f"SET LOCAL auto_explain.{setting}")
        conn.add_notice_handler(lambda d: shown.append(d.message_primary or ""))
        conn.execute("SELECT * FROM pgmq.read(%s, 30, 1)", [name])
        conn.rollback()
    return next(plan for plan in shown if " c AS (" in plan and "Query Text" in plan)


def _cte(plan: str, name: str) -> str:
    """The part of ``plan`` under its ``CTE name`` node (the lines indented below it)."""
    lines = plan.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == f"CTE {name}")
    depth = len(lines[start]) - len(lines[start].lstrip())
    below = []
    for line in lines[start + 1 :]:
        if len(line) - len(line.lstrip()) <= depth:
            break
        below.append(line)
    return "\n".join(below)


def test_a_read_takes_the_head_of_the_backlog_even_when_statistics_say_it_is_empty(
    pgmq_sql: str,
) -> None:
    """After a vacuum or ANALYZE of idle message partitions the planner counts them empty.
    A read's plan is made once per session, for any qty, and kept: it must still walk the
    ready index in order to the first visible message, never sort the queue's backlog."""
    name = unique_queue()
    ours_sql("SELECT pgmq.create(%s)", [name])
    ours_sql("SELECT pgmq.send_batch(%s, array_fill('{}'::jsonb, ARRAY[300]))", [name])
    counted_empty = (
        "UPDATE pg_class SET reltuples = 0, relpages = greatest(relpages, 1) "
        "WHERE oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'pgq_message'::regclass)"
    )
    plan = _lease_plan(name, [counted_empty])
    candidates = _cte(plan, "c")
    assert "Sort" not in candidates.replace("Sort Key", ""), candidates
    assert "Merge Append" in candidates or "Index Scan" in candidates, candidates


def test_a_bounded_queue_refuses_a_pgmq_send_when_full_and_keeps_what_it_had(
    pgmq_sql: str,
) -> None:
    name = unique_queue()
    pgq.create_queue(name)
    pgq.alter_queue(name, max_length=2)
    ours_sql("SELECT pgmq.send_batch(%s, ARRAY['{}', '{}']::jsonb[])", [name])
    with pytest.raises(psycopg.errors.ProgramLimitExceeded, match="is full"):
        ours_sql("SELECT pgmq.send(%s, '{\"over\": true}')", [name])
    assert ours_sql(f"SELECT count(*) FROM pgmq.q_{name}") == [(2,)]


def test_the_pgmq_schema_is_readable_by_pg_monitor(pgmq_sql: str) -> None:
    name = unique_queue()
    ours_sql("SELECT pgmq.create(%s)", [name])
    for relation in ("pgmq.meta", f"pgmq.q_{name}", f"pgmq.a_{name}"):
        assert ours_sql("SELECT has_table_privilege('pg_monitor', %s, 'SELECT')", [relation]) == [
            (True,)
        ]


@pytest.mark.django_db(transaction=True)
def test_queues_move_over_from_real_pgmq_as_the_docs_say() -> None:
    """docs/pgmq.md's move, on PGMQ 1.13.0 installed from the pgmq package's SQL."""
    with psycopg.connect(ours_dsn()) as conn:
        conn.execute(get_embedded_install_sql())  # type: ignore[arg-type]
    try:
        with client(ours_dsn()) as old:
            old.create_queue("orders")
            kept = old.send_batch("orders", [{"n": 1}, {"n": 2}, {"n": 3}])
            old.archive("orders", kept[0])
        # Refused under PGMQ's own schema name; installed for the move under another.
        with override_settings(PGQ=pgmq_settings()), pytest.raises(PgmqSchemaConflict):
            install.install()
        with override_settings(PGQ=pgmq_settings(PGMQ_SCHEMA="pgmq_move")):
            call_command("migrate", verbosity=0)
            ours_sql(
                """
                BEGIN;
                SELECT pgmq_move.create(queue_name) FROM pgmq.meta;
                INSERT INTO pgq_message (msg_id, queue_id, message, headers, read_ct,
                                         enqueued_at, vt, last_read_at, expires_at)
                SELECT m.msg_id, q.id, m.message, coalesce(m.headers, '{}'), m.read_ct,
                       m.enqueued_at, m.vt, m.last_read_at,
                       m.enqueued_at + make_interval(secs => q.retention)
                FROM pgmq.q_orders m JOIN pgq_queue q ON q.name = 'orders';
                INSERT INTO pgq_archived_message (msg_id, queue_id, message, headers, read_ct,
                                                  enqueued_at, vt, last_read_at, archived_at,
                                                  outcome)
                SELECT a.msg_id, q.id, a.message, coalesce(a.headers, '{}'), a.read_ct,
                       a.enqueued_at, a.vt, a.last_read_at, a.archived_at, 'archived'
                FROM pgmq.a_orders a JOIN pgq_queue q ON q.name = 'orders';
                SELECT setval('pgq_message_msg_id_seq',
                              greatest((SELECT max(msg_id) FROM pgq_message),
                                       (SELECT max(msg_id) FROM pgq_archived_message)));
                COMMIT;
                """
            )
            ours_sql("DROP SCHEMA pgmq CASCADE; DROP SCHEMA pgmq_move CASCADE")
        with override_settings(PGQ=pgmq_settings()):
            call_command("migrate", verbosity=0)
            with client(ours_dsn()) as new:
                moved = new.read("orders", vt=30, qty=10)
                assert [(m.msg_id, m.message) for m in moved] == [
                    (kept[1], {"n": 2}),
                    (kept[2], {"n": 3}),
                ]
                assert ours_sql("SELECT msg_id FROM pgmq.a_orders") == [(kept[0],)]
                assert new.send("orders", {"n": 4}) > kept[2]
    finally:
        ours_sql("DROP SCHEMA IF EXISTS pgmq CASCADE; DROP SCHEMA IF EXISTS pgmq_move CASCADE")


def test_pgmq_delete_on_a_queue_that_archives_on_ack_archives_as_acked(pgmq_sql: str) -> None:
    name = unique_queue()
    pgq.create_queue(name, archive_on_ack=True)
    sent = pgq.send(name, {"keep": True})
    [(leased,)] = ours_sql("SELECT msg_id FROM pgmq.read(%s, 30, 1)", [name])
    assert leased == sent
    assert ours_sql("SELECT pgmq.delete(%s, %s::bigint)", [name, sent]) == [(True,)]
    assert ours_sql("SELECT pgmq.delete(%s, %s::bigint)", [name, sent]) == [(False,)]
    assert ours_sql(
        "SELECT outcome, last_read_at IS NOT NULL FROM pgq_archived_message WHERE msg_id = %s",
        [sent],
    ) == [("acked", True)]
