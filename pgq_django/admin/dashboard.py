"""Time series for the admin dashboard, built from the queue counters with the ORM.

Throughput comes straight from ``pgq_queue_counter`` (append-only rows of ``sent``,
``acked``, ``dead``, ``expired``, ``archived`` … with their time), summed per minute. There is
no stored history of queue depth, so depth over time is reconstructed backwards from the
live depth: one minute earlier the queues held what they hold now, minus what arrived in that
minute, plus what left. A message moving between queues counts twice, once where it leaves
and once where it arrives (a dead-lettered message is ``dead`` on its queue and
``dead_arrived`` on the dead-letter queue; a redriven one ``redriven_out`` and ``redriven``),
so the line is right for any set of queues, with or without their dead-letter queues.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Sum
from django.db.models.functions import TruncMinute
from django.utils import timezone

from ..conf import settings
from ..models import QueueCounter
from ..store import tallies

THROUGHPUT_KINDS = ("sent", "acked", "dead")
# Counter kinds that bring a message into a queue, and those that take one out of it.
ARRIVING_KINDS = ("sent", "dead_arrived", "redriven")
LEAVING_KINDS = ("acked", "dead", "expired", "archived", "cancelled", "purged", "redriven_out")


def _minutes(since: datetime, until: datetime) -> list[datetime]:
    start = since.replace(second=0, microsecond=0)
    out = []
    while start <= until:
        out.append(start)
        start += timedelta(minutes=1)
    return out


def series(queue_ids: Iterable[int], depth_now: int, *, minutes: int = 60) -> dict[str, Any]:
    """Per-minute throughput by kind and reconstructed total depth for the given queues."""

    tallies.flush(settings.DATABASE)  # this process's own sends and acks (see tallies)
    now = timezone.now()
    since = now - timedelta(minutes=minutes - 1)
    buckets = _minutes(since, now)
    rows = (
        QueueCounter.objects.filter(queue_id__in=list(queue_ids), at__gte=buckets[0])
        .annotate(minute=TruncMinute("at"))
        .values("minute", "kind")
        .annotate(n=Sum("n"))
    )
    per: dict[str, dict[datetime, int]] = defaultdict(dict)
    for row in rows:
        per[row["kind"]][row["minute"]] = int(row["n"])
    throughput = {kind: [per[kind].get(b, 0) for b in buckets] for kind in THROUGHPUT_KINDS}
    depth = [0] * len(buckets)
    level = depth_now
    for i in range(len(buckets) - 1, -1, -1):
        depth[i] = max(level, 0)
        b = buckets[i]
        level -= sum(per[k].get(b, 0) for k in ARRIVING_KINDS)
        level += sum(per[k].get(b, 0) for k in LEAVING_KINDS)
    return {
        "labels": [
            b.astimezone(timezone.get_current_timezone()).strftime("%H:%M") for b in buckets
        ],
        "throughput": throughput,
        "depth": depth,
    }
