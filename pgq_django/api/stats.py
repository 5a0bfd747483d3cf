"""Queue metrics in PGMQ's shape, plus in-flight and dead-letter counts."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from .. import validation as v
from ..conf import settings
from ..exceptions import QueueNotFound
from ..models import Message
from ..types import QueueRef
from .recovery import recovers


@dataclass(frozen=True)
class QueueMetrics:
    """One queue's numbers at ``scrape_time``; ages are seconds, None for an empty queue.

    ``total_messages`` counts every message ever sent to the queue, ``in_flight`` the ones
    leased right now, ``dead_letters`` the ones that ran out of retries, ``delayed`` the ones
    never delivered yet that wait for their delay to pass.
    """

    queue_name: str
    queue_length: int
    newest_msg_age_sec: float | None
    oldest_msg_age_sec: float | None
    total_messages: int
    in_flight: int
    dead_letters: int
    scrape_time: datetime
    delayed: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _rows(queue: str | None) -> list[QueueMetrics]:
    rows = Message.objects.db_manager(settings.DATABASE).metrics_rows(queue)
    return [
        QueueMetrics(
            queue_name=r[0],
            queue_length=int(r[1]),
            newest_msg_age_sec=r[2],
            oldest_msg_age_sec=r[3],
            total_messages=int(r[4]),
            in_flight=int(r[5]),
            dead_letters=int(r[6]),
            scrape_time=r[7],
            delayed=int(r[8]),
        )
        for r in rows
    ]


@recovers()
def metrics(queue: QueueRef) -> QueueMetrics:
    """Depth, ages, totals and in-flight count of one queue (PGMQ ``metrics``)."""
    name = v.name(queue)
    found = _rows(name)
    if not found:
        raise QueueNotFound.for_name(name)
    return found[0]


@recovers()
def metrics_all() -> list[QueueMetrics]:
    """:func:`metrics` for every queue, in name order, in one query."""
    return _rows(None)
