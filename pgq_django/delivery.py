"""Delivery guarantees beyond lease and ack: the upkeep the worker's maintenance runs.

The statements (dedup, cancellation, results, redrive, dead-lettering, expiry, pruning)
live in :mod:`pgq_django.sql.delivery` and run through the delivery methods of
``Message.objects`` (:mod:`pgq_django.managers.delivery`); the functional API
(:mod:`pgq_django.api.delivery`) validates arguments before calling them. What stays here is
the dedup window and the two duties the worker's leader runs.
"""

from __future__ import annotations

from datetime import UTC, datetime

# How long a dedup_id suppresses duplicates after the first send (SQS: five minutes).
DEDUP_WINDOW_SECONDS = 300

# How long a dropped queue's id is kept for sweeping rows that a send or archival racing the
# drop committed after it (see pgq_django.models.DroppedQueue). Such a statement found the
# queue before the drop committed, so only a transaction that stays open this long after
# sending could leave a row that outlives it.
DROPPED_QUEUE_MEMORY_SECONDS = 24 * 3600


def dead_letter_expired_leases(*, limit: int = 1000) -> int:
    """Dead-letter messages that used up their attempts by crashing or hanging consumers."""
    from .conf import settings
    from .models import Message

    return Message.objects.db_manager(settings.DATABASE).dead_letter_expired_leases(
        limit=limit, error="lease expired after the last allowed attempt"
    )


def prune() -> dict[str, int]:
    """Retention for what is no longer live: old archive rows, spent dedup claims, and rows
    left behind by sends and archivals that raced a queue's drop.

    With ``PGQ["ARCHIVE_DROP_REQUIRES_EXPORT"]`` only archive rows that recorded Spark
    exports cover are deleted (see :func:`pgq_django.partitions.export_covered_until`).
    """
    from .conf import settings
    from .models import ArchivedMessage, Message

    before = datetime.max.replace(tzinfo=UTC)
    if settings.ARCHIVE_DROP_REQUIRES_EXPORT:
        from .partitions import export_covered_until

        before = export_covered_until() or datetime.min.replace(tzinfo=UTC)
    return {
        "archive_pruned": ArchivedMessage.objects.db_manager(settings.DATABASE).prune(
            before=before
        ),
        "dedup_pruned": Message.objects.db_manager(settings.DATABASE).prune_dedup_claims(),
        "dropped_swept": Message.objects.db_manager(settings.DATABASE).sweep_dropped_queues(
            keep=DROPPED_QUEUE_MEMORY_SECONDS
        ),
    }
