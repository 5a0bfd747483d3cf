"""Schedules and limits with real worker processes against real PostgreSQL.

A schedule ticking every second under three workers, the leader killed and a worker
restarted midway, sends each tick exactly once; a rate limit holds across two worker
processes and a concurrency limit across four. Handlers record their timings in
``test_timed`` (tests/limit_handlers.py).
"""

from __future__ import annotations

import os
import signal
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connection

import pgq_django as pgq
from pgq_django.models import Message
from tests.conftest import wait_for_workers, wait_until
from tests.limit_handlers import CONCURRENCY_QUEUE, RATE_QUEUE, TIMED_DDL
from tests.worker_handlers import EFFECTS_DDL

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

WORKER = ("-m", "django", "pgq_worker", "-v", "2")


def timings(queue: str) -> list[tuple[float, float]]:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT started, finished FROM test_timed WHERE queue = %s ORDER BY started", [queue]
        )
        return cur.fetchall()


def stop(*procs: Any) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        proc.communicate(timeout=60)


def test_a_schedule_every_second_sends_each_tick_once_across_workers_and_a_leader_change(
    make_queue, spawn
):
    with connection.cursor() as cur:
        cur.execute(EFFECTS_DDL)
    served = make_queue()  # what the workers serve; the schedule's queue has no consumer
    pgq.register_callback(served, "tests.worker_handlers.record")
    target = make_queue()
    args = (*WORKER, "--import", "tests.worker_handlers", "--queue", served.name)
    workers = [spawn(*args) for _ in range(3)]
    wait_for_workers(*workers)
    pgq.schedule("every-second", "* * * * * *", target, {"tick": True})

    def ticks() -> list[datetime]:
        return sorted(
            datetime.fromisoformat(h["pgq_scheduled_at"])
            for h in Message.objects.filter(queue=target).values_list("headers", flat=True)
        )

    wait_until(lambda: len(ticks()) >= 4, what="the first ticks")
    wait_until(lambda: any(w.logged("event=leader_elected") for w in workers), what="a leader")
    for leader in [w for w in workers if w.logged("event=leader_elected")]:
        os.kill(leader.pid, signal.SIGKILL)  # the leader dies mid-run
        leader.wait(timeout=10)
        workers.remove(leader)
        workers.append(spawn(*args))  # and a worker comes back
    wait_until(lambda: any(w.logged("event=leader_elected") for w in workers), what="a new leader")
    wait_until(lambda: len(ticks()) >= 11, timeout=60, what="ten seconds of ticks")
    stop(*workers)
    sent = ticks()
    # Exactly once: no tick twice, and none missing between the first and the last.
    assert len(sent) == len(set(sent))
    assert sent == [sent[0] + timedelta(seconds=i) for i in range(len(sent))]


def test_a_rate_limit_of_20_per_second_holds_across_two_worker_processes(spawn):
    with connection.cursor() as cur:
        cur.execute(TIMED_DDL)
    q = pgq.create_queue(RATE_QUEUE, rate_limit=20)
    pgq.send_batch(q, [{"n": i} for i in range(300)])
    args = (*WORKER, "--import", "tests.limit_handlers", "--queue", q.name, "--concurrency", "2")
    workers = [spawn(*args) for _ in range(2)]
    wait_until(lambda: len(timings(RATE_QUEUE)) >= 250, timeout=120, what="250 messages")
    stop(*workers)
    started = [s for s, _f in timings(RATE_QUEUE)]
    # Ten seconds from the 20th message on (past the bucket's first handful).
    window = started[19], started[19] + 10.0
    assert started[-1] > window[1]
    handled = sum(window[0] <= s < window[1] for s in started)
    assert 180 <= handled <= 220, handled
    assert len(_pids(RATE_QUEUE)) == 2  # both processes took part


def _pids(queue: str) -> set[int]:
    with connection.cursor() as cur:
        cur.execute("SELECT DISTINCT pid FROM test_timed WHERE queue = %s", [queue])
        return {pid for (pid,) in cur.fetchall()}


def test_a_concurrency_limit_of_3_is_never_exceeded_by_four_worker_processes(spawn):
    with connection.cursor() as cur:
        cur.execute(TIMED_DDL)
    q = pgq.create_queue(CONCURRENCY_QUEUE, concurrency_limit=3)
    pgq.send_batch(q, [{"sleep": 0.2} for _ in range(40)])
    args = (
        *WORKER,
        "--import",
        "tests.limit_handlers",
        "--queue",
        q.name,
        "--concurrency",
        "2",
    )
    workers = [spawn(*args) for _ in range(4)]
    wait_until(lambda: len(timings(CONCURRENCY_QUEUE)) >= 40, timeout=120, what="40 messages")
    stop(*workers)
    # The most handlings running at once, from their start and finish times.
    events = sorted(
        [(s, 1) for s, _f in timings(CONCURRENCY_QUEUE)]
        + [(f, -1) for _s, f in timings(CONCURRENCY_QUEUE)]
    )
    running = most = 0
    for _at, step in events:
        running += step
        most = max(most, running)
    assert most == 3  # the limit is used, and never passed
    assert pgq.metrics(q).queue_length == 0
    assert len(_pids(CONCURRENCY_QUEUE)) >= 2
