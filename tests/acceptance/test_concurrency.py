"""Several real processes on real connections: each message delivered exactly once."""

from __future__ import annotations

import threading
import time

import pytest

import pgq_django as pgq
from pgq_django.store import notify
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.slow
def test_four_processes_drain_ten_thousand_messages_each_exactly_once(queue_name, spawn):
    pgq.create_queue(queue_name)
    sent: list[int] = []
    for start in range(0, 10_000, 1000):
        sent += pgq.send_batch(queue_name, [{"n": i} for i in range(start, start + 1000)])

    workers = [
        spawn("-m", "tests.drain_worker", queue_name, str(batch)) for batch in (1, 7, 50, 100)
    ]
    seen: list[int] = []
    for proc in workers:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        pairs = [line.split() for line in out.splitlines() if line.strip()]
        assert all(read_ct == "1" for _, read_ct in pairs)
        seen += [int(msg_id) for msg_id, _ in pairs]

    assert len(seen) == len(set(seen)) == 10_000
    assert set(seen) == set(sent)
    assert pgq.metrics(queue_name).queue_length == 0


def test_read_with_poll_is_woken_by_a_commit_in_another_connection(queue_name):
    pgq.create_queue(queue_name)

    def send_later() -> None:
        from django.db import connections

        wait_until(lambda: notify.hub().waiters() >= 1, what="the poll to wait")
        pgq.send(queue_name, "wake up")
        connections.close_all()

    sender = threading.Thread(target=send_later)
    started = time.monotonic()
    sender.start()
    # The fallback poll interval is longer than the whole wait: only the NOTIFY can end the
    # wait early, so getting the message well before max_poll_seconds proves the wake-up.
    found = pgq.read_with_poll(queue_name, max_poll_seconds=20, poll_interval_ms=60_000)
    waited = time.monotonic() - started
    sender.join()
    assert [m.message for m in found] == ["wake up"]
    assert waited < 10


def test_read_with_poll_returns_empty_after_the_wait(queue_name):
    pgq.create_queue(queue_name)
    started = time.monotonic()
    assert pgq.read_with_poll(queue_name, max_poll_seconds=0.3, poll_interval_ms=50) == []
    assert time.monotonic() - started >= 0.3


def test_read_with_poll_finds_a_delayed_message_by_polling(queue_name):
    pgq.create_queue(queue_name)
    msg_id = pgq.send(queue_name, "later", delay=0.3)
    found = pgq.read_with_poll(queue_name, max_poll_seconds=5, poll_interval_ms=50)
    assert [m.msg_id for m in found] == [msg_id]


def test_async_read_with_poll_waits_on_the_event_loop_and_is_woken_by_notify(queue_name):
    import asyncio

    from asgiref.sync import sync_to_async
    from django.db import connections

    pgq.create_queue(queue_name)

    async def scenario():
        async def send_later():
            await asyncio.to_thread(
                wait_until, lambda: notify.hub().waiters() >= 1, what="the poll to wait"
            )
            # The sync thread is free while the poll waits, so this send is not blocked.
            return await sync_to_async(pgq.send)(queue_name, "async wake")

        started = time.monotonic()
        sender = asyncio.create_task(send_later())
        found = await pgq.aread_with_poll(queue_name, max_poll_seconds=20, poll_interval_ms=60_000)
        result = found, await sender, time.monotonic() - started
        await sync_to_async(connections.close_all)()
        return result

    found, msg_id, waited = asyncio.run(scenario())
    assert [m.msg_id for m in found] == [msg_id]
    assert waited < 10
    assert "aaread_with_poll" not in pgq.__all__
