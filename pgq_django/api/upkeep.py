"""The delivery duties the worker's leader runs besides partition upkeep: rescuing
messages whose consumers crashed on their last attempt, and pruning what is no longer live.

Each calls one method of the store's managers on the queue database; the worker's
maintenance (:mod:`pgq_django.worker.maintenance`) decides when.
"""

from __future__ import annotations

from datetime import UTC, datetime

from ..conf import settings
from ..models import ArchivedMessage, Message
from ..store.partitions import export_covered_until
from ..store.sql.delivery import DROPPED_QUEUE_MEMORY_SECONDS


def dead_letter_expired_leases(*, limit: int = 1000) -> int:
    """Dead-letter messages that used up their attempts by crashing or hanging consumers."""
    return Message.objects.db_manager(settings.DATABASE).dead_letter_expired_leases(
        limit=limit, error="lease expired after the last allowed attempt"
    )


def prune() -> dict[str, int]:
    """Retention for what is no longer live: old archive rows, spent dedup claims, and rows
    left behind by sends and archivals that raced a queue's drop.

    With ``PGQ["ARCHIVE_DROP_REQUIRES_EXPORT"]`` only archive rows that recorded Spark
    exports cover are deleted (see :func:`pgq_django.partitions.export_covered_until`).
    """
    before = datetime.max.replace(tzinfo=UTC)
    if settings.ARCHIVE_DROP_REQUIRES_EXPORT:
        before = export_covered_until() or datetime.min.replace(tzinfo=UTC)
    messages = Message.objects.db_manager(settings.DATABASE)
    return {
        "archive_pruned": ArchivedMessage.objects.db_manager(settings.DATABASE).prune(
            before=before
        ),
        "dedup_pruned": messages.prune_dedup_claims(),
        "dropped_swept": messages.sweep_dropped_queues(keep=DROPPED_QUEUE_MEMORY_SECONDS),
    }
