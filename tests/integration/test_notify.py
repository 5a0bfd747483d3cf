"""The process's one LISTEN connection: shared by threads and coroutines, reconnecting."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from asgiref.sync import sync_to_async
from django.db import connection, connections

import pgq_django as pgq
from pgq_django.store import notify
from tests.conftest import wait_until
from tests.http_server import SERVER_APP_NAME

pytestmark = pytest.mark.django_db(transaction=True)
# The store's services under test: this process runs them, as a worker's does.
RUNS_SERVICES = True


def listen_backends() -> int:
    """LISTEN connections of this process (a live REST server's own hub is left out)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND query ILIKE 'LISTEN%%' AND state IS NOT NULL"
            " AND application_name NOT LIKE %s",
            [SERVER_APP_NAME + "-%"],
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
    with notify.interest(queue_name) as wakeup, notify.interest(other.name) as witness:
        wakeup.wait(0)  # a hub that just connected wakes everyone once to re-check
        witness.wait(0)
        pgq.send(other, "not for you")
        # Once the hub has woken the other queue's waiter it has handled that notification:
        # this waiter would have been woken by then (no time window to guess).
        assert witness.wait(30) is True
        assert wakeup.wait(0) is False
        pgq.send(queue_name, "for you")
        assert wakeup.wait(30) is True


def test_async_waiters_share_the_listener_with_threads(queue_name):
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


# Wake-up groups: one waiter per notification, not all ------------------------------------


@pytest.fixture
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def test_a_notification_wakes_one_waiter_of_a_group_and_every_ungrouped_one(
    queue_name, make_queue, loop
):
    pgq.create_queue(queue_name)
    marker = make_queue().name
    assert notify.hub().wait_ready()  # (connecting wakes every waiter once, to re-check)
    grouped = [notify.register(queue_name, loop=loop, group="g") for _ in range(5)]
    try:
        with notify.interest(queue_name) as ungrouped, notify.interest(marker) as marked:
            pgq.send(queue_name, 1)
            assert ungrouped.wait(20)
            # Notifications are handled in commit order: once the marker's has been, the
            # first one's wake-ups have all been made.
            pgq.send(marker, 1)
            assert marked.wait(20)
            assert [i.pending for i in grouped] == [True, False, False, False, False]
            # A second send wakes the next waiter that has not been woken yet.
            pgq.send(queue_name, 2)
            pgq.send(marker, 2)
            assert marked.wait(20)
            assert [i.pending for i in grouped] == [True, True, False, False, False]
    finally:
        for interest in grouped:
            notify.unregister(interest)
    assert notify.hub().waiters() == 0


def test_a_waiter_leaving_with_a_full_batch_or_an_unused_wake_up_hands_it_on(queue_name, loop):
    a, b, c, d, e = (notify.register(queue_name, loop=loop, group="g") for _ in range(5))
    hub = notify.hub()
    assert hub.leads(a) and not hub.leads(b)
    # A full batch: more may be ready, so the next two waiters look.
    notify.unregister(a, full_batch=True)
    assert (b.pending, c.pending, d.pending, e.pending) == (True, True, False, False)
    # Leaving without a full batch and without a wake-up wakes nobody (d is not the head).
    notify.unregister(d)
    assert not e.pending
    # b leaves holding a wake-up it never used: it goes to a waiter that has none (e).
    notify.unregister(b)
    assert e.pending
    # The head polls for the group; when it leaves, its successor is woken to take over.
    assert hub.leads(c)
    c.wait(0)  # c consumes its wake-up
    e.wait(0)
    notify.unregister(c)
    assert hub.leads(e) and e.pending
    notify.unregister(e)
    assert hub.waiters() == 0


def test_groups_are_separate_and_ungrouped_interests_always_lead(queue_name, loop):
    labelled = notify.register(queue_name, loop=loop, group=("rest-label", "x"))
    plain = notify.register(queue_name, loop=loop, group=("rest-label", None))
    hub = notify.hub()
    try:
        assert hub.leads(labelled) and hub.leads(plain)
        with notify.interest(queue_name) as ungrouped:
            assert hub.leads(ungrouped)
            hub.close()  # a lost connection wakes everyone, grouped or not
            assert labelled.pending and plain.pending and ungrouped.wait(0)
    finally:
        notify.unregister(labelled)
        notify.unregister(plain)


# Members of one group with different keys (the REST long-polls of a queue, by label) ------


def test_a_group_of_several_keys_wakes_only_its_head_which_checks_for_the_others(
    queue_name, make_queue, loop
):
    pgq.create_queue(queue_name)
    marker = make_queue().name
    assert notify.hub().wait_ready()
    hub = notify.hub()
    waiters = [
        notify.register(queue_name, loop=loop, group="rest", key=f"l{n}") for n in range(100)
    ]
    try:
        assert hub.groups() == 1
        assert [hub.leads(w) for w in waiters].count(True) == 1 and hub.leads(waiters[0])
        assert hub.other_keys(waiters[0]) == {f"l{n}" for n in range(1, 100)}
        with notify.interest(marker) as marked:
            pgq.send(queue_name, 1, label="l42")
            pgq.send(marker, 1)
            assert marked.wait(20)
        # One wake-up, the head's, not one per label.
        assert [w.pending for w in waiters] == [True] + [False] * 99
        # The head looks for the others: it wakes the longest waiter of each ready label.
        hub.wake_keys(waiters[0], {"l42", "l7"})
        assert [n for n, w in enumerate(waiters) if w.pending] == [0, 7, 42]
    finally:
        for waiter in waiters:
            notify.unregister(waiter)
    assert hub.groups() == 0 and hub.waiters() == 0


def test_one_key_still_wakes_one_member_and_a_hand_over_stays_with_its_key(queue_name, loop):
    a1, b1, a2, b2, a3 = (
        notify.register(queue_name, loop=loop, group="rest", key=key)
        for key in ("a", "b", "a", "b", "a")
    )
    hub = notify.hub()
    # a1 leaves with a full batch: the next two "a" waiters look, and b1, the new head,
    # is woken to take over polling and the checks.
    notify.unregister(a1, full_batch=True)
    assert (b1.pending, a2.pending, b2.pending, a3.pending) == (True, True, False, True)
    for waiter in (b1, a2, b2, a3):
        notify.unregister(waiter)
    assert hub.waiters() == 0


def test_ready_labels_names_the_labels_a_read_would_find_without_leasing(queue_name):
    from pgq_django.models import Message

    pgq.create_queue(queue_name)
    pgq.send(queue_name, "ready", label="a")
    pgq.send(queue_name, "later", label="b", delay=3600)
    pgq.send(queue_name, "leased", label="c")
    assert [m.label for m in pgq.read(queue_name, vt=3600, filters={"label": "c"})] == ["c"]
    ready = Message.objects.for_queue(queue_name)
    assert ready.ready_labels(["a", "b", "c", "d"]) == {"a"}
    assert ready.ready_labels(["b", None]) == {None}
    assert pgq.metrics(queue_name).in_flight == 1  # nothing leased by asking
    pgq.pause_queue(queue_name)
    assert ready.ready_labels(["a", None]) == set()


def test_a_poll_cancelled_while_its_lease_runs_gives_back_what_the_lease_found(queue_name):
    """The lease runs in a thread that a cancellation cannot stop: what it leases for a
    caller that is gone is handed back, visible at once, its delivery not counted."""
    pgq.create_queue(queue_name)
    pgq.send(queue_name, "kept")
    holder = connections.create_connection("default")
    holder.inc_thread_sharing()  # asked from the event loop's helper threads below
    holder.set_autocommit(False)
    with holder.cursor() as cursor:  # the poll's first lease waits behind this lock
        cursor.execute("LOCK TABLE pgq_message IN ACCESS EXCLUSIVE MODE")

    def lease_waits() -> bool:
        with holder.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation"
                " WHERE NOT l.granted AND c.relname = 'pgq_message'"
            )
            return int(cursor.fetchone()[0]) > 0

    async def scenario() -> None:
        poll = asyncio.create_task(
            pgq.aread_with_poll(queue_name, vt=600, max_poll_seconds=20, poll_interval_ms=50)
        )
        try:
            deadline = time.monotonic() + 20
            while not await sync_to_async(lease_waits, thread_sensitive=False)():
                assert time.monotonic() < deadline, "the lease never reached the lock"
                await asyncio.sleep(0.01)
            poll.cancel()
        finally:
            await sync_to_async(holder.rollback, thread_sensitive=False)()
        with pytest.raises(asyncio.CancelledError):
            await poll
        await sync_to_async(connections.close_all)()

    try:
        asyncio.run(scenario())
    finally:
        holder.dec_thread_sharing()
        holder.close()
    again = pgq.read(queue_name, vt=0, qty=10)
    assert [(m.message, m.read_ct) for m in again] == [("kept", 1)]
