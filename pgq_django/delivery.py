"""Delivery guarantees beyond lease and ack: the upkeep the worker's maintenance runs.

The statements (dedup, cancellation, results, redrive, dead-lettering, expiry, pruning)
live in :mod:`pgq_django.sql.delivery` and run through the delivery methods of
``Message.objects`` (:mod:`pgq_django.managers.delivery`); the functional API
(:mod:`pgq_django.api.delivery`) validates arguments before calling them. What stays here is
the dedup window and the two duties the worker's leader runs.
"""

from __future__ import annotations

# How long a dedup_id suppresses duplicates after the first send (SQS: five minutes).
DEDUP_WINDOW_SECONDS = 300


def dead_letter_expired_leases(*, limit: int = 1000) -> int:
    """Dead-letter messages that used up their attempts by crashing or hanging consumers."""
    from .conf import settings
    from .models import Message

    return Message.objects.db_manager(settings.DATABASE).dead_letter_expired_leases(
        limit=limit, error="lease expired after the last allowed attempt"
    )


def prune() -> dict[str, int]:
    """Retention for what is no longer live: old archive rows and spent dedup claims."""
    from .conf import settings
    from .models import ArchivedMessage, Message

    return {
        "archive_pruned": ArchivedMessage.objects.db_manager(settings.DATABASE).prune(),
        "dedup_pruned": Message.objects.db_manager(settings.DATABASE).prune_dedup_claims(),
    }
