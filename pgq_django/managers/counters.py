"""The counter methods of ``Message.objects``: folding counters, reading metrics."""

from __future__ import annotations

from typing import Any

from .. import tallies
from ..conf import settings
from ..sql import counters as sql
from .base import SqlManager


class CounterMethods(SqlManager):
    """Mixed into :class:`~pgq_django.managers.MessageManager`."""

    def compact_counters(self) -> tuple[int, int]:
        """Returns (rows removed, rows written); run by worker maintenance."""
        row = self._one(sql.COMPACT_COUNTERS, {})
        return row.removed, row.written

    def add_counts(
        self, *, queue_ids: list[int], kinds: list[str], ns: list[int], ats: list[Any]
    ) -> int:
        """Write summed counts (pgq_django.tallies), one row per queue, kind and minute;
        returns how many rows were written (counts of dropped queues are left out)."""
        params = {"queue_ids": queue_ids, "kinds": kinds, "ns": ns, "ats": ats}
        return len(self._all(sql.ADD_COUNTS, params))

    def metrics_rows(self, queue: str | None) -> list[Any]:
        """One row per queue (all, or the one named), fields named as in QueueMetrics.

        This process's pending sums are written first (:func:`pgq_django.tallies.flush`),
        so its own sends and acks are in the totals.
        """
        tallies.flush(self._db_alias())
        params = {"queue": queue, "exact": settings.METRICS_EXACT_COUNT}
        return self._all(sql.METRICS, params)
