"""Django's ``flush``, tried again when PostgreSQL picks it as a deadlock victim.

Why. A ``transaction=True`` test ends with Django's flush: one TRUNCATE of every table, in
an order that follows the hash seed of the run. pgq_django's background writers keep
working meanwhile, as they would in production: each process's tally thread
(pgq_django.store.tallies) writes its counter rows up to a second after a send, in a statement
that reads ``pgq_queue`` and then inserts into ``pgq_queue_counter``, and the live servers
and workers the acceptance tests start are such processes. When the TRUNCATE has already
locked the counter table and waits for ``pgq_queue``, the two wait on each other and
PostgreSQL cancels one of them. If it cancels the tally, the tally puts its sums back and
writes them next time (into a queue that no longer exists, so nothing). If it cancels the
flush, the test's teardown failed for no fault of the code under test: this command runs
the flush again. Any other failure is raised as before.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg.errors
from django.core.management.base import CommandError
from django.core.management.commands import flush

ATTEMPTS = 5


def _deadlocked(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, psycopg.errors.DeadlockDetected):
            return True
        seen = seen.__cause__
    return False


class Command(flush.Command):
    def handle(self, **options: Any) -> None:
        for attempt in range(1, ATTEMPTS + 1):
            try:
                super().handle(**options)
                return
            except CommandError as exc:
                if attempt == ATTEMPTS or not _deadlocked(exc):
                    raise
                time.sleep(0.05 * attempt)
