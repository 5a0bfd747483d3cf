"""The waiting primitive behind every long poll (pgq_django.api.waiting), without a database.

The leases here are plain functions standing for ``pgq.read``, and the process's wake-up hub
runs with ``PGQ["LISTEN"] = False`` (it opens no connection), so what is checked is the
primitive's own logic: the deadline, the pauses, the hand-over of wake-ups in a group, the
connection release and what happens when the client goes away.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.test import override_settings

from pgq_django.api.waiting import (
    ClientGone,
    Deadline,
    MessageWait,
    is_full_batch,
    until_disconnected,
)
from pgq_django.store import notify

QUEUE = "unit_waits"


@pytest.fixture(autouse=True)
def _hub_without_listening() -> Iterator[None]:
    """A hub that listens on no connection: waits wake on their poll interval or by hand."""
    with override_settings(PGQ={"LISTEN": False}):
        yield
        notify.close_all()


class Leases:
    """A stand-in for ``pgq.read``: answers the given batches in turn, then nothing."""

    def __init__(self, *batches: list[Any]) -> None:
        self.batches = list(batches)
        self.calls = 0

    def __call__(self) -> list[Any]:
        self.calls += 1
        return self.batches.pop(0) if self.batches else []


def waiting(lease: Callable[[], list[Any]], **options: Any) -> MessageWait[Any]:
    defaults: dict[str, Any] = {"seconds": 5.0, "poll_interval": 0.01, "limit": 1}
    return MessageWait(QUEUE, lease, **{**defaults, **options})


# -- the deadline ------------------------------------------------------------------------------


def test_a_deadline_counts_down_from_when_it_was_set() -> None:
    deadline = Deadline.after(5, now=100.0)
    assert deadline.at == 105.0
    assert deadline.remaining(now=103.0) == 2.0
    assert deadline.remaining(now=106.0) == -1.0


def test_a_pause_lasts_the_poll_interval_at_most_and_never_past_the_deadline() -> None:
    deadline = Deadline.after(5, now=100.0)
    assert deadline.pause(1.0, now=100.0) == 1.0
    assert deadline.pause(1.0, now=104.5) == 0.5
    assert deadline.pause(None, now=101.0) == 4.0  # a waiter that does not poll
    assert deadline.pause(1.0, now=107.0) == 0.0  # past it: no pause at all
    assert deadline.pause(None, now=107.0) == 0.0


def test_a_full_batch_is_as_many_messages_as_were_asked_for() -> None:
    assert is_full_batch([1, 2], 2)
    assert not is_full_batch([1], 2)
    assert not is_full_batch([], 1)
    assert not is_full_batch(None, 1)  # left without a result (an error, a cancel)


# -- whole waits ---------------------------------------------------------------------------------


def test_a_wait_finding_nothing_re_checks_on_its_interval_and_ends_empty_at_its_deadline() -> None:
    leases = Leases()
    found = waiting(leases, seconds=0.5, poll_interval=0.02).consume()
    assert found == []
    assert leases.calls >= 2  # the first lease, then one after each interval
    assert notify.hub().waiters() == 0


def test_a_wait_returns_what_a_later_lease_finds_and_releases_only_before_pauses() -> None:
    leases = Leases([], [], ["m1"])
    released: list[int] = []
    found = waiting(leases, release=lambda: released.append(leases.calls)).consume()
    assert found == ["m1"]
    assert leases.calls == 3
    assert released == [1, 2]  # after each empty lease; not after the one that found
    assert notify.hub().waiters() == 0


def test_a_wait_of_zero_seconds_leases_once() -> None:
    leases = Leases()
    assert waiting(leases, seconds=0).consume() == []
    assert leases.calls == 1


def test_a_lease_that_fails_ends_the_wait_and_unregisters_it() -> None:
    def failing() -> list[Any]:
        raise RuntimeError("the database is gone")

    with pytest.raises(RuntimeError):
        waiting(failing).consume()
    assert notify.hub().waiters() == 0


def test_the_async_wait_returns_what_a_later_lease_finds() -> None:
    leases = Leases([], ["m1"])
    found = asyncio.run(waiting(leases).aconsume())
    assert found == ["m1"]
    assert notify.hub().waiters() == 0


def test_waiting_before_registering_is_a_programming_error() -> None:
    with pytest.raises(RuntimeError, match="register"):
        waiting(Leases()).wait()


# -- client disconnects --------------------------------------------------------------------------


def test_a_client_gone_during_a_thread_wait_ends_it_without_leasing_again() -> None:
    leases = Leases()
    with pytest.raises(ClientGone):
        waiting(leases).consume(disconnected=lambda: leases.calls >= 1)
    assert leases.calls == 1  # the first lease; none for a client that left
    assert notify.hub().waiters() == 0


def test_a_client_gone_during_an_async_wait_cancels_it_and_unregisters_it() -> None:
    leases = Leases()

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        gone = asyncio.Event()

        def lease() -> list[Any]:  # runs in the database thread
            found = leases()
            loop.call_soon_threadsafe(gone.set)  # the client leaves during the first lease
            return found

        await waiting(lease, poll_interval=60.0).aconsume(disconnected=gone.wait)

    with pytest.raises(ClientGone):
        asyncio.run(scenario())
    assert leases.calls == 1
    assert notify.hub().waiters() == 0


def test_work_that_ends_before_the_client_leaves_gives_its_result_or_its_error() -> None:
    async def never() -> None:
        await asyncio.Event().wait()

    async def answer() -> str:
        return "done"

    async def failing() -> None:
        raise ValueError("bad")

    assert asyncio.run(until_disconnected(answer(), never)) == "done"
    with pytest.raises(ValueError):
        asyncio.run(until_disconnected(failing(), never))


# -- wake-ups in a group -------------------------------------------------------------------------


def grouped(label: str | None = None, limit: int = 2) -> MessageWait[Any]:
    wait = waiting(Leases(), group="unit", label=label, limit=limit, poll_interval=0.5)
    wait.register()
    return wait


def test_only_the_head_of_a_group_polls_the_others_wait_for_a_wake_up() -> None:
    first, second = grouped(), grouped()
    try:
        assert first.pause() == 0.5
        assert second.pause() > 0.5  # the rest of the wait
        assert notify.hub().groups() == 1
    finally:
        first.leave()
        second.leave()
    assert notify.hub().waiters() == 0


def test_leaving_with_a_full_batch_wakes_two_more_waiters_of_the_group() -> None:
    head, middle, last = grouped(), grouped(), grouped()
    try:
        last.leave(["m1", "m2"])  # a full batch: more may be waiting
        assert head.interest is not None and head.interest.pending
        assert middle.interest is not None and middle.interest.pending
    finally:
        head.leave()
        middle.leave()


def test_leaving_with_a_partial_batch_wakes_nobody_but_a_new_head() -> None:
    head, middle, last = grouped(), grouped(), grouped()
    try:
        middle.leave(["m1"])
        assert head.interest is not None and not head.interest.pending
        assert last.interest is not None and not last.interest.pending
        head.leave([])  # the head leaves: its successor takes over the polling
        assert last.interest is not None and last.interest.pending
        assert last.pause() == 0.5
    finally:
        last.leave()


def test_a_hand_over_goes_to_a_waiter_of_the_same_label() -> None:
    red, blue, red_too = grouped("red"), grouped("blue"), grouped("red")
    try:
        red_too.leave(["m1", "m2"])
        assert red.interest is not None and red.interest.pending
        assert blue.interest is not None and not blue.interest.pending
    finally:
        red.leave()
        blue.leave()


def test_leaving_twice_does_nothing() -> None:
    wait = grouped()
    wait.leave(["m1", "m2"])
    wait.leave(["m1", "m2"])
    assert wait.interest is None
    assert notify.hub().waiters() == 0
