"""Counters of autocommit sends and acks, summed in the process and written once a second.

Why. Every send and ack used to insert a ``pgq_queue_counter`` row in its own statement: an
extra table write (heap, index, WAL, and a foreign-key check that share-locks the queue row)
on the two hottest statements, about a tenth of their cost (docs/performance.md). The
metrics and the dashboard need per-minute sums, not a row per statement.

How. A send or ack that commits on its own (autocommit: :func:`deferred`) runs the statement
without its counter row and, once the statement has returned (committed), adds its count to
this process's sums per queue, kind and minute (:func:`add`). A thread writes the sums as
ordinary counter rows, one per queue, kind and minute, every :data:`FLUSH_INTERVAL`
seconds; counts of a dropped queue are left out, and so are counts made in a database
the alias no longer names (a test run's database, destroyed before the process exits,
whose counts would otherwise be written to the project's own). Reading metrics or the
dashboard writes this process's sums first, so a process sees its own sends at once; other
processes' sums arrive within the interval. Statements inside a transaction count in the
statement, as before, so their counts commit or roll back with it.

Trade-off (documented in docs/performance.md): a process killed before its flush (SIGKILL,
``os._exit``) loses at most the last interval of its counts. The messages themselves are
never affected; a normal exit writes the sums (``atexit``).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

from django.db import connections

from .db import django_connection

logger = logging.getLogger("pgq_django.tallies")

# Seconds between two writes of a process's sums.
FLUSH_INTERVAL = 1.0

# (queue_id, kind, minute as epoch seconds) -> count
_Key = tuple[int, str, int]
# Whose sums: (alias, the database NAME the alias had when they were counted).
_Where = tuple[str, Any]


class _Sums:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.pending: dict[_Where, dict[_Key, int]] = {}
        self.thread: threading.Thread | None = None

    def add(self, alias: str, queue_id: int, kind: str, n: int) -> None:
        minute = int(time.time()) // 60 * 60
        where = (alias, _database_name(alias))
        with self.lock:
            sums = self.pending.get(where)
            if sums is None:
                sums = self.pending[where] = defaultdict(int)
            sums[(queue_id, kind, minute)] += n
            if self.thread is None:  # the thread clears it, under the lock, as it ends
                self.thread = threading.Thread(target=self._run, name="pgq-tallies", daemon=True)
                self.thread.start()

    def take(self, alias: str | None = None) -> dict[_Where, dict[_Key, int]]:
        with self.lock:
            if alias is None:
                taken, self.pending = self.pending, {}
            else:
                taken = {w: self.pending.pop(w) for w in list(self.pending) if w[0] == alias}
        return taken

    def _run(self) -> None:
        idle = 0
        while True:
            time.sleep(FLUSH_INTERVAL)
            try:
                wrote = self.flush()
            except Exception as exc:  # keep going: the sums are put back for the next try
                logger.warning("event=tally_thread_error error=%s", type(exc).__name__)
                wrote = True
            if wrote:
                idle = 0
                continue
            idle += 1
            if idle == 2:  # nothing to write lately: give the connection back
                for alias in connections:
                    connections[alias].close()
            if idle > 30:  # a thread is started again by the next add()
                with self.lock:
                    if not self.pending:
                        self.thread = None
                        return

    def flush(self, alias: str | None = None) -> bool:
        """Write the pending sums (of ``alias``, or all); True when there were any."""
        taken = self.take(alias)
        for where, sums in taken.items():
            db_alias, counted_in = where
            if _database_name(db_alias) != counted_in:
                # The alias names another database now (a test run's database was
                # destroyed and the alias given its first name back): the queues these
                # counts belong to are gone with the database they were counted in.
                logger.debug("event=tally_dropped alias=%s reason=database_changed", db_alias)
                continue
            try:
                _write(db_alias, sums)
            except Exception as exc:
                # Put them back for the next try rather than lose them.
                logger.warning("event=tally_write_failed alias=%s error=%s", db_alias, exc)
                with self.lock:
                    again = self.pending.setdefault(where, defaultdict(int))
                    for key, n in sums.items():
                        again[key] += n
                connections[db_alias].close()
        return bool(taken)


def _database_name(alias: str) -> Any:
    """The database ``alias`` names now (its settings' NAME)."""
    return django_connection(alias).settings_dict.get("NAME")


def _write(alias: str, sums: dict[_Key, int]) -> None:
    from .models import Message

    keys = list(sums)
    Message.objects.db_manager(alias).add_counts(
        queue_ids=[k[0] for k in keys],
        kinds=[k[1] for k in keys],
        ns=[sums[k] for k in keys],
        ats=[datetime.fromtimestamp(k[2], UTC) for k in keys],
    )


_sums = _Sums()


def _reset_after_fork() -> None:
    # The parent's sums are the parent's to write: a child starts from nothing.
    global _sums
    _sums = _Sums()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


@atexit.register
def _flush_at_exit() -> None:
    if _sums.pid == os.getpid():
        _sums.flush()


def deferred(alias: str) -> bool:
    """Whether a statement on ``alias`` commits when it returns (autocommit, no transaction):
    its counts can then be summed here instead of written by the statement itself.

    Read from the connection's state without connecting: a connection not yet open reports
    no autocommit, and the statement then counts for itself (always correct).
    """
    db = django_connection(alias)
    return bool(db.autocommit) and not db.in_atomic_block


def add(alias: str, queue_id: int, kind: str, n: int) -> None:
    """Count ``n`` events of ``kind`` on a queue, from a statement that has committed."""
    if n:
        _sums.add(alias, queue_id, kind, n)


def flush(alias: str | None = None) -> None:
    """Write this process's pending sums now, unless that would join a transaction of the
    caller's (its rollback would lose them); readers of the counters call this first."""
    if alias is not None and not deferred(alias):
        return
    _sums.flush(alias)
