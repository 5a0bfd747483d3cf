"""Throttled wake-ups: a send notifies its queue's listeners at most once per interval per
process, and a wake-up it leaves out is still delivered, after its commit.

Why. ``pg_notify`` makes the committing transaction take a cluster-wide lock (PostgreSQL's
``PreCommit_Notify`` queues notifications in commit order) and hold it through the commit's
WAL flush, so notifying commits happen one at a time: about 8 % of a single sender's time
and a third of four senders' (docs/performance.md). One wake-up per queue every few
milliseconds is all a waiting consumer needs: it reads everything visible when it wakes.

How, per process and database alias (see :func:`leading` and :func:`owe`):

- A send in autocommit mode notifies (the *leading* edge) unless this process notified the
  same queue less than ``PGQ["NOTIFY_INTERVAL"]`` seconds ago. A send inside a transaction
  always notifies, as before: its commit time is unknown, and PostgreSQL sends one
  notification per queue per transaction however many statements asked.
- A send that left its notification out has committed when its statement returns
  (autocommit), and is then *owed* a wake-up: this process's flusher thread notifies every
  owed queue one interval after the last notification (the *trailing* edge), in one
  statement on its own connection. That notification commits after the skipped send did,
  so a consumer that started waiting before the send committed is woken by it: the leading
  notification of an earlier send cannot have made it miss this one, because the trailing
  one always follows.

A process that dies between a skipped send's commit and its trailing notification (at most
one interval) loses that wake-up; the consumer's poll interval covers it, as it covers a
lost LISTEN connection. ``PGQ["NOTIFY_INTERVAL"] = 0`` notifies on every send.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time

from django.db import connections

from .conf import settings

logger = logging.getLogger("pgq_django.wakeups")

# Seconds without an owed wake-up after which the flusher closes its connection.
IDLE_CLOSE = 1.0


class _Flusher:
    """This process's throttle state and the thread that sends the trailing wake-ups."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.cond = threading.Condition()
        # (alias, queue) -> monotonic time of this process's last notification of it.
        self.last: dict[tuple[str, str], float] = {}
        # alias -> queues owed a trailing wake-up.
        self.owed: dict[str, set[str]] = {}
        self.thread: threading.Thread | None = None

    def leading(self, alias: str, queue: str, interval: float) -> bool:
        now = time.monotonic()
        key = (alias, queue)
        with self.cond:
            if now - self.last.get(key, -interval) < interval:
                return False
            self.last[key] = now
            return True

    def owe(self, alias: str, queue: str) -> None:
        with self.cond:
            was_idle = not self.owed
            self.owed.setdefault(alias, set()).add(queue)
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="pgq-wakeups", daemon=True)
                self.thread.start()
            if was_idle:
                # Only an idle thread waits on the condition; a busy one flushes this too.
                self.cond.notify()

    def _run(self) -> None:
        while True:
            try:
                self._once()
            except Exception as exc:  # keep going: later owed wake-ups must still go out
                logger.warning("event=wakeup_thread_error error=%s", type(exc).__name__)
                time.sleep(0.1)

    def _once(self) -> None:
        """Wait for an owed queue, wait out the interval, notify what is owed."""
        with self.cond:
            idle = not self.owed and not self.cond.wait(IDLE_CLOSE)
        if idle:
            # Give the connection back rather than hold it for the process's life (a test
            # database could not be dropped, a pooler slot would stay taken).
            self._close_connections()
        with self.cond:
            while not self.owed:
                self.cond.wait()
            interval = float(settings.NOTIFY_INTERVAL)
            # Wait out the interval since the latest notification of an owed queue.
            latest = max(
                (self.last.get((a, q), 0.0) for a, qs in self.owed.items() for q in qs),
                default=0.0,
            )
        pause = latest + interval - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        self.flush()

    def _close_connections(self) -> None:
        with self.cond:
            aliases = {a for a, _q in self.last}
        for alias in aliases:
            connections[alias].close()

    def flush(self) -> None:
        """Notify every owed queue now (the flusher's thread, or at exit)."""
        with self.cond:
            owed, self.owed = self.owed, {}
            now = time.monotonic()
            for alias, queues in owed.items():
                for queue in queues:
                    self.last[(alias, queue)] = now
        for alias, queues in owed.items():
            try:
                _wake(alias, sorted(queues))
            except Exception as exc:  # the consumers' poll interval covers a lost wake-up
                logger.warning("event=wakeup_failed alias=%s error=%s", alias, type(exc).__name__)
                connections[alias].close()


def _wake(alias: str, queues: list[str]) -> None:
    from .models import Message

    Message.objects.db_manager(alias).wake(queues)


_state = _Flusher()


def _reset_after_fork() -> None:
    global _state
    _state = _Flusher()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


@atexit.register
def _flush_at_exit() -> None:
    if _state.pid == os.getpid() and _state.owed:
        _state.flush()


def leading(alias: str, queue: str, *, autocommit: bool) -> bool:
    """Whether a send on ``queue`` should notify in its own statement.

    False only for a send that commits when its statement returns (``autocommit``: see
    :func:`pgq_django.tallies.deferred`) on a queue this process notified less than
    ``PGQ["NOTIFY_INTERVAL"]`` ago; such a send must be followed by :func:`owe` once it
    has committed.
    """
    if not autocommit:
        return True
    interval = float(settings.NOTIFY_INTERVAL)
    if interval <= 0:
        return True
    return _state.leading(alias, queue, interval)


def owe(alias: str, queue: str) -> None:
    """A committed send on ``queue`` left its wake-up out: deliver one after the interval."""
    _state.owe(alias, queue)


def flush() -> None:
    """Send the owed wake-ups now (tests, shutdown)."""
    _state.flush()
