"""Behind PgBouncer in transaction mode: what needs a session still works, and how.

Each test starts a real PgBouncer (Debian's 1.18, ``bench/pgbouncer.py``) with a pool of two
server connections in front of the test server and reaches the test database through it
as a second Django alias, ``pooled``, with the settings docs/howto/pgbouncer.md gives. A
pool that small makes the pooler's reuse of server connections certain rather than likely:
a session lock taken through it stays on a server connection the next client gets.
(``.ci/test-pgbouncer`` runs the whole suite through a PgBouncer as well.)
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import connections
from django.test import override_settings
from psycopg.conninfo import make_conninfo

import pgq_django as pgq
from bench.pgbouncer import PgBouncer
from pgq_django import partitions
from pgq_django.store import notify
from pgq_django.store.sql import partitions as partition_sql
from pgq_django.worker import maintenance
from pgq_django.worker.leader import Leader, LeaderConfig
from pgq_django.worker.loop import Worker
from pgq_django.worker.registry import Handler
from tests.conftest import wait_until

# The store's services under test: this process runs them, as a worker's does.
RUNS_SERVICES = True


def _direct_settings() -> dict[str, Any]:
    """Django keys that reach the test server without a pooler (the LISTEN connection)."""
    direct = os.environ.get("DIRECT_DATABASE_URL")
    if direct:  # this whole run goes through a PgBouncer: DATABASE_URL is not direct
        from pgq_django.testing import dsn_to_django

        db = dsn_to_django(direct)
    else:
        db = dict(connections["default"].settings_dict)
    # Every key, empty ones too: an empty PORT means libpq's default, not the pooler's port.
    return {k: db.get(k) or "" for k in ("HOST", "PORT", "USER", "PASSWORD")}


@pytest.fixture
def bouncer() -> Iterator[PgBouncer]:
    direct = _direct_settings()
    backend = make_conninfo(
        host=direct["HOST"], port=str(direct["PORT"] or 5432), user=direct["USER"] or None
    )
    with PgBouncer(backend, pool_size=2, max_db_connections=2) as running:
        yield running


@pytest.fixture
def pooled(transactional_db: Any, bouncer: PgBouncer) -> Iterator[dict[str, Any]]:
    """The ``default`` alias through ``bouncer`` for the test, PGQ set up for a pooler;
    answers the direct settings of the LISTEN connection.

    The alias's settings dict is the one every thread's connection shares, so the test's
    threads go through PgBouncer too; it is restored before the test database is flushed.
    """
    db = connections.settings["default"]
    keys = ("HOST", "PORT", "USER", "PASSWORD", "DISABLE_SERVER_SIDE_CURSORS")
    saved = {key: db.get(key) for key in keys}
    listen = _direct_settings()
    connections.close_all()
    db.update(HOST="127.0.0.1", PORT=str(bouncer.port), USER=bouncer.user)
    db.update(PASSWORD=bouncer.password, DISABLE_SERVER_SIDE_CURSORS=True)
    settings = {"PREPARED_STATEMENTS": False, "LISTEN_CONNECTION": listen}
    try:
        with override_settings(PGQ=settings):
            yield listen
    finally:
        notify.close_all()
        connections.close_all()
        db.update(saved)


def _pin_a_server(bouncer: PgBouncer) -> psycopg.Connection[Any]:
    """A client of ``bouncer`` inside a transaction: it holds one of the two servers."""
    conn = psycopg.connect(bouncer.url(connections["default"].settings_dict["NAME"]))
    conn.execute("SELECT 1")
    return conn


def test_queue_operations_run_without_prepared_statements_on_whichever_server(
    pooled: dict[str, Any], bouncer: PgBouncer
) -> None:
    name = "q_" + uuid.uuid4().hex[:12]
    pgq.create_queue(name)
    sent = []
    for i in range(12):
        # Every other round another client holds a server in a transaction, so the queue's
        # statements move between the pool's two server connections.
        other = _pin_a_server(bouncer) if i % 2 else None
        try:
            sent.append(pgq.send(name, {"i": i}))
            sent += pgq.send_batch(name, [{"i": i, "batch": True}] * 3)
            [message] = pgq.read(name, qty=1)
            assert pgq.delete(name, message.receipt) is True
        finally:
            if other is not None:
                other.close()
    assert pgq.metrics(name).queue_length == len(sent) - 12


def test_one_leader_at_a_time_through_the_pooler(pooled: dict[str, Any]) -> None:
    fast = LeaderConfig(interval=0.05)
    first = Leader([maintenance.Duty("a", lambda: None, 3600)], config=fast)
    second = Leader([], config=fast)
    try:
        assert first.try_elect() is True
        # A session lock would stay on the server connection the first statement used; the
        # pool hands that same connection to the second leader, which would then hold the
        # lock "again". The transaction's lock keeps its server connection to itself.
        assert second.try_elect() is False
        assert second.try_elect() is False
        first.resign()
        assert second.try_elect() is True
        assert first.try_elect() is False
    finally:
        first.resign()
        second.resign()


def test_the_leader_lock_goes_with_its_process_connection(pooled: dict[str, Any]) -> None:
    leader = Leader([])
    assert leader.try_elect() is True
    assert leader.connection is not None
    leader.connection.close()  # the process died: its client connection to the pooler is gone
    follower = Leader([])
    try:
        wait_until(follower.try_elect, what="the lock to be released with its transaction")
    finally:
        follower.resign()


def test_upkeep_is_busy_while_another_run_holds_its_lock_and_leaves_none_behind(
    pooled: dict[str, Any], bouncer: PgBouncer
) -> None:
    with psycopg.connect(bouncer.url(connections["default"].settings_dict["NAME"])) as other:
        assert other.execute(partition_sql.TRY_UPKEEP_LOCK).fetchone()[0]  # type: ignore[index]
        assert partitions.run_maintenance() == [
            "busy: another upkeep run holds the lock; nothing done"
        ]
        other.rollback()
    assert "busy: another upkeep run holds the lock; nothing done" not in (
        partitions.run_maintenance()
    )
    # Nothing was left on a pooled server connection: every client can take the lock now.
    for _ in range(2):
        with psycopg.connect(bouncer.url(connections["default"].settings_dict["NAME"])) as conn:
            assert conn.execute(partition_sql.TRY_UPKEEP_LOCK).fetchone()[0]  # type: ignore[index]


def test_listen_goes_past_the_pooler_and_hears_sends_made_through_it(
    pooled: dict[str, Any],
) -> None:
    name = "q_" + uuid.uuid4().hex[:12]
    pgq.create_queue(name)
    params = notify.listen_params()
    assert params["host"] == pooled["HOST"]
    assert params["dbname"] == connections["default"].settings_dict["NAME"]
    with notify.interest(name) as wakeups:
        hub = notify.hub()
        backend = hub.backend_pid
        assert backend is not None
        with psycopg.connect(make_conninfo(**params)) as admin:
            row = admin.execute(
                "SELECT query FROM pg_stat_activity WHERE pid = %s", [backend]
            ).fetchone()
        assert row is not None and row[0].startswith("LISTEN")  # a real session, not pooled

        def send() -> None:
            try:
                pgq.send(name, {"hello": 1})
            finally:
                connections.close_all()  # this thread's

        sender = threading.Thread(target=send)
        sender.start()
        sender.join()
        assert wakeups.wait(30) is True  # woken by the notification, not the timeout


@pytest.mark.django_db(transaction=True)
def test_without_listen_waiters_poll_and_no_connection_is_opened(queue_name: str) -> None:
    pgq.create_queue(queue_name)
    with override_settings(PGQ={"LISTEN": False}):
        with notify.interest(queue_name) as wakeups:
            hub = notify.hub()
            assert hub.ready.is_set() and hub.backend_pid is None and hub.connects == 0
            pgq.send(queue_name, {"n": 0})
            assert wakeups.wait(0.05) is False  # nothing listens, so nothing wakes it
        assert [m.message for m in pgq.pop(queue_name)] == [{"n": 0}]
        found: list[Any] = []

        def read() -> None:
            try:
                found.extend(pgq.read_with_poll(queue_name, max_poll_seconds=20))
            except Exception as exc:
                found.append(exc)
            finally:
                connections.close_all()  # this thread's

        reader = threading.Thread(target=read)
        reader.start()
        wait_until(lambda: hub.waiters() == 1 or found, what="the reader to wait")
        pgq.send(queue_name, {"n": 1})  # committed while it waits: only its poll finds it
        reader.join()
        assert [m.message for m in found] == [{"n": 1}]
        worker = Worker(handlers={queue_name: Handler(queue_name, lambda m: None)})
        assert worker.listen is False
