"""The usual send, when it commits on its own, runs through psycopg's libpq wrapper
(``seams.run_through_libpq``): prepared once per session under a name of its own, then
bound and executed without psycopg's cursor. These show that it stores and answers what the
path through psycopg does, is never taken inside the caller's transaction, recovers a
session that lost its prepared statement, reports errors as psycopg would, and lets other
threads run while it waits for the server. They commit (``transaction=True``): inside the
per-test transaction of ``db`` the path is never taken.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection, transaction
from django.test import override_settings

import pgq_django as pgq
from pgq_django import seams
from pgq_django.conf import settings as pgq_settings
from pgq_django.models import Message
from pgq_django.store.notify import connection_params, listen_params
from tests.conftest import wait_until
from tests.integration.test_reconnect import POOLED, admin, backend_pid, terminate

__all__ = ["admin"]  # the fixture, shared with the reconnection tests

pytestmark = pytest.mark.django_db(transaction=True)

WITHOUT_LIBPQ = {"FAST_PATHS": [name for name in seams.SHORTCUTS if name != "libpq_statement"]}


def _prepared() -> int:
    """How many statements a session that sent once prepared through libpq: one, unless
    prepared statements are off (behind a transaction pooler) or the shortcut is (the CI row
    with ``FAST_PATHS`` off), where the path is not taken."""
    taken = seams.on("libpq_statement") and seams.on("unwrapped_cursor")
    return 1 if pgq_settings.PREPARED_STATEMENTS and taken else 0


def _libpq_statements() -> list[str]:
    """The statements this session prepared through libpq."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT statement FROM pg_prepared_statements WHERE name LIKE %s ORDER BY name",
            ["\\_pgq\\_libpq\\_%"],
        )
        return [row[0] for row in cursor.fetchall()]


def _stored(msg_id: int) -> tuple[Any, ...]:
    m = Message.objects.get(msg_id=msg_id)
    return (m.message, m.headers, m.attributes, m.priority, m.read_ct, m.group_id, m.dedup_id)


def test_a_send_on_its_own_is_prepared_once_and_stores_what_psycopg_stores(
    queue_name: str,
) -> None:
    pgq.create_queue(queue_name)
    connection.close()  # a new session: nothing prepared yet
    fast = [pgq.send(queue_name, {"n": i, "text": "ü'\"%s"}) for i in range(3)]
    prepared = _libpq_statements()
    assert len(prepared) == _prepared()
    assert all("INSERT INTO pgq_message" in text and "$1" in text for text in prepared)
    with override_settings(PGQ=WITHOUT_LIBPQ):
        connection.close()
        slow = [pgq.send(queue_name, {"n": i, "text": "ü'\"%s"}) for i in range(3)]
        assert _libpq_statements() == []
    assert fast == sorted(fast) and slow == sorted(slow) and fast[-1] < slow[0]
    assert [_stored(i) for i in fast] == [_stored(i) for i in slow]
    assert [m.message["n"] for m in pgq.read(queue_name, qty=10)] == [0, 1, 2, 0, 1, 2]


def test_a_send_inside_a_transaction_goes_through_psycopg_and_rolls_back(
    queue_name: str,
) -> None:
    pgq.create_queue(queue_name)
    connection.close()

    class Undo(Exception):
        pass

    with pytest.raises(Undo), transaction.atomic():
        pgq.send(queue_name, {"kept": False})
        assert _libpq_statements() == []
        raise Undo
    assert pgq.read(queue_name) == []
    pgq.send(queue_name, {"kept": True})
    assert len(_libpq_statements()) == _prepared()
    assert [m.message for m in pgq.read(queue_name)] == [{"kept": True}]


def test_a_session_that_lost_its_prepared_statements_prepares_the_send_again(
    queue_name: str,
) -> None:
    pgq.create_queue(queue_name)
    first = pgq.send(queue_name, {"n": 1})
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")
    assert _libpq_statements() == []
    second = pgq.send(queue_name, {"n": 2})
    assert len(_libpq_statements()) == _prepared()
    assert [m.msg_id for m in pgq.read(queue_name, qty=10)] == [first, second]


def test_a_connection_threads_may_share_keeps_to_psycopg(queue_name: str) -> None:
    pgq.create_queue(queue_name)
    connection.close()
    connection.inc_thread_sharing()
    try:
        sent = pgq.send(queue_name, {"shared": True})
        assert _libpq_statements() == []
    finally:
        connection.dec_thread_sharing()
    assert [m.msg_id for m in pgq.read(queue_name)] == [sent]


_REFUSE = """
CREATE FUNCTION pgq_test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.message ? 'refuse' THEN
        RAISE EXCEPTION 'refused by the test trigger' USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER pgq_test_refuse BEFORE INSERT ON pgq_message
    FOR EACH ROW EXECUTE FUNCTION pgq_test_refuse();
"""


def test_an_error_is_raised_as_psycopg_raises_it_and_stores_nothing(queue_name: str) -> None:
    pgq.create_queue(queue_name)
    with connection.cursor() as cursor:
        cursor.execute(_REFUSE)
    try:
        raised = []
        for settings in ({}, WITHOUT_LIBPQ):
            with override_settings(PGQ=settings), pytest.raises(Exception) as caught:
                pgq.send(queue_name, {"refuse": True})
            raised.append((type(caught.value), str(caught.value).splitlines()[0]))
        assert raised[0] == raised[1]
        assert "refused by the test trigger" in raised[0][1]
        # The session is fine afterwards, and the refused sends left nothing behind.
        sent = pgq.send(queue_name, {"refuse_not": True})
        assert [m.msg_id for m in pgq.read(queue_name, qty=10)] == [sent]
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER pgq_test_refuse ON pgq_message")
            cursor.execute("DROP FUNCTION pgq_test_refuse()")


def test_a_session_the_server_ended_is_replaced_and_the_send_stored_once(
    queue_name: str, admin: psycopg.Connection[Any]
) -> None:
    pgq.create_queue(queue_name)
    pgq.send(queue_name, {"n": 1})
    terminate(admin, backend_pid())
    pgq.send(queue_name, {"n": 2})
    assert [m.message["n"] for m in pgq.read(queue_name, qty=10)] == [1, 2]


def test_a_send_waiting_for_the_server_lets_other_threads_run(
    queue_name: str, admin: psycopg.Connection[Any]
) -> None:
    pgq.create_queue(queue_name)
    spins = 0
    stop = threading.Event()

    def spin() -> None:
        nonlocal spins
        while not stop.is_set():
            spins += 1

    def send() -> None:  # on a thread of its own, with its own Django connection
        try:
            pgq.send(queue_name, {"waited": True})
        finally:
            connection.close()

    waiting = "SELECT 1 FROM pg_locks WHERE NOT granted AND relation = 'pgq_message'::regclass"
    sender = threading.Thread(target=send)
    with admin.transaction():
        admin.execute("LOCK TABLE pgq_message IN EXCLUSIVE MODE")
        sender.start()
        wait_until(lambda: admin.execute(waiting).fetchone() is not None, what="the send to wait")
        spinner = threading.Thread(target=spin)
        spinner.start()
        before = spins
        # Progress of the spinner while the send still waits on the lock: the waiting
        # thread does not hold the GIL.
        wait_until(lambda: spins > before + 100_000, what="the spinner to run")
        stop.set()
        spinner.join()
        assert sender.is_alive() and admin.execute(waiting).fetchone() is not None
    sender.join(30)
    assert not sender.is_alive()
    assert [m.message for m in pgq.read(queue_name, qty=10)] == [{"waited": True}]


@pytest.fixture
def ctrl_c_raises() -> Iterator[None]:
    """Python's own SIGINT handler for the test, whatever the process inherited. A process
    started in the background by a non-interactive shell (as a CI job may be) begins with
    SIGINT ignored, and Python then leaves it ignored: a Ctrl-C could not reach the send at
    all. Whether something earlier in the run had installed Python's handler decided, until
    this fixture, whether the test below passed or waited for ever."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("settings", [{}, WITHOUT_LIBPQ], ids=["libpq", "psycopg"])
@pytest.mark.parametrize("session", ["prepared", "new"])
@pytest.mark.usefixtures("ctrl_c_raises")
def test_an_interrupted_send_is_cancelled_and_leaves_the_session_usable(
    queue_name: str, admin: psycopg.Connection[Any], settings: dict[str, Any], session: str
) -> None:
    """Ctrl-C reaches a send waiting on a lock, and the session is still usable after: a
    send whose statement the session has prepared (waiting in its execution), and the
    first send of a new session (waiting while it prepares, which takes the table's lock
    as the statement is parsed)."""
    pgq.create_queue(queue_name)
    pgq.send(queue_name, {"warm": True})
    if session == "new":
        connection.close()  # the next send prepares its statement in a new session
    main = threading.main_thread().ident
    assert main == threading.get_ident()
    waiting = "SELECT pid FROM pg_locks WHERE NOT granted AND relation = 'pgq_message'::regclass"
    reached: list[bool] = []

    def interrupt() -> None:  # Ctrl-C, once the send waits on the lock
        params = listen_params() if POOLED else connection_params()
        with psycopg.connect(**params, autocommit=True) as watcher:
            wait_until(lambda: watcher.execute(waiting).fetchone() is not None)
            signal.pthread_kill(main, signal.SIGINT)
            try:
                wait_until(lambda: watcher.execute(waiting).fetchone() is None, timeout=30)
                reached.append(True)
            except AssertionError:
                # Ctrl-C did not reach the send: end its wait from the server, so the test
                # fails instead of waiting for ever on the lock its own transaction holds.
                reached.append(False)
                watcher.execute(
                    "SELECT pg_cancel_backend(pid) FROM pg_locks"
                    " WHERE NOT granted AND relation = 'pgq_message'::regclass"
                )

    with override_settings(PGQ=settings), admin.transaction():
        admin.execute("LOCK TABLE pgq_message IN EXCLUSIVE MODE")
        interrupter = threading.Thread(target=interrupt)
        interrupter.start()
        with pytest.raises(KeyboardInterrupt):
            pgq.send(queue_name, {"interrupted": True})
        interrupter.join()
        assert reached == [True]  # the send stopped waiting at Ctrl-C, not at a cancel
        assert admin.execute(waiting).fetchone() is None  # the server stopped waiting too
    sent = pgq.send(queue_name, {"after": True})
    assert [(m.msg_id, m.message) for m in pgq.read(queue_name, qty=10)][1:] == [
        (sent, {"after": True})
    ]
