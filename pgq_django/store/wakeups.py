"""Throttled wake-ups: a send notifies its queue's listeners at most once per interval per
process, and a wake-up it leaves out is still delivered, after its commit.

Why. ``pg_notify`` makes the committing transaction take a cluster-wide lock (PostgreSQL's
``PreCommit_Notify`` queues notifications in commit order) and hold it through the commit's
WAL flush, so notifying commits happen one at a time, which costs a single sender some of
its speed and several senders to one queue much more (docs/performance.md). One wake-up
per queue every few milliseconds is all a waiting consumer needs: it reads everything
visible when it wakes.

How, per process and database alias (see :func:`leading` and :func:`owe`):

- A send in autocommit mode notifies (the *leading* edge) unless this process notified the
  same queue less than ``PGQ["NOTIFY_INTERVAL"]`` seconds ago. A send inside a transaction
  always notifies, as before: its commit time is unknown, and PostgreSQL sends one
  notification per queue per transaction however many statements asked.
- A send that left its notification out has committed when its statement returns
  (autocommit), and is then *owed* a wake-up. A later leading send on the same queue that
  notified, and began after the owed sends had committed, pays the debt: its notification
  commits after theirs did (:func:`covered`). Whatever is still owed when its deadline comes
  — :data:`GRACE` intervals after the notification that preceded the first owed send —
  this process's flusher thread notifies, in one statement on its own connection. Either
  way the notification commits after the skipped send did, so a consumer that started
  waiting before the send committed is woken by it: the leading notification of an earlier
  send cannot have made it miss this one, because another one always follows.

A steady stream of sends thus carries its own wake-ups (one per interval, in the leading
sends' statements) and the flusher stays idle; it only speaks for a stream that stopped.
Its deadline is half an interval later than the next leading send would come, so that send
can finish first: a statement of the flusher's per interval was a visible cost to every
single send.

A process that dies between a skipped send's commit and its trailing notification (at most
:data:`GRACE` intervals) loses that wake-up; the consumer's poll interval covers it, as it
covers a lost LISTEN connection. ``PGQ["NOTIFY_INTERVAL"] = 0`` notifies on every send.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from django.db import connections

from ..conf import settings
from ..services import ProcessService, ServiceConfig
from . import db
from .sql import messages as sql

logger = logging.getLogger("pgq_django.store.wakeups")

# Seconds without an owed wake-up after which the flusher closes its connection.
IDLE_CLOSE = 1.0
# The flusher notifies an owed queue this many intervals after the notification that came
# before the first owed send: later than the next leading send (one interval), which then
# pays the debt in its own statement when sends keep coming.
GRACE = 1.5


@dataclass(frozen=True)
class WakeupFlusherConfig(ServiceConfig):
    #: Seconds without an owed wake-up after which the thread gives its connections back.
    idle_close: float = IDLE_CLOSE


class WakeupFlusher(ProcessService[WakeupFlusherConfig]):
    """This process's throttle state and ``pgq-wakeups``, which sends the trailing wake-ups.

    Started by the first send that leaves its wake-up owed; it then runs with the process,
    giving its database connections back whenever nothing is owed for ``idle_close``
    seconds. Stopping it (at exit) sends what is still owed.
    """

    thread_name = "pgq-wakeups"

    def __init__(self, config: WakeupFlusherConfig | None = None) -> None:
        super().__init__(config or WakeupFlusherConfig())
        self._reset_state()

    def _reset_state(self) -> None:
        # The condition's own lock, also taken alone (a plain lock is a C call; entering the
        # condition is two Python calls) where nothing waits or is woken.
        self.state_lock = threading.Lock()
        self.cond = threading.Condition(self.state_lock)
        # (alias, queue) -> monotonic time of this process's last notification of it.
        self.last: dict[tuple[str, str], float] = {}
        # alias -> queue owed a trailing wake-up -> [deadline, time of the latest owe].
        self.owed: dict[str, dict[str, list[float]]] = {}

    def leading(self, alias: str, queue: str, interval: float) -> bool:
        # Without the lock (each dict access is atomic): two threads that both find the
        # interval over both notify, which is harmless; one that skips on a value read as
        # another thread renews it owes its wake-up (owe), which is always delivered.
        now = time.monotonic()
        key = (alias, queue)
        last = self.last.get(key)
        if last is not None and now - last < interval:
            return False
        self.last[key] = now
        return True

    def owe(self, alias: str, queue: str, interval: float) -> None:
        now = time.monotonic()
        with self.state_lock:  # the condition's: notify() below is allowed
            was_idle = not self.owed
            queues = self.owed.setdefault(alias, {})
            entry = queues.get(queue)
            if entry is None:
                # Fixed when the debt starts: a later leading send that did not notify (a
                # delayed one) cannot push it back.
                deadline = self.last.get((alias, queue), now) + GRACE * interval
                queues[queue] = [deadline, now]
            else:
                entry[1] = now
            if was_idle:
                # Only an idle thread waits on the condition; a busy one flushes this too.
                self.cond.notify()
        self.ensure_started()

    def covered(self, alias: str, queue: str, since: float) -> None:
        with self.state_lock:
            queues = self.owed.get(alias)
            entry = queues.get(queue) if queues else None
            if entry is not None and entry[1] < since:
                del queues[queue]  # type: ignore[union-attr]
                if not queues:
                    del self.owed[alias]

    def run(self) -> None:
        while not self.stopping:
            try:
                self._once()
            except Exception as exc:  # keep going: later owed wake-ups must still go out
                logger.warning("event=wakeup_thread_error error=%s", type(exc).__name__)
                self.sleep(0.1)

    def _once(self) -> None:
        """Wait for an owed queue, wait for its deadline, notify what is then due."""
        with self.cond:
            idle = not self.owed and not self.cond.wait(self.config.idle_close)
        if idle:
            # Give the connection back rather than hold it for the process's life (a test
            # database could not be dropped, a pooler slot would stay taken).
            self._close_connections()
        with self.cond:
            while not self.owed and not self.stopping:
                self.cond.wait()
            if not self.owed:
                return
            due = min(entry[0] for queues in self.owed.values() for entry in queues.values())
        pause = due - time.monotonic()
        if pause > 0 and self.sleep(pause):
            return  # stopping: shutdown() sends what is owed
        self.flush(due=time.monotonic())

    def _close_connections(self) -> None:
        with self.cond:
            aliases = {a for a, _q in list(self.last)}  # leading() adds keys unlocked
        for alias in aliases:
            connections[alias].close()

    def flush(self, due: float | None = None) -> None:
        """Notify the owed queues whose deadline is ``due`` or earlier (None: every one) now
        (the flusher's thread; every one at exit)."""
        taken: dict[str, list[str]] = {}
        with self.cond:
            now = time.monotonic()
            for alias, queues in list(self.owed.items()):
                for queue, entry in list(queues.items()):
                    if due is None or entry[0] <= due:
                        del queues[queue]
                        taken.setdefault(alias, []).append(queue)
                        self.last[(alias, queue)] = now
                if not queues:
                    del self.owed[alias]
        for alias, names in taken.items():
            try:
                _wake(alias, sorted(names))
            except Exception as exc:  # the consumers' poll interval covers a lost wake-up
                logger.warning("event=wakeup_failed alias=%s error=%s", alias, type(exc).__name__)
                connections[alias].close()

    def stop(self) -> bool:
        self._stop.set()
        with self.cond:
            self.cond.notify_all()  # an idle thread waits on the condition, not the event
        return super().stop()

    def after_fork(self) -> None:
        # The parent's debts are the parent's to pay: a child starts from nothing.
        super().after_fork()
        self._reset_state()

    def shutdown(self) -> None:
        self.stop()
        if self.owed:
            self.flush()


def _wake(alias: str, queues: list[str]) -> None:
    """Notify the listeners of ``queues``: the trailing wake-ups of throttled sends, run
    through the runner by this store service itself, below the models."""
    db.run_one(sql.WAKE, {"channel": settings.NOTIFY_CHANNEL, "queues": queues}, alias)


#: This process's flusher (a process service: see :mod:`pgq_django.services`).
flusher = WakeupFlusher()


def leading(alias: str, queue: str, *, autocommit: bool) -> bool:
    """Whether a send on ``queue`` should notify in its own statement.

    False only for a send that commits when its statement returns (``autocommit``: see
    :func:`pgq_django.store.tallies.deferred`) on a queue this process notified less than
    ``PGQ["NOTIFY_INTERVAL"]`` ago; such a send must be followed by :func:`owe` once it
    has committed.
    """
    if not autocommit:
        return True
    interval = float(settings.NOTIFY_INTERVAL)
    if interval <= 0:
        return True
    return flusher.leading(alias, queue, interval)


def owe(alias: str, queue: str) -> None:
    """A committed send on ``queue`` left its wake-up out: deliver one after the interval."""
    flusher.owe(alias, queue, float(settings.NOTIFY_INTERVAL))


def covered(alias: str, queue: str, since: float) -> None:
    """A leading send on ``queue`` that began at ``since`` (``time.monotonic()``) notified
    and has committed: it pays what sends that committed before it began were owed."""
    flusher.covered(alias, queue, since)


def flush() -> None:
    """Send the owed wake-ups now (tests, shutdown)."""
    flusher.flush()
