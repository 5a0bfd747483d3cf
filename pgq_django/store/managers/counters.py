"""The counter methods of ``Message.objects``: folding counters, reading metrics."""

from __future__ import annotations

from typing import Any

from ...conf import settings
from .. import tallies
from ..sql import counters as sql
from .base import SqlManager


class CounterMethods(SqlManager):
    """Mixed into :class:`~pgq_django.store.managers.MessageManager`."""

    def compact_counters(self) -> tuple[int, int]:
        """Returns (rows removed, rows written); run by worker maintenance."""
        row = self._one(sql.COMPACT_COUNTERS, {})
        return row.removed, row.written

    def metrics_rows(self, queue: str | None) -> list[Any]:
        """One row per queue (all, or the one named), fields named as in QueueMetrics.

        This process's pending sums are written first (:func:`pgq_django.store.tallies.flush`),
        so its own sends and acks are in the totals.
        """
        tallies.flush(self._db_alias())
        params = {"queue": queue, "exact": settings.METRICS_EXACT_COUNT}
        return self._all(sql.METRICS, params)
