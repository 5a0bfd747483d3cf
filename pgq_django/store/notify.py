"""LISTEN/NOTIFY wake-ups: one listening connection per process, shared by every waiter.

A committed send on a queue runs ``pg_notify(<channel>, <queue name>)`` in its own statement,
so a consumer waiting here learns of a new message within milliseconds instead of polling.

One :class:`Hub` per database alias and process owns the only LISTEN connection and a thread
that reads it (River's shared notifier). Waiters do not get a connection of their own: a
wait for messages (:class:`pgq_django.api.waiting.MessageWait`, behind ``read_with_poll``,
the REST long-poll and SQS ReceiveMessage), on a thread or a coroutine, registers an
:class:`Interest` in some queue names, and the hub's thread wakes the
interests that name the notified queue — a ``threading.Event`` for threads, an
``asyncio.Event`` set through ``call_soon_threadsafe`` for coroutines, on whichever event
loop they run. Forty threads or five hundred coroutines waiting cost one backend.

Which interests a notification wakes: every interest made without a ``group`` (each may
filter differently, so each must look), and, among interests of the same queue that share
a ``group`` (the REST long-polls of a queue form one), only one. A notification stands for
at least one newly committed message, so five hundred waiters on one queue no longer all
race to lease one message (a thundering herd: 500 leases, 499 empty, and the one that wins
may come last). The woken waiter hands the wake-up on when it leaves (:func:`unregister`)
after a full batch — more may be waiting: it wakes two, so a large batch fans out in about
log2(N) rounds — or while it still holds a wake-up it has not consumed, so no message is
left for the poll interval while a waiter of its group waits. Only the longest-waiting
member of a group (its head) re-checks on the poll interval (:meth:`Hub.leads`), so the
fallback costs one lease per group, not one per waiter.

Members of a group may filter differently: each carries a ``key`` (the REST long-poll's
label filter), and a wake-up or a hand-over goes to a member of the right key. While all
members share one key, a notification wakes the longest-waiting one without an unconsumed
wake-up. With several keys, it wakes the head, which leases for its own key and then asks
the database once which of the other keys have a visible message (:meth:`Hub.other_keys`,
:meth:`Hub.wake_keys`); it does the same on its poll interval. So a thousand idle waiters
with a thousand different labels cost one check per poll interval, as a thousand with one
label do, instead of one lease per label.

When the connection is lost the hub wakes every waiter (so each re-checks its queue, and
meets the database error there if the server is really gone), reconnects with a growing
pause, and wakes them all again once it listens anew: whatever was sent while nobody was
listening is found by that re-check. Waiters also re-check after their poll interval, so
polling stays the fallback, never the mechanism.

The hub is the one store service that does not depend on the process's role: it starts
when a caller first waits (a long poll asks to be woken, in a web process as in a worker),
never for a send or an ack. With ``PGQ["LISTEN"]`` off it is *quiet*: the same bookkeeping
of waiters and groups, but no thread and no connection, so waits re-check on their poll
interval (the head of each group only).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import select
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

import psycopg
from django.db import connections
from psycopg.sql import Identifier

from ..conf import settings
from ..services import ProcessService, ServiceConfig
from . import availability, db
from .sql import notify as statements

logger = logging.getLogger("pgq_django.store.notify")

# Seconds a new waiter waits for the hub to listen before it reads anyway (then only the
# poll interval can wake it until the hub is up).
READY_TIMEOUT = 5.0
# An idle listening connection is checked this often, so a silently dropped connection is
# noticed and replaced even when no notification arrives.
HEALTH_CHECK_INTERVAL = 30.0
RECONNECT_DELAYS = (0.1, 0.5, 1.0, 2.0, 5.0)
# How many waiters of a group a waiter wakes when it leaves with a full batch: two, so a
# batch of N messages reaches N waiters in about log2(N) rounds of leases, not N one after
# the other, at the price of at most one empty lease per woken waiter.
PASS_ON = 2
# Any key, for Hub._next_in (a member's key may be None).
_ANY = object()


def connection_params(alias: str | None = None) -> dict[str, Any]:
    """psycopg.connect() keyword arguments equivalent to a Django database alias.

    psycopg's own default applies to preparing (after five runs of a statement); pass
    ``prepare_threshold=None`` for a connection that may go through a transaction-mode
    pooler, where a prepared statement lives on a server connection the next transaction
    may not get.
    """
    params = _psycopg_params(connections[alias or settings.DATABASE])
    params.pop("prepare_threshold")
    return params


def listen_params(alias: str | None = None) -> dict[str, Any]:
    """psycopg.connect() keyword arguments of the LISTEN connection for ``alias``.

    ``PGQ["LISTEN_CONNECTION"]`` (Django DATABASES keys) is laid over the alias's settings:
    behind a transaction-mode pooler it points past the pooler at PostgreSQL itself, since
    a LISTEN only hears notifications while its session lasts, and a pooler hands the
    session to other clients between transactions. The database name stays the alias's
    unless the override names one (so a test database is followed).
    """
    database = connections[alias or settings.DATABASE]
    override = settings.LISTEN_CONNECTION
    if not override:
        return _psycopg_params(database)
    merged = {**database.settings_dict, **override}
    options = {**database.settings_dict.get("OPTIONS", {}), **override.get("OPTIONS", {})}
    merged["OPTIONS"] = options
    return _psycopg_params(type(database)(merged, alias=database.alias))


def _psycopg_params(database: Any) -> dict[str, Any]:
    """The keyword arguments of Django's connection ``database`` that psycopg.connect()
    takes, never preparing statements (see :func:`connection_params`)."""
    params = dict(database.get_connection_params())
    for key in ("cursor_factory", "context", "client_encoding"):
        params.pop(key, None)
    params["prepare_threshold"] = None
    return params


def _listen(conn: psycopg.Connection[Any], channel: str) -> None:
    db.run_dedicated(conn, statements.LISTEN.format(channel=Identifier(channel)))


class Listener:
    """A private LISTEN connection, for code that wants its own (the worker's notifier).

    ``read_with_poll`` and the REST long-poll do not use it; they share the process's
    :class:`Hub`.
    """

    def __init__(self, alias: str | None = None) -> None:
        self.channel = settings.NOTIFY_CHANNEL
        self.conn = psycopg.connect(**listen_params(alias), autocommit=True)
        _listen(self.conn, self.channel)
        self.pending: set[str] = set()

    def drain(self) -> set[str]:
        """Queue names notified since the last call, without waiting."""
        for note in self.conn.notifies(timeout=0):
            self.pending.add(note.payload)
        names, self.pending = self.pending, set()
        return names

    def wait(self, timeout: float) -> set[str]:
        """Wait up to ``timeout`` seconds for any notification; returns the queue names."""
        if not self.pending:
            for note in self.conn.notifies(timeout=max(timeout, 0), stop_after=1):
                self.pending.add(note.payload)
        return self.drain()

    def close(self) -> None:
        self.conn.close()


class Interest:
    """One waiter's registration for wake-ups of some queues.

    ``wait``/``await_wakeup`` return at once if a wake-up arrived since the previous call,
    so a notification that lands between a read and the wait is never lost.
    """

    def __init__(
        self,
        hub: Hub,
        queues: frozenset[str],
        loop: Any = None,
        group: Any = None,
        key: Any = None,
    ) -> None:
        self.hub = hub
        self.queues = queues
        self.loop: asyncio.AbstractEventLoop | None = loop
        self.group = group
        self.key = key  # what this member of a group filters by (see the module docstring)
        self._event = threading.Event()
        self._aevent = asyncio.Event() if loop is not None else None

    @property
    def pending(self) -> bool:
        """Woken, and the waiter has not yet looked (its next read will see the commit)."""
        return self._event.is_set()

    def wake(self) -> None:
        """Called from the hub's thread (or anywhere): mark this waiter notified."""
        self._event.set()
        if self._aevent is not None and self.loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
                self.loop.call_soon_threadsafe(self._aevent.set)

    def wait(self, timeout: float) -> bool:
        """Block this thread until woken or ``timeout`` seconds pass; True when woken."""
        woken = self._event.wait(max(timeout, 0))
        if woken:
            # Clearing after the wake is safe: the caller reads next, and that read sees every
            # commit whose notification arrived before this point.
            self._event.clear()
        return woken

    async def await_wakeup(self, timeout: float) -> bool:
        """Wait on the event loop until woken or ``timeout`` seconds pass; True when woken."""
        assert self._aevent is not None, "an async wait needs an interest made by ainterest()"
        try:
            await asyncio.wait_for(self._aevent.wait(), timeout=max(timeout, 0))
            woken = True
        except TimeoutError:
            return False
        self._aevent.clear()
        self._event.clear()
        return woken


class Hub(ProcessService[ServiceConfig]):
    """The process's one LISTEN connection for a database alias, and its reading thread
    (``pgq-notify``, a process service: started by the first wait, stopped at exit), or,
    made with ``listening=False``, the quiet hub of a process that listens not at all (see
    the module docstring)."""

    thread_name = "pgq-notify"

    def __init__(self, alias: str | None = None, *, listening: bool = True) -> None:
        super().__init__(ServiceConfig(stop_timeout=10.0))
        self.alias = alias or settings.DATABASE
        self.channel = settings.NOTIFY_CHANNEL
        self.pid = os.getpid()
        self._params = listen_params(self.alias)
        self.listening = listening
        self.ready = threading.Event()
        self.connects = 0  # how many times the hub (re)connected; tests and logs read it
        # Per queue: interests without a group, and per group the interests in arrival order
        # (a dict keeps insertion order: the first is the one that has waited longest).
        self._interests: dict[str, set[Interest]] = {}
        self._groups: dict[str, dict[Any, dict[Interest, None]]] = {}
        self._waiters_lock = threading.Lock()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._conn: psycopg.Connection[Any] | None = None
        if listening:
            self.start()
        else:
            # Nothing to hear: waiters are ready at once and re-check on their poll interval
            # (the head of each group, see leads()).
            self.ready.set()

    # Registration ------------------------------------------------------------------------

    def add(self, interest: Interest) -> None:
        with self._waiters_lock:
            for queue in interest.queues:
                if interest.group is None:
                    self._interests.setdefault(queue, set()).add(interest)
                else:
                    groups = self._groups.setdefault(queue, {})
                    groups.setdefault(interest.group, {})[interest] = None

    def remove(self, interest: Interest, *, pass_on: bool = False) -> None:
        """Unregister ``interest``; with ``pass_on``, wake the next waiters of its group and
        key."""
        targets: list[Interest] = []
        with self._waiters_lock:
            for queue in interest.queues:
                if interest.group is None:
                    waiting = self._interests.get(queue)
                    if waiting is not None:
                        waiting.discard(interest)
                        if not waiting:
                            del self._interests[queue]
                    continue
                groups = self._groups.get(queue, {})
                members = groups.get(interest.group)
                if members is None:
                    continue
                led = next(iter(members)) is interest
                members.pop(interest, None)
                if not members:
                    del groups[interest.group]
                    if not groups:
                        del self._groups[queue]
                    continue
                if pass_on:
                    targets += self._next_in(members, PASS_ON, key=interest.key)
                if led:
                    # The new head takes over the fallback polling (see leads()) and, in a
                    # group of several keys, the checks for the others.
                    head = next(iter(members))
                    if not head.pending and head not in targets:
                        targets.append(head)
        for target in targets:
            target.wake()

    def leads(self, interest: Interest) -> bool:
        """Whether ``interest`` has waited longest in its group on one of its queues.

        Only the head of a group needs the fallback poll (for messages that become visible
        without a notification: delays, expired leases); the others wait for a wake-up, and
        the head wakes its successor when it leaves. Five hundred waiters on one queue then
        poll it once per interval, not five hundred times. An interest without a group
        always polls.
        """
        if interest.group is None:
            return True
        with self._waiters_lock:
            for queue in interest.queues:
                members = self._groups.get(queue, {}).get(interest.group)
                if members and next(iter(members)) is interest:
                    return True
        return False

    def other_keys(self, interest: Interest) -> set[Any]:
        """The keys other members of ``interest``'s group wait with, besides its own: what
        the group's head checks for when its own lease finds nothing."""
        with self._waiters_lock:
            return {
                member.key
                for queue in interest.queues
                for member in self._groups.get(queue, {}).get(interest.group, ())
                if member.key != interest.key
            }

    def wake_keys(self, interest: Interest, keys: Iterable[Any]) -> None:
        """Wake, for each of ``keys``, the longest-waiting member of ``interest``'s group with
        that key and no unconsumed wake-up (the head found messages for them)."""
        targets: list[Interest] = []
        with self._waiters_lock:
            for queue in interest.queues:
                members = self._groups.get(queue, {}).get(interest.group)
                if members:
                    for key in keys:
                        targets += self._next_in(members, key=key)
        for target in targets:
            target.wake()

    def groups(self) -> int:
        """How many wake-up groups there are, counting a group once per queue."""
        with self._waiters_lock:
            return sum(len(groups) for groups in self._groups.values())

    def waiters(self, queue: str | None = None) -> int:
        """How many interests are registered (each counted once), for ``queue`` or all."""
        with self._waiters_lock:
            found = {i for q, group in self._interests.items() if queue in (None, q) for i in group}
            for q, groups in self._groups.items():
                if queue in (None, q):
                    for members in groups.values():
                        found.update(members)
            return len(found)

    @staticmethod
    def _next_in(
        members: dict[Interest, None], count: int = 1, *, key: Any = _ANY
    ) -> list[Interest]:
        """The ``count`` longest-waiting members (with ``key``, when given) without a pending
        wake-up (fewer, or none, if the others have one: each of those reads after the
        commit anyway)."""
        found: list[Interest] = []
        for member in members:
            if not member.pending and (key is _ANY or member.key == key):
                found.append(member)
                if len(found) == count:
                    break
        return found

    @staticmethod
    def _notified(members: dict[Interest, None]) -> list[Interest]:
        """Whom a notification wakes in a group: its longest-waiting member without a
        pending wake-up while all share one key; with several keys, the head, which checks
        for the others (see the module docstring)."""
        head = next(iter(members))
        if any(member.key != head.key for member in members):
            return [head]
        return Hub._next_in(members)

    def _wake(self, queues: Iterable[str] | None) -> None:
        """Wake the interests in these queues (one per group), or every interest when
        ``queues`` is None (the connection was lost or is back: everyone re-checks)."""
        with self._waiters_lock:
            if queues is None:
                targets = {i for group in self._interests.values() for i in group}
                for groups in self._groups.values():
                    for members in groups.values():
                        targets.update(members)
            else:
                targets = {i for q in queues for i in self._interests.get(q, ())}
                for q in queues:
                    for members in self._groups.get(q, {}).values():
                        targets.update(self._notified(members))
        for interest in targets:
            interest.wake()

    # The reading thread ------------------------------------------------------------------

    def _connect(self) -> psycopg.Connection[Any]:
        conn = psycopg.connect(**self._params, autocommit=True)
        _listen(conn, self.channel)
        return conn

    def run(self) -> None:
        failures = 0
        record = availability.of(self.alias)
        while not self._stop.is_set():
            if not record.may_try():
                # The database is out of reach and this is not the process's round to try.
                record.wait_turn(self._stop)
                continue
            try:
                self._conn = self._connect()
            except Exception as exc:
                self._pause(failures, exc)
                failures += 1
                continue
            record.back()
            failures = 0
            self.connects += 1
            # Anything sent while nobody listened is found by this re-check; waiters that
            # register once the hub is ready read after registering and need no wake-up.
            self._wake(None)
            self.ready.set()
            try:
                self._read_until_lost(self._conn)
            except Exception as exc:
                if not self._stop.is_set():
                    # A lost session is common (a restart, a failover) and the reconnection
                    # says whether it is an outage; anything else is worth a warning.
                    level = logging.INFO if availability.is_unreachable(exc) else logging.WARNING
                    logger.log(level, "event=notify_connection_lost error=%s", type(exc).__name__)
            finally:
                self.ready.clear()
                with contextlib.suppress(Exception):
                    self._conn.close()
                self._conn = None
            if not self._stop.is_set():
                self._wake(None)

    def _pause(self, failures: int, exc: Exception) -> None:
        if availability.noted(self.alias, exc, connecting=True):
            # The process's outage: its record reports it and paces the next attempts (run).
            self._wake(None)
            return
        delay = RECONNECT_DELAYS[min(failures, len(RECONNECT_DELAYS) - 1)]
        logger.warning(
            "event=notify_connect_failed error=%s retry_in=%.1fs", type(exc).__name__, delay
        )
        self._wake(None)
        self.sleep(delay)

    def _read_until_lost(self, conn: psycopg.Connection[Any]) -> None:
        last_check = time.monotonic()
        while not self._stop.is_set():
            wake_fd = self._wake_r.fileno()
            readable, _, _ = select.select([conn.fileno(), wake_fd], [], [], 1.0)
            if wake_fd in readable:
                with contextlib.suppress(BlockingIOError):
                    self._wake_r.recv(4096)
            if conn.fileno() in readable:
                names = {note.payload for note in conn.notifies(timeout=0)}
                if names:
                    self._wake(names)
                last_check = time.monotonic()
            elif time.monotonic() - last_check > HEALTH_CHECK_INTERVAL:
                db.run_dedicated(conn, statements.LISTENER_PING)
                last_check = time.monotonic()

    # Lifecycle ---------------------------------------------------------------------------

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> bool:
        return self.ready.wait(timeout)

    async def await_ready(self, timeout: float = READY_TIMEOUT) -> bool:
        """The async form of :meth:`wait_ready`, polling briefly instead of blocking."""
        deadline = time.monotonic() + timeout
        while not self.ready.is_set():
            if time.monotonic() >= deadline or self._stop.is_set():
                return False
            await asyncio.sleep(0.005)
        return True

    def drop_connection(self) -> None:
        """Close the listening connection as if the network had dropped it (tests use this)."""
        conn = self._conn
        if conn is not None:
            # Terminate the backend from the server side so the socket really breaks.
            with (
                contextlib.suppress(Exception),
                psycopg.connect(**self._params, autocommit=True) as killer,
            ):
                db.run_dedicated(
                    killer, statements.TERMINATE_LISTENER, {"pid": conn.info.backend_pid}
                )

    def close(self) -> None:
        """Stop the thread, close the connection and wake every waiter to re-check."""
        self._stop.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if self._thread is not threading.current_thread():
            self.wait(self.config.stop_timeout)
        self._wake(None)
        self._wake_r.close()
        self._wake_w.close()
        self.retire()

    def shutdown(self) -> None:
        self.close()

    def after_fork(self) -> None:
        # A forked child never uses its parent's hub (hub() makes it a new one): the
        # parent's thread does not exist here and its connection is the parent's.
        super().after_fork()
        self._stop.set()
        self.retire()

    @property
    def backend_pid(self) -> int | None:
        """The server process of the LISTEN connection; None while not connected (or with
        ``PGQ["LISTEN"]`` off). Behind a pooler, PgBouncer's, unless LISTEN goes past it."""
        conn = self._conn
        return None if conn is None else conn.info.backend_pid

    @property
    def alive(self) -> bool:
        running = self.is_running or not self.listening  # a quiet hub has no thread
        return self.pid == os.getpid() and not self.stopping and running


_hubs: dict[str, Hub] = {}
_hubs_lock = threading.Lock()


def hub(alias: str | None = None) -> Hub:
    """This process's hub for ``alias``, started on first use (and again after a fork); a
    quiet one with ``PGQ["LISTEN"]`` off."""
    key = alias or settings.DATABASE
    listening = bool(settings.LISTEN)
    with _hubs_lock:
        current = _hubs.get(key)
        if current is None or not current.alive or current.listening != listening:
            if current is not None and current.alive:
                current.close()  # PGQ["LISTEN"] changed (override_settings, a reload)
            elif current is not None:
                current.retire()
            # Closed quietly before the interpreter exits (pgq_django.services stops every
            # process service then), so its thread never sees an embedded server stopping
            # with the process and logs a lost connection while the process is leaving.
            current = _hubs[key] = Hub(key, listening=listening)
        return current


@contextlib.contextmanager
def interest(queues: str | Iterable[str], alias: str | None = None) -> Iterator[Interest]:
    """Register for wake-ups of ``queues`` for the ``with`` block (threads).

    The hub is listening before this returns (or :data:`READY_TIMEOUT` has passed), so a
    read made inside the block cannot miss a send that commits after it.
    """
    names = frozenset([queues] if isinstance(queues, str) else queues)
    current = hub(alias)
    registered = Interest(current, names)
    current.add(registered)
    try:
        current.wait_ready()
        yield registered
    finally:
        current.remove(registered)


@contextlib.asynccontextmanager
async def ainterest(
    queues: str | Iterable[str], alias: str | None = None
) -> AsyncIterator[Interest]:
    """The asyncio form of :func:`interest`: waiting holds no thread and no connection."""
    names = frozenset([queues] if isinstance(queues, str) else queues)
    current = hub(alias)
    registered = Interest(current, names, loop=asyncio.get_running_loop())
    current.add(registered)
    try:
        await current.await_ready()
        yield registered
    finally:
        current.remove(registered)


def register(
    queues: str | Iterable[str],
    *,
    loop: asyncio.AbstractEventLoop | None,
    group: Any,
    key: Any = None,
    alias: str | None = None,
) -> Interest:
    """Register a grouped interest for a waiter on ``loop`` (None: a thread), from any
    thread; the hub is listening when this returns (or :data:`READY_TIMEOUT` has passed).

    Waiters that share ``group`` on a queue are woken one per notification, a member of
    ``key`` when the message is for that key (see the module docstring). The caller reads
    after this, waits with :meth:`Interest.await_wakeup` (or :meth:`Interest.wait` on a
    thread), and must end with :func:`unregister`.
    """
    names = frozenset([queues] if isinstance(queues, str) else queues)
    current = hub(alias)
    registered = Interest(current, names, loop=loop, group=group, key=key)
    current.add(registered)
    current.wait_ready()
    return registered


async def aregister(
    queues: str | Iterable[str],
    *,
    group: Any = None,
    key: Any = None,
    alias: str | None = None,
) -> Interest:
    """The asyncio form of :func:`register`, for a waiter on the running event loop: it
    waits for the hub to listen without blocking the loop, and a waiter cancelled
    meanwhile is unregistered."""
    names = frozenset([queues] if isinstance(queues, str) else queues)
    current = hub(alias)
    registered = Interest(current, names, loop=asyncio.get_running_loop(), group=group, key=key)
    current.add(registered)
    try:
        await current.await_ready()
    except BaseException:
        current.remove(registered)
        raise
    return registered


def unregister(interest: Interest, *, full_batch: bool = False) -> None:
    """End a :func:`register`: hand the wake-up to the next waiter of the group when this
    one leaves with a full batch (more may be ready) or with a wake-up it never consumed."""
    interest.hub.remove(interest, pass_on=full_batch or interest.pending)


def close_all() -> None:
    """Close every hub of this process (tests, process shutdown, database teardown)."""
    with _hubs_lock:
        hubs = list(_hubs.values())
        _hubs.clear()
    for item in hubs:
        item.close()


def notify_queue(queue: str, alias: str | None = None) -> None:
    """Wake consumers of ``queue`` (after a resume, a redrive or a manual change)."""
    db.run_one(
        statements.NOTIFY_QUEUE,
        {"channel": settings.NOTIFY_CHANNEL, "queue": queue},
        alias,
        prepare=False,
    )
