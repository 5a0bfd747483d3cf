"""The delivery methods of ``Message.objects``: dedup, cancel, result, release, redrive,
dead-lettering of crashed deliveries, expiry, spent dedup claims and dropped queues' leftovers.

One method per statement of :mod:`pgq_django.store.sql.delivery`; the functional API
(:mod:`pgq_django.api.delivery`) validates arguments and turns "no such queue" into errors,
and the worker's maintenance duties call the upkeep methods.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from django.utils import timezone

from ...conf import settings
from ..sql import delivery as sql
from ..sql.params import receipt_params, send_deduplicated_params
from .base import MessageRef, SqlManager


class DeliveryMethods(SqlManager):
    """Mixed into :class:`~pgq_django.store.managers.MessageManager`."""

    def send_deduplicated(self, queue: str, body: str, *, size: int, **options: Any) -> Any:
        """Send one body under ``options["dedup_id"]``; a repeat within the window answers
        the first send's id. Returns the row (found_queue_id, msg_id, inserted, notified,
        queue_full)."""
        params = send_deduplicated_params(
            queue, body, size=size, channel=settings.NOTIFY_CHANNEL, options=options
        )
        return self._ops().send_deduplicated([params])[0]

    def cancel(self, queue: str, msg_id: int) -> tuple[int | None, str | None]:
        """Returns (queue_id or None, 'cancelled' | 'cancel_requested' | None)."""
        row = self._one(sql.CANCEL, {"queue": queue, "msg_id": msg_id})
        return row.found_queue_id, row.outcome

    def cancel_requested(self, msg_id: int) -> bool:
        """Whether a cancel was asked for the live message ``msg_id``."""
        row = self._one(sql.CANCEL_REQUESTED, {"msg_id": msg_id})
        return bool(row and row.cancel_requested)

    def result(self, msg_id: int) -> Any:
        """Where the message is (location, queue_name, outcome, result, error, finished_at,
        then its message columns), or None if it left no trace."""
        return self._one(sql.RESULT, {"msg_id": msg_id})

    def release_leases(self, queue: str, refs: Sequence[MessageRef]) -> tuple[int | None, Any]:
        """Returns (queue_id or None, [released ids])."""
        params = {"queue": queue, "channel": settings.NOTIFY_CHANNEL, **receipt_params(refs)}
        row = self._one(sql.RELEASE_LEASES, params)
        return row.found_queue_id, row.msg_ids

    def redrive(
        self, dlq: str, *, to: str | None, origins: list[str] | None, limit: int | None
    ) -> tuple[int | None, int]:
        """Returns (dead-letter queue id or None, how many moved)."""
        params = {
            "dlq": dlq,
            "to": to,
            "origins": origins,
            "limit": limit,
            "channel": settings.NOTIFY_CHANNEL,
        }
        row = self._one(sql.REDRIVE, params)
        return row.found_queue_id, int(row.moved)

    def dead_letter_origins(self, dlq: str) -> dict[str, int]:
        """Queue name -> how many of the dead-letter queue's messages failed there."""
        rows = self._all(sql.DEAD_LETTER_ORIGINS, {"dlq": dlq})
        return {row.queue_name: int(row.messages) for row in rows}

    def dead_letter_expired_leases(self, *, limit: int, error: str) -> int:
        """Dead-letter up to ``limit`` messages whose last allowed lease ran out."""
        params = {"limit": limit, "error": error, "channel": settings.NOTIFY_CHANNEL}
        return int(self._one(sql.DEAD_LETTER_EXPIRED_LEASES, params).dead)

    def expire(self, queue_id: int | None = None) -> int:
        """Archive as 'expired' the messages past their expiry (of one queue, or all)."""
        return int(self._one(sql.EXPIRE, {"queue_id": queue_id}).expired)

    def prune_dedup_claims(self) -> int:
        """Forget dedup claims whose window has passed; returns how many."""
        return int(self._one(sql.PRUNE_DEDUP, {}).pruned)

    def sweep_dropped_queues(self, *, keep: float) -> int:
        """Delete the messages, archive rows and counter rows of dropped queues that
        statements racing the drop left behind, then forget drops older than ``keep``
        seconds; returns how many messages and archive rows went. Without a dropped queue
        to remember it runs no statement on the message tables."""
        # The model beside Message in the app's registry: models import managers, not the
        # other way round.
        dropped_queue = self.model._meta.apps.get_model("pgq_django", "DroppedQueue")
        dropped = dropped_queue.objects.using(self._db_alias())
        ids = list(dropped.values_list("queue_id", flat=True))
        if not ids:
            return 0
        row = self._one(sql.SWEEP_DROPPED_QUEUES, {"ids": ids}, prepare=False)
        dropped.filter(dropped_at__lt=timezone.now() - timedelta(seconds=keep)).delete()
        return int(row.messages) + int(row.archived)
