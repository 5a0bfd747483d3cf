"""Whether this process can reach PostgreSQL, and when it may try again: one record per
database alias, shared by every thread of the process.

While PostgreSQL is down, every thread that uses it — API callers, the worker's threads, the
lease extender, the leader, the LISTEN hub, the counter flusher — would otherwise try to
connect as often as its loop turns and log each failure with a traceback: thousands of lines
in a minute, and a core spent failing. Instead:

- The first connection attempt that fails marks the database *lost*: one
  ``event=database_lost`` line.
- From then on, attempts are rationed for the whole process: one attempt per round, rounds
  spaced by exponential back-off with jitter (:data:`RECONNECT_BASE` seconds, doubling, up to
  :data:`RECONNECT_CAP`). A thread asks :meth:`Availability.may_try` before it connects; the
  first to ask once a round is due makes that round's attempt. Loops wait for the next round
  (:meth:`Availability.wait_turn`), sleeping, never spinning; an API call that would have to
  connect between rounds fails at once with :class:`~pgq_django.DatabaseUnavailable`,
  having sent nothing.
- While it stays down, one ``event=database_still_down`` line every :data:`REPORT_INTERVAL`
  seconds, with the outage's length so far and the attempts made.
- The first connection that works, made by any thread, ends the outage: one
  ``event=database_back`` line with its length, and every waiting loop resumes at once.

Only failures to *connect* open an outage. A session lost mid-statement (a terminated
backend, a restart) is the recovery's business (:mod:`pgq_django.api.recovery`): the next
attempt reconnects at once, and only if that fails is the database lost.

:func:`status` answers readiness questions (the ``/v1/ready`` view, the
``pgq_database_up`` gauge of ``/metrics``) from what this process has seen, without a round
trip: a check that needed the database to say the database is down would wait on it.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from dataclasses import dataclass
from typing import Any

from django.db import InterfaceError, OperationalError
from psycopg import InterfaceError as PsycopgInterfaceError
from psycopg import OperationalError as PsycopgOperationalError

from ..exceptions import ConnectionLost, DatabaseUnavailable

logger = logging.getLogger("pgq_django.availability")

#: Seconds before the first new attempt after the database was lost; each further round
#: waits twice as long, up to :data:`RECONNECT_CAP`, with jitter (half fixed, half random),
#: so the processes of a fleet do not knock all at once when it comes back.
RECONNECT_BASE = 0.25
#: The longest wait between two attempts: once the database is back, a process notices
#: within this many seconds.
RECONNECT_CAP = 5.0
#: Seconds between two ``event=database_still_down`` lines of one outage.
REPORT_INTERVAL = 30.0

# SQLSTATEs that say the server is not there to talk to: connection exceptions (class 08),
# and a server shutting down, crashed, or still starting.
_UNREACHABLE_STATES = ("08", "57P01", "57P02", "57P03")


@dataclass(frozen=True)
class DatabaseStatus:
    """What a process knows of its database: up, or down for how long, after how many
    failed attempts."""

    alias: str
    up: bool
    #: Seconds since the database was lost (0.0 while up).
    down_for: float
    #: Failed attempts since it was lost (0 while up).
    attempts: int
    #: Outages this process has seen since it started.
    outages: int
    #: Seconds until the next attempt is due (0.0 while up, or when one is due now).
    next_attempt_in: float


def is_unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says the database cannot be reached (rather than that a statement
    was wrong, a lock timed out or a constraint failed)."""
    seen: set[int] = set()
    error: BaseException | None = exc
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, ConnectionLost):
            return True
        if isinstance(error, PsycopgOperationalError | PsycopgInterfaceError):
            state = getattr(error, "sqlstate", None)
            return state is None or state.startswith(_UNREACHABLE_STATES)
        if isinstance(error, OperationalError | InterfaceError) and error.__cause__ is None:
            # Django's own (a closed connection, a refused use of one): nothing to ask.
            return isinstance(error, InterfaceError) or "connection" in str(error).lower()
        error = error.__cause__
    return False


class Availability:
    """The outage record of one database alias (see the module docstring)."""

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self._cond = threading.Condition()
        self._down_since: float | None = None
        self._rounds = 0
        self._attempts = 0
        self._next_attempt = 0.0
        self._reported = 0.0
        self._outages = 0

    @property
    def up(self) -> bool:
        return self._down_since is None

    def status(self) -> DatabaseStatus:
        with self._cond:
            now = time.monotonic()
            down = self._down_since
            return DatabaseStatus(
                alias=self.alias,
                up=down is None,
                down_for=0.0 if down is None else now - down,
                attempts=0 if down is None else self._attempts,
                outages=self._outages,
                next_attempt_in=0.0 if down is None else max(0.0, self._next_attempt - now),
            )

    @staticmethod
    def _delay(rounds: int) -> float:
        ceiling = min(RECONNECT_CAP, RECONNECT_BASE * 2.0 ** min(rounds, 30))
        return ceiling * (0.5 + random.random() * 0.5)

    def may_try(self) -> bool:
        """Whether this thread may try to connect now: always while the database is up;
        during an outage only when a round is due, and then only the first thread to ask
        (the others wait for the next round, or for its success)."""
        if self._down_since is None:
            return True
        with self._cond:
            if self._down_since is None:
                return True
            now = time.monotonic()
            if now < self._next_attempt:
                return False
            self._rounds += 1
            self._next_attempt = now + self._delay(self._rounds)
            return True

    def lost(self, error: BaseException) -> None:
        """A connection attempt failed: open the outage, or count the attempt in it."""
        now = time.monotonic()
        with self._cond:
            if self._down_since is None:
                self._down_since = self._reported = now
                self._rounds = self._attempts = 0
                self._next_attempt = now + self._delay(0)
                self._outages += 1
                logger.warning(
                    "event=database_lost alias=%s error=%r; retrying with back-off, "
                    "reporting every %gs while it stays down",
                    self.alias,
                    summary(error),
                    REPORT_INTERVAL,
                )
                return
            self._attempts += 1
            if now - self._reported < REPORT_INTERVAL:
                return
            self._reported = now
            down_for = now - self._down_since
            attempts = self._attempts
        logger.warning(
            "event=database_still_down alias=%s seconds=%.0f attempts=%s error=%r",
            self.alias,
            down_for,
            attempts,
            summary(error),
        )

    def back(self) -> None:
        """A connection was made: end the outage, if there was one, and wake the waiters.

        Called on every new connection, so the usual answer (no outage) is one attribute
        read."""
        if self._down_since is None:
            return
        with self._cond:
            if self._down_since is None:
                return
            down_for = time.monotonic() - self._down_since
            attempts = self._attempts
            self._down_since = None
            self._cond.notify_all()
        logger.warning(
            "event=database_back alias=%s outage_seconds=%.1f attempts=%s",
            self.alias,
            down_for,
            attempts,
        )

    def wait_turn(self, stop: threading.Event | None = None, longest: float | None = None) -> None:
        """Sleep until this process's next attempt is due or the database is back (at once
        while it is up); also return when ``stop`` is set, or after ``longest`` seconds."""
        deadline = None if longest is None else time.monotonic() + longest
        while True:
            with self._cond:
                if self._down_since is None:
                    return
                now = time.monotonic()
                until = self._next_attempt
                if deadline is not None:
                    until = min(until, deadline)
                if until <= now:
                    return
                # A stop request is an Event of its own: look at it twice a second.
                self._cond.wait(min(until - now, 0.5) if stop is not None else until - now)
            if stop is not None and stop.is_set():
                return


def summary(error: BaseException) -> str:
    """An error in one line, for a log line without a traceback."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


_RECORDS: dict[str, Availability] = {}
_RECORDS_LOCK = threading.Lock()


def of(alias: str) -> Availability:
    """The outage record of database ``alias`` in this process."""
    found = _RECORDS.get(alias)
    if found is None:
        with _RECORDS_LOCK:
            found = _RECORDS.setdefault(alias, Availability(alias))
    return found


def status(alias: str) -> DatabaseStatus:
    """Database ``alias`` as this process last saw it (see the module docstring)."""
    return of(alias).status()


def noted(alias: str, exc: BaseException, *, connecting: bool = False) -> bool:
    """Whether ``exc`` says database ``alias`` cannot be reached, in which case the caller
    need not log it: the outage's own lines say what happened. ``connecting``: the error
    came from an attempt to connect, which counts in the process's outage (opening it if
    need be); a session lost mid-statement does not, since the next connection may work.
    """
    if not is_unreachable(exc):
        return False
    if connecting and not isinstance(exc, DatabaseUnavailable):  # the API counted that one
        of(alias).lost(exc)
    return True


def _forget_in_child() -> None:
    """A forked child starts with no outage of its own (and with no lock another thread of
    its parent may have held)."""
    global _RECORDS_LOCK
    _RECORDS.clear()
    _RECORDS_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def on_connection_created(sender: Any, connection: Any, **kwargs: Any) -> None:
    """Django's ``connection_created`` signal: any thread's new connection ends an outage."""
    of(connection.alias).back()
