"""The process's one LISTEN connection: shared by threads and coroutines, reconnecting."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from django.db import connection, connections

import pgq_django as pgq
from pgq_django import notify
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def listen_backends() -> int:
    """LISTEN connections of this process (a live REST server's own hub is left out)."""
    from tests.http_server import SERVER_APP_NAME

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND query ILIKE 'LISTEN%%' AND state IS NOT NULL AND application_name <> %s",
            [SERVER_APP_NAME],
        )
        return int(cursor.fetchone()[0])


def test_forty_short_threads_polling_share_one_listen_backend(queue_name):
    pgq.create_queue(queue_name)
    errors: list[BaseException] = []

    def poll_once() -> None:
        try:
            pgq.read_with_poll(queue_name, max_poll_seconds=0.05, poll_interval_ms=10)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=poll_once) for _ in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert listen_backends() <= 1
    # Every registration was removed when its wait ended.
    assert notify.hub().waiters() == 0


def test_one_send_wakes_every_thread_waiting_on_its_queue(queue_name):
    pgq.create_queue(queue_name)
    woken: list[bool] = []
    registered = threading.Barrier(6)

    def wait() -> None:
        with notify.interest(queue_name) as wakeup:
            registered.wait()
            woken.append(wakeup.wait(30))

    threads = [threading.Thread(target=wait) for _ in range(5)]
    for t in threads:
        t.start()
    registered.wait()
    pgq.send(queue_name, "ding")
    for t in threads:
        t.join()
    assert woken == [True] * 5
    assert listen_backends() == 1


def test_a_notification_for_another_queue_does_not_wake_a_waiter(queue_name, make_queue):
    pgq.create_queue(queue_name)
    other = make_queue()
    with notify.interest(queue_name) as wakeup:
        wakeup.wait(0)  # a hub that just connected wakes everyone once to re-check
        pgq.send(other, "not for you")
        assert wakeup.wait(0.3) is False
        pgq.send(queue_name, "for you")
        assert wakeup.wait(30) is True


def test_async_waiters_share_the_listener_with_threads(queue_name):
    from asgiref.sync import sync_to_async

    pgq.create_queue(queue_name)

    async def scenario() -> list[int]:
        waiters = [
            asyncio.create_task(
                pgq.aread_with_poll(queue_name, max_poll_seconds=20, poll_interval_ms=60_000)
            )
            for _ in range(20)
        ]
        await wait_for_waiters(20)
        backends = await sync_to_async(listen_backends)()
        await sync_to_async(pgq.send_batch)(queue_name, list(range(20)))
        found = await asyncio.gather(*waiters)
        await sync_to_async(connections.close_all)()
        return [backends, *(m.message for batch in found for m in batch)]

    async def wait_for_waiters(n: int) -> None:
        deadline = time.monotonic() + 20
        while notify.hub().waiters() < n:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)

    backends, *bodies = asyncio.run(scenario())
    assert backends == 1
    assert sorted(bodies) == list(range(20))


def test_the_hub_reconnects_after_losing_its_connection_and_wakes_waiters(queue_name):
    pgq.create_queue(queue_name)
    current = notify.hub()
    assert current.wait_ready()
    before = current.connects
    with notify.interest(queue_name) as wakeup:
        current.drop_connection()
        # Losing the connection wakes the waiter so it re-checks, and so does reconnecting.
        assert wakeup.wait(30) is True
        wait_until(lambda: current.connects > before and current.ready.is_set())
        wakeup.wait(0)  # forget the reconnect's wake-up
        pgq.send(queue_name, "after the reconnect")
        assert wakeup.wait(30) is True
    assert listen_backends() == 1


def test_closing_the_hub_wakes_waiters_and_a_new_one_starts_on_demand(queue_name):
    pgq.create_queue(queue_name)
    with notify.interest(queue_name) as wakeup:
        notify.close_all()
        assert wakeup.wait(5) is True
    wait_until(lambda: listen_backends() == 0)
    with notify.interest(queue_name) as wakeup:
        pgq.send(queue_name, "new hub")
        assert wakeup.wait(30) is True
