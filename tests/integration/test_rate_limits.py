"""Rate and concurrency limits, enforced in the lease: reads over a limit get fewer messages
or none, never an error, and nothing else changes.

Time passes for the token bucket by moving its ``refreshed_at`` back (as ``time_passes``
moves messages' clocks), so no test waits for the clock. Limits held across real worker
processes are in tests/acceptance/test_workflow_processes.py.
"""

from __future__ import annotations

import math
import time
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from rest_framework.test import APIClient

import pgq_django as pgq
from pgq_django.testing import drain
from pgq_django.worker.registry import unregister
from tests.conftest import time_passes


def tokens_refill(queue: Any, seconds: float) -> None:
    """Make ``seconds`` pass for the queue's token bucket."""
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE pgq_queue_limit SET refreshed_at = refreshed_at - make_interval(secs => %s)"
            " WHERE queue_id = %s",
            [seconds, queue.pk],
        )


def leased(queue: Any) -> int:
    return pgq.metrics(queue).in_flight


def test_a_concurrency_limit_caps_the_leases_held_at_once(make_queue):
    q = make_queue(concurrency_limit=2)
    ids = pgq.send_batch(q, list(range(5)))
    first = pgq.read(q, qty=5)
    assert [m.msg_id for m in first] == ids[:2]
    assert pgq.read(q, qty=5) == []  # at the limit: nothing, and no error
    assert leased(q) == 2
    pgq.delete(q, first[0].receipt)  # an ack frees a slot
    (third,) = pgq.read(q, qty=5)
    assert third.msg_id == ids[2]
    pgq.set_vt(q, third.receipt, 0)  # so does a release
    assert [m.msg_id for m in pgq.read(q, qty=5)] == [ids[2]]
    time_passes(q, 3600)  # and an expired lease
    assert len(pgq.read(q, qty=5)) == 2


def earned(rate: float, since: float) -> int:
    """The most tokens the real clock can have added since ``since`` (``time.monotonic()``):
    on a loaded machine tens of milliseconds pass between two reads."""
    return math.ceil(rate * (time.monotonic() - since))


def test_a_rate_limit_hands_out_tokens_at_its_rate(make_queue):
    q = make_queue(rate_limit=40)  # a bucket of 10 tokens (a quarter second's worth)
    pgq.send_batch(q, list(range(100)))
    # each bound counts from before the previous read: tokens accrue from its moment on
    since = time.monotonic()
    assert len(pgq.read(q, qty=100)) == 10
    before_second = time.monotonic()
    assert len(pgq.read(q, qty=100)) <= earned(40, since)  # empty, but for the clock
    tokens_refill(q, 0.1)  # 4 tokens
    assert 4 <= len(pgq.read(q, qty=100)) <= 4 + earned(40, before_second)
    tokens_refill(q, 3600)  # never more than the bucket holds
    assert len(pgq.read(q, qty=100)) == 10
    slow = make_queue(rate_limit=0.5)  # at least one token per lease
    pgq.send_batch(slow, [1, 2])
    assert len(pgq.read(slow, qty=2)) == 1
    assert pgq.read(slow) == []


def test_both_limits_together_give_the_smaller_budget(make_queue):
    q = make_queue(rate_limit=100, concurrency_limit=3)
    pgq.send_batch(q, list(range(50)))
    assert len(pgq.read(q, qty=50)) == 3
    assert pgq.read(q, qty=50) == []


def test_a_limit_set_after_a_read_applies_to_the_next_read(make_queue):
    q = make_queue()
    pgq.send_batch(q, list(range(10)))
    assert len(pgq.read(q)) == 1  # this process now takes the queue for unlimited
    pgq.alter_queue(q, concurrency_limit=2)
    assert len(pgq.read(q, qty=10)) == 1  # the lease taken before the limit counts
    assert pgq.read(q, qty=10) == []
    pgq.alter_queue(q, concurrency_limit=None)
    assert len(pgq.read(q, qty=10)) == 8


def test_a_limited_fifo_queue_keeps_its_order_and_its_limit(make_queue):
    q = make_queue(fifo=True, concurrency_limit=1)
    ids = [pgq.send(q, i, group=g) for i, g in enumerate("aab")]
    (first,) = pgq.read(q, qty=10)
    assert first.msg_id == ids[0]
    assert pgq.read(q, qty=10) == []
    pgq.delete(q, first.receipt)
    assert [m.msg_id for m in pgq.read(q, qty=10)] == [ids[1]]


def test_filters_apply_within_the_budget(make_queue):
    q = make_queue(concurrency_limit=2)
    pgq.send_batch(q, [1, 2], label="skip")
    wanted = pgq.send_batch(q, [3, 4, 5], label="take")
    got = pgq.read(q, qty=10, filters={"label": "take"})
    assert [m.msg_id for m in got] == wanted[:2]


def test_a_paused_or_missing_limited_queue_is_still_an_error(make_queue):
    q = make_queue(rate_limit=10)
    pgq.send(q, 1)
    pgq.pause_queue(q)
    with pytest.raises(pgq.QueuePaused):
        pgq.read(q)
    pgq.drop_queue(q)
    with pytest.raises(pgq.QueueNotFound):
        pgq.read(q)


def test_a_limited_read_inside_the_callers_transaction_commits_with_it(make_queue):
    q = make_queue(concurrency_limit=1)
    pgq.send_batch(q, [1, 2])
    with pytest.raises(RuntimeError), transaction.atomic():
        assert len(pgq.read(q, qty=2)) == 1
        raise RuntimeError
    # Rolled back: neither the lease nor its record holds the slot.
    assert len(pgq.read(q, qty=2)) == 1


def test_pop_and_read_by_id_are_not_leases(make_queue):
    """pop takes messages out of the queue for good (no lease to hold), read_by_id leases
    nothing: neither is limited, and neither spends the limits."""
    q = make_queue(concurrency_limit=1)
    pgq.send_batch(q, [1, 2, 3])
    assert len(pgq.pop(q, qty=2)) == 2
    assert len(pgq.read(q, qty=5)) == 1


def test_the_rest_consume_gets_no_more_than_the_limit_leaves(make_queue):
    owner = get_user_model().objects.create_user("limit_owner")
    q = make_queue(owner=owner, concurrency_limit=2)
    pgq.send_batch(q, [1, 2, 3, 4])
    api = APIClient()
    api.force_authenticate(owner)
    first = api.get(f"/v1/queues/{q.name}/messages?limit=10")
    assert first.status_code == 200, first.content
    assert len(first.json()["data"]) == 2
    second = api.get(f"/v1/queues/{q.name}/messages?limit=10")
    assert second.status_code == 200 and second.json()["data"] == []
    assert leased(q) == 2


def test_rest_sets_shows_and_clears_the_limits_and_refuses_bad_ones(make_queue):
    owner = get_user_model().objects.create_user("limit_owner2")
    q = make_queue(owner=owner)
    api = APIClient()
    api.force_authenticate(owner)
    api.default_format = "json"
    for bad in (
        {"rate_limit": 0},
        {"rate_limit": "5"},
        {"concurrency_limit": 0},
        {"concurrency_limit": 1.5},
    ):
        refused = api.put(f"/v1/queues/{q.name}", bad)
        assert refused.status_code == 400, (bad, refused.content)
        assert refused.json()["error"]["code"] == "invalid_argument"
    assert (pgq.get_queue(q).rate_limit, pgq.get_queue(q).concurrency_limit) == (None, None)
    changed = api.put(f"/v1/queues/{q.name}", {"rate_limit": 12.5, "concurrency_limit": 4})
    assert changed.status_code == 200, changed.content
    assert (changed.json()["rate_limit"], changed.json()["concurrency_limit"]) == (12.5, 4)
    assert api.get(f"/v1/queues/{q.name}").json()["concurrency_limit"] == 4
    cleared = api.put(f"/v1/queues/{q.name}", {"rate_limit": None, "concurrency_limit": None})
    assert (cleared.json()["rate_limit"], cleared.json()["concurrency_limit"]) == (None, None)
    admin = get_user_model().objects.create_superuser("limit_admin")
    api.force_authenticate(admin)
    made = api.post("/v1/queues", {"id": q.name + "_new", "concurrency_limit": 2})
    assert made.status_code == 201 and made.json()["concurrency_limit"] == 2


def test_a_limited_read_inside_the_callers_transaction_leaves_its_commit_durable(make_queue):
    """A lease in a transaction of its own commits without waiting for the WAL flush (its
    lock is not held through it); the caller's transaction keeps its durable commit."""
    q = make_queue(concurrency_limit=5)
    pgq.send(q, 1)
    with transaction.atomic():
        assert len(pgq.read(q)) == 1
        with connection.cursor() as cur:
            cur.execute("SHOW synchronous_commit")
            assert cur.fetchone()[0] == "on"


def test_drain_and_once_wait_for_a_rate_limit_instead_of_stopping_early(make_queue):
    q = make_queue(rate_limit=40)  # ten tokens at once, then forty a second
    pgq.send_batch(q, list(range(25)))
    handled: list[int] = []
    pgq.handler(q.name, batch=5)(lambda message: handled.append(message.msg_id))
    try:
        done = drain(q.name)
    finally:
        unregister(q.name)
    assert (done.processed, len(handled)) == (25, 25)
    assert pgq.metrics(q).queue_length == 0


def test_drain_of_a_paused_limited_queue_returns_without_waiting(make_queue):
    q = make_queue(concurrency_limit=2)
    pgq.send_batch(q, [1, 2, 3])
    pgq.pause_queue(q)
    pgq.handler(q.name)(lambda message: None)
    try:
        assert drain(q.name).processed == 0
    finally:
        unregister(q.name)
    assert pgq.metrics(q).queue_length == 3


def test_a_limit_set_again_counts_the_leases_taken_while_it_was_off(make_queue):
    q = make_queue(concurrency_limit=2)
    pgq.send_batch(q, list(range(10)))
    assert len(pgq.read(q, qty=10)) == 2
    pgq.alter_queue(q, concurrency_limit=None)
    assert len(pgq.read(q, qty=3)) == 3  # five leased now, three of them without the limit
    pgq.alter_queue(q, concurrency_limit=6)
    assert len(pgq.read(q, qty=10)) == 1
    assert pgq.read(q, qty=10) == []
