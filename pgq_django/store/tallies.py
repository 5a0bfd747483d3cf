"""Counters of autocommit sends and acks, summed in the process and written once a second.

Why. Every send and ack used to insert a ``pgq_queue_counter`` row in its own statement: an
extra table write (heap, index, WAL, and a foreign-key check that share-locks the queue row)
on the two hottest statements, a cost worth removing (docs/performance.md). The
metrics and the dashboard need per-minute sums, not a row per statement.

How. A send or ack that commits on its own (autocommit: :func:`deferred`) runs the statement
without its counter row and, once the statement has returned (committed), adds its count to
this process's sums per queue, kind and minute (:func:`add`). A thread writes the sums as
ordinary counter rows, one per queue, kind and minute, every :data:`FLUSH_INTERVAL` seconds
(the ``pgq-tallies`` process service, :class:`CounterFlusher`); counts of a dropped queue
are left out, and so are counts made in a database the alias no longer names (a test run's
database, destroyed before the process exits, whose counts would otherwise be written to the
project's own). Reading metrics or the dashboard writes this process's sums first, so a
process sees its own sends at once; other processes' sums arrive within the interval.
Statements inside a transaction count in the statement, as before, so their counts commit or
roll back with it.

Trade-off (documented in docs/design.md, "Counters"): a process killed before its flush (SIGKILL,
``os._exit``) loses at most the last interval of its counts. The messages themselves are
never affected; a normal exit writes the sums (:func:`pgq_django.services.stop_process_services`).

Only a process that runs the store's services sums here (a worker, or a web process that
opted in: :func:`pgq_django.services.services_run`). Elsewhere no thread is started:
:func:`deferred` answers False, and every statement writes its own counter row, as
statements in a transaction do.

The flusher runs its one statement (``ADD_COUNTS``) through the runner itself: it sits
beside the managers in the store, below the models, and never calls back up into them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import connections

from ..services import ProcessService, ServiceConfig, services_run
from . import availability, db
from .db import django_connection
from .sql import counters as sql

logger = logging.getLogger("pgq_django.store.tallies")

# Seconds between two writes of a process's sums.
FLUSH_INTERVAL = 1.0

# (queue_id, kind, minute as epoch seconds) -> count
_Key = tuple[int, str, int]
# Whose sums: (alias, the database NAME the alias had when they were counted).
_Where = tuple[str, Any]


@dataclass(frozen=True)
class CounterFlusherConfig(ServiceConfig):
    interval: float = FLUSH_INTERVAL
    #: Idle turns after which the thread gives its database connections back.
    close_after: int = 2
    #: Idle turns after which the thread ends (the next :func:`add` starts it again).
    end_after: int = 30


class CounterFlusher(ProcessService[CounterFlusherConfig]):
    """Holds this process's sums and writes them every interval on ``pgq-tallies``."""

    thread_name = "pgq-tallies"

    def __init__(self, config: CounterFlusherConfig | None = None) -> None:
        super().__init__(config or CounterFlusherConfig())
        self.sums_lock = threading.Lock()
        # Held while sums are taken and written: a reader's flush waits for a write the
        # thread has already taken the sums for, so it never reads the counters between.
        self.write_lock = threading.Lock()
        self.pending: dict[_Where, dict[_Key, int]] = {}

    def add(self, alias: str, queue_id: int, kind: str, n: int) -> None:
        minute = int(time.time()) // 60 * 60
        where = (alias, _database_name(alias))
        with self.sums_lock:
            sums = self.pending.get(where)
            if sums is None:
                sums = self.pending[where] = defaultdict(int)
            sums[(queue_id, kind, minute)] += n
        self.ensure_started()

    def take(self, alias: str | None = None) -> dict[_Where, dict[_Key, int]]:
        with self.sums_lock:
            if alias is None:
                taken, self.pending = self.pending, {}
            else:
                taken = {w: self.pending.pop(w) for w in list(self.pending) if w[0] == alias}
        return taken

    def run(self) -> None:
        idle = 0
        while not self.sleep(self.config.interval):
            try:
                wrote = self.flush()
            except Exception as exc:  # keep going: the sums are put back for the next try
                logger.warning("event=tally_thread_error error=%s", type(exc).__name__)
                wrote = True
            if wrote:
                idle = 0
                continue
            idle += 1
            if idle == self.config.close_after:  # nothing to write lately: connections back
                for alias in connections:
                    connections[alias].close()
            if idle > self.config.end_after:
                with self.sums_lock:
                    if not self.pending:
                        # Marked as stopping under the lock: an add() after this starts a
                        # new thread (ensure_started), one before it is written first.
                        self._live = False
                        self._stop.set()
                        return

    def flush(self, alias: str | None = None) -> bool:
        """Write the pending sums (of ``alias``, or all); True when there were any.

        Returns once every sum added before the call is committed, including sums the
        thread took for its own write a moment earlier.
        """
        with self.write_lock:
            return self._write(self.take(alias))

    def _write(self, taken: dict[_Where, dict[_Key, int]]) -> bool:
        for where, sums in taken.items():
            db_alias, counted_in = where
            if _database_name(db_alias) != counted_in:
                # The alias names another database now (a test run's database was
                # destroyed and the alias given its first name back): the queues these
                # counts belong to are gone with the database they were counted in.
                logger.debug("event=tally_dropped alias=%s reason=database_changed", db_alias)
                continue
            try:
                if not availability.of(db_alias).may_try():
                    put_back = True  # out of reach: not this process's round to try
                else:
                    put_back = False
                    write_counts(db_alias, sums)
            except Exception as exc:
                put_back = True
                # Unreachable: the process's outage record reports it, once.
                if not availability.noted(db_alias, exc):
                    logger.warning("event=tally_write_failed alias=%s error=%s", db_alias, exc)
            if put_back:
                # Put them back for the next try rather than lose them.
                with self.sums_lock:
                    again = self.pending.setdefault(where, defaultdict(int))
                    for key, n in sums.items():
                        again[key] += n
                connections[db_alias].close()
        return bool(taken)

    def after_fork(self) -> None:
        # The parent's sums are the parent's to write: a child starts from nothing.
        super().after_fork()
        self.sums_lock = threading.Lock()
        self.write_lock = threading.Lock()
        self.pending = {}

    def shutdown(self) -> None:
        self.stop()
        self.flush()


def _database_name(alias: str) -> Any:
    """The database ``alias`` names now (its settings' NAME)."""
    return django_connection(alias).settings_dict.get("NAME")


def write_counts(alias: str, sums: dict[_Key, int]) -> int:
    """Write summed counts as counter rows, one per queue, kind and minute; returns how many
    rows were written (counts of dropped queues are left out)."""
    keys = list(sums)
    params = {
        "queue_ids": [k[0] for k in keys],
        "kinds": [k[1] for k in keys],
        "ns": [sums[k] for k in keys],
        "ats": [datetime.fromtimestamp(k[2], UTC) for k in keys],
    }
    return len(db.run_all(sql.ADD_COUNTS, params, alias))


#: This process's flusher (a process service: see :mod:`pgq_django.services`).
flusher = CounterFlusher()


def deferred(alias: str) -> bool:
    """Whether a statement on ``alias`` commits when it returns (autocommit, no transaction)
    and this process runs the store's services: its counts can then be summed here instead
    of written by the statement itself.

    Read from the connection's state without connecting: a connection not yet open reports
    no autocommit, and the statement then counts for itself (always correct).
    """
    return services_run() and _autocommit(alias)


def _autocommit(alias: str) -> bool:
    conn = django_connection(alias)
    return bool(conn.autocommit) and not conn.in_atomic_block


def _outside_transaction(alias: str) -> bool:
    """No transaction of the caller's is open: autocommit, or not connected yet."""
    conn = django_connection(alias)
    return conn.connection is None or _autocommit(alias)


def add(alias: str, queue_id: int, kind: str, n: int) -> None:
    """Count ``n`` events of ``kind`` on a queue, from a statement that has committed."""
    if n:
        flusher.add(alias, queue_id, kind, n)


def flush(alias: str | None = None) -> None:
    """Write this process's pending sums now, unless that would join a transaction of the
    caller's (its rollback would lose them); readers of the counters call this first."""
    if alias is not None and not _outside_transaction(alias):
        return
    flusher.flush(alias)
