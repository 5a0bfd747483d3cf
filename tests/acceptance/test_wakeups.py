"""Throttled wake-ups (pgq_django.store.wakeups): fewer notifications, and never a lost one."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import connections
from django.test import override_settings

import pgq_django as pgq
from pgq_django.store import notify, wakeups

pytestmark = pytest.mark.django_db(transaction=True)
# The store's services under test: this process runs them, as a worker's does.
RUNS_SERVICES = True


def _notifications(listener: notify.Listener, queue: str, until: float) -> list[float]:
    """Arrival times of the notifications of ``queue`` until the monotonic time ``until``."""
    arrived = []
    while (left := until - time.monotonic()) > 0:
        for note in listener.conn.notifies(timeout=left, stop_after=1):
            if note.payload == queue:
                arrived.append(time.monotonic())
    return arrived


def test_autocommit_sends_notify_once_per_interval_and_once_more_after_the_last(queue_name):
    pgq.create_queue(queue_name)
    listener = notify.Listener()
    try:
        with override_settings(PGQ={"NOTIFY_INTERVAL": 2.0}):
            for n in range(30):
                pgq.send(queue_name, {"n": n})
            last_commit = time.monotonic()
            arrived = _notifications(listener, queue_name, time.monotonic() + 8)
    finally:
        listener.close()
    # The first send notified at once, the next ones within the interval left it out, and
    # one trailing wake-up came after the last of them had committed.
    assert 2 <= len(arrived) < 30
    assert arrived[-1] > last_commit


def test_sends_inside_a_transaction_notify_as_before(queue_name):
    from django.db import transaction

    pgq.create_queue(queue_name)
    listener = notify.Listener()
    try:
        with override_settings(PGQ={"NOTIFY_INTERVAL": 60.0}):
            pgq.send(queue_name, {"n": 0})  # the leading send: the next ones are throttled
            with transaction.atomic():
                pgq.send(queue_name, {"n": 1})
            committed = time.monotonic()
            # Not the trailing flush (a minute away): the transaction's own notification.
            arrived = _notifications(listener, queue_name, time.monotonic() + 3)
    finally:
        listener.close()
        wakeups.flush()
    assert arrived and arrived[-1] > committed


def test_interval_zero_notifies_every_send(queue_name):
    pgq.create_queue(queue_name)
    listener = notify.Listener()
    try:
        with override_settings(PGQ={"NOTIFY_INTERVAL": 0}):
            for n in range(5):
                pgq.send(queue_name, {"n": n})
                # One transaction each: PostgreSQL merges equal notifications only within one.
            arrived = _notifications(listener, queue_name, time.monotonic() + 3)
    finally:
        listener.close()
    assert len(arrived) == 5


# A sender process: rounds of 1-4 autocommit sends, each after a short pause or after the
# consumer has taken the previous one (so it is back to waiting, and the send falls inside
# the throttle's interval), and after each round it waits until the consumer has taken
# everything it sent. A lost wake-up stalls it: nobody sends anything that could wake the
# consumer, whose fallback poll is a minute away.
SENDER = """
import random, sys, time
import django
django.setup()
from django.conf import settings
import pgq_django as pgq
from pgq_django.conf import settings as pgq_settings
queue, rounds, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
settings.PGQ = {**settings.PGQ, "NOTIFY_INTERVAL": float(sys.argv[4])}
pgq_settings.reload()
rng = random.Random(seed)

def taken(ids):
    deadline = time.monotonic() + 40
    while any(pgq.read_by_id(queue, m) is not None for m in ids):
        if time.monotonic() > deadline:
            print(f"stalled in round {r}: {ids}", flush=True)
            sys.exit(1)
        time.sleep(0.002)

for r in range(rounds):
    mine = []
    for _ in range(rng.randint(1, 4)):
        if mine and rng.random() < 0.5:
            taken(mine)
        time.sleep(rng.choice((0, 0.002, 0.006, 0.011, 0.02)))
        mine.append(pgq.send(queue, {"sender": seed, "round": r}))
    taken(mine)
print("done", flush=True)
"""


@pytest.mark.slow
def test_no_wake_up_is_lost_when_sends_race_the_throttle(queue_name, spawn):
    pgq.create_queue(queue_name)
    taken: list[Any] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def consume() -> None:
        # Fallback polls a minute apart and waits longer than the senders' deadline: within
        # the test, only a notification can wake this consumer.
        try:
            while not stop.is_set():
                for message in pgq.read_with_poll(
                    queue_name, qty=1, max_poll_seconds=100, poll_interval_ms=60_000
                ):
                    pgq.delete(queue_name, message.receipt)
                    taken.append(message.message)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    with override_settings(PGQ={"MAX_WAIT_SECONDS": 120}):
        consumer = threading.Thread(target=consume)
        consumer.start()
        try:
            notify.hub().wait_ready()
            children = [
                spawn("-c", SENDER, queue_name, "40", str(seed), "0.1") for seed in range(3)
            ]
            for child in children:
                out, err = child.communicate(timeout=300)
                assert child.returncode == 0, out + err
                assert out.strip() == "done"
        finally:
            stop.set()
            pgq.send(queue_name, {"stop": True})
            consumer.join(timeout=120)
    assert errors == []
    assert not consumer.is_alive()
    rounds = [m for m in taken if "sender" in m]
    assert {(m["sender"], m["round"]) for m in rounds} == {
        (s, r) for s in range(3) for r in range(40)
    }
