"""Waiting for messages: the one primitive behind every long poll.

``pgq.read_with_poll``, ``pgq.aread_with_poll``, the REST consume's ``wait_seconds`` and the
SQS endpoint's ReceiveMessage ``WaitTimeSeconds`` all wait through :class:`MessageWait`. A
wait owns four things, so that no transport has to know how any of them works:

- **The wake-up interest.** It registers with the process's LISTEN hub
  (:mod:`pgq_django.store.notify`) before its first lease, so a send committed after that lease
  wakes it; the hub's one connection serves every waiter of the process. Waits made with a
  ``group`` (the REST long-polls of a queue) are woken one per notification, a member of the
  right ``label`` first; the group's head alone re-checks on the poll interval and, when its
  own lease finds nothing, asks once which of the other members' labels have a visible
  message and wakes one waiter of each. Leaving with a full batch hands the wake-up on.
- **The deadline.** A :class:`Deadline` fixed when the wait is made; each pause lasts until a
  wake-up, the poll interval (the fallback for messages that become visible without a
  notification: delays, expiring leases) or the deadline, whichever comes first.
- **The connection release.** A caller that waits on a thread of its own (a WSGI request)
  passes ``release``, run in the database thread after each lease that found nothing: the
  wait then holds no database connection (:func:`close_connections`). An async wait holds
  none anyway: each lease is one hop to the database thread.
- **Client disconnects.** A transport that can tell when its client went away passes
  ``disconnected`` (sync: a callable answering True once the client is gone, asked after
  every pause; async: a callable returning an awaitable that completes when it is gone). The
  wait then stops without leasing again and raises :class:`ClientGone`. A wait that is
  cancelled (Django's ASGI handler cancels the view of a client that left) unregisters too.
  A lease already running in the database thread when that happens cannot be stopped: the
  wait lets it finish and hands what it found to ``give_back`` (the callers pass
  ``pgq.release_leases``), so no message stays hidden for a lease nobody received, and it
  leaves only then.

What a lease is stays the caller's: ``lease`` is a function of no arguments that leases (a
``pgq.read`` with the caller's options) and returns what it found.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from asgiref.sync import sync_to_async
from django.db import DatabaseError, connections

from ..conf import settings
from ..models import Message
from ..store import notify

T = TypeVar("T")


class ClientGone(Exception):
    """The client of a wait went away before the wait ended: nobody is left to answer."""


@dataclass(frozen=True)
class Deadline:
    """When a wait ends, on the monotonic clock (a wall-clock change cannot stretch it)."""

    at: float

    @classmethod
    def after(cls, seconds: float, *, now: float | None = None) -> Deadline:
        """The deadline ``seconds`` from ``now`` (the monotonic clock's present by default)."""
        return cls((time.monotonic() if now is None else now) + seconds)

    def remaining(self, *, now: float | None = None) -> float:
        """Seconds left (zero or less once the deadline has passed)."""
        return self.at - (time.monotonic() if now is None else now)

    def pause(self, interval: float | None, *, now: float | None = None) -> float:
        """How long the next pause may last: until the deadline, and no longer than
        ``interval`` when the waiter re-checks on an interval (None: it does not)."""
        remaining = max(self.remaining(now=now), 0.0)
        return remaining if interval is None else min(interval, remaining)


def is_full_batch(found: Sequence[Any] | None, limit: int) -> bool:
    """Whether a wait leaves with as many messages as it asked for: more may be waiting, so
    it hands its wake-up on to the next waiter of its group."""
    return found is not None and len(found) >= limit


def close_connections() -> None:
    """Close this thread's database connections that hold no transaction open.

    The ``release`` of a wait that holds a thread of its own (a WSGI request): it would
    otherwise keep its connection for the whole wait — a hundred waits, a hundred idle
    backends, and PostgreSQL's ``max_connections`` reached for the whole site. The next
    lease reconnects (or takes a connection from Django's pool).
    """
    for connection in connections.all(initialized_only=True):
        if not connection.in_atomic_block:
            connection.close()


async def until_disconnected(work: Awaitable[T], disconnected: Callable[[], Awaitable[Any]]) -> T:
    """Run ``work`` to its end, unless the client goes away first: then ``work`` is
    cancelled and :class:`ClientGone` is raised."""
    working = asyncio.ensure_future(work)
    watching = asyncio.ensure_future(disconnected())
    try:
        await asyncio.wait({working, watching}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (watching, working):
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    if working.cancelled():
        raise ClientGone()
    return working.result()  # its exception, if it raised one


class MessageWait(Generic[T]):
    """One wait for messages on one queue (see the module docstring).

    The whole wait in one call: :meth:`consume` on a thread, :meth:`aconsume` on an event
    loop. A caller that decides something between the first lease and the wait (the REST
    consume takes a place under ``PGQ["REST_MAX_THREAD_WAITS"]`` there) uses the steps:
    :meth:`register`, :meth:`look`, :meth:`release`, then :meth:`wait` or :meth:`await_rest`,
    and always :meth:`leave` (which may be called more than once).
    """

    def __init__(
        self,
        queue: str,
        lease: Callable[[], list[T]],
        *,
        seconds: float,
        poll_interval: float,
        limit: int,
        group: str | None = None,
        label: str | None = None,
        release: Callable[[], None] | None = None,
        give_back: Callable[[list[T]], Any] | None = None,
        alias: str | None = None,
    ) -> None:
        self.queue = queue
        self.give_back = give_back
        self.lease = lease
        self.deadline = Deadline.after(seconds)
        self.poll_interval = poll_interval
        self.limit = limit
        self.group = group
        self.label = label
        self._release = release
        self.alias = alias or settings.DATABASE
        self.interest: notify.Interest | None = None

    # -- the steps -------------------------------------------------------------------------

    def register(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Register for wake-ups, from a thread, for a wait on ``loop`` (None: this thread's
        wait); the hub is listening when this returns."""
        self.interest = notify.register(
            self.queue, loop=loop, group=self.group, key=self.label, alias=self.alias
        )

    async def aregister(self) -> None:
        """Register for wake-ups from the running event loop, without blocking it."""
        self.interest = await notify.aregister(
            self.queue, group=self.group, key=self.label, alias=self.alias
        )

    def look(self) -> list[T]:
        """Lease once (in the database thread). When a grouped wait heads its group and
        finds nothing, it wakes the members whose labels have a visible message."""
        found = self.lease()
        if not found and self.group is not None:
            self._wake_other_labels()
        return found

    def release(self) -> None:
        """Let go of the database connection for the pause ahead, if the caller asked to."""
        if self._release is not None:
            self._release()

    def pause(self) -> float:
        """How long the next pause may last: the head of a group (and any wait without a
        group) re-checks on the poll interval; the other members wait for a wake-up."""
        leads = self.interest is None or self.interest.hub.leads(self.interest)
        return self.deadline.pause(self.poll_interval if leads else None)

    def wait(self, disconnected: Callable[[], bool] | None = None) -> list[T]:
        """The rest of the wait on this thread, after a lease that found nothing: pause,
        lease, until something is found or the deadline passes (then ``[]``)."""
        interest = self._registered()
        found: list[T] = []
        while self.deadline.remaining() > 0:
            interest.wait(self.pause())
            if disconnected is not None and disconnected():
                raise ClientGone()
            found = self._look_and_release()
            if found:
                break
        return found

    async def await_rest(self, disconnected: Callable[[], Awaitable[Any]] | None = None) -> list[T]:
        """The rest of the wait on the event loop (see :meth:`wait`); each lease is one hop
        to the database thread."""
        if disconnected is not None:
            return await until_disconnected(self.await_rest(), disconnected)
        interest = self._registered()
        found: list[T] = []
        while self.deadline.remaining() > 0:
            await interest.await_wakeup(self.pause())
            found = await self._alook()
            if found:
                break
        return found

    def leave(self, found: Sequence[Any] | None = None) -> None:
        """Unregister; with a full batch (or a wake-up not consumed) hand the wake-up on to
        the next waiter of the group. Leaving twice does nothing."""
        interest, self.interest = self.interest, None
        if interest is not None:
            notify.unregister(interest, full_batch=is_full_batch(found, self.limit))

    # -- whole waits -----------------------------------------------------------------------

    def consume(self, disconnected: Callable[[], bool] | None = None) -> list[T]:
        """Register, lease, and wait on this thread until something is found or the
        deadline passes."""
        self.register()
        found: list[T] | None = None
        try:
            found = self._look_and_release()
            if not found:
                found = self.wait(disconnected)
        finally:
            self.leave(found)
        return found

    async def aconsume(self, disconnected: Callable[[], Awaitable[Any]] | None = None) -> list[T]:
        """:meth:`consume` on the event loop: the wait holds no thread, and each lease is one
        hop to the database thread."""
        if disconnected is not None:
            return await until_disconnected(self.aconsume(), disconnected)
        await self.aregister()
        found: list[T] | None = None
        try:
            found = await self._alook()
            if not found:
                found = await self.await_rest()
        finally:
            self.leave(found)
        return found

    # -- inside ----------------------------------------------------------------------------

    def _registered(self) -> notify.Interest:
        if self.interest is None:
            raise RuntimeError("register() the wait before waiting")
        return self.interest

    async def _alook(self) -> list[T]:
        """One lease, run in the database thread. Cancelled meanwhile, it waits for the lease
        (a thread cannot be stopped) and gives back what it found before re-raising."""
        running = asyncio.ensure_future(
            sync_to_async(self._look_and_release, thread_sensitive=True)()
        )
        try:
            return await asyncio.shield(running)
        except asyncio.CancelledError:
            found = await _outlast(running)
            if found and self.give_back is not None:
                await sync_to_async(self.give_back, thread_sensitive=True)(found)
            raise

    def _look_and_release(self) -> list[T]:
        found = self.look()
        if not found:
            self.release()
        return found

    def _wake_other_labels(self) -> None:
        interest = self._registered()
        hub = interest.hub
        if not hub.leads(interest):
            return
        others = hub.other_keys(interest)
        if not others:
            return
        messages = Message.objects.db_manager(self.alias)
        try:
            ready = messages.for_queue(self.queue).ready_labels(others)
        except DatabaseError:
            ready = others  # could not tell: each looks for itself (reads recover)
        hub.wake_keys(interest, ready)


async def _outlast(running: asyncio.Future[list[T]]) -> list[T]:
    """What ``running`` found, awaited through further cancellations (nothing if it failed)."""
    while not running.done():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(running)
    if running.cancelled() or running.exception() is not None:
        return []
    return running.result()
