"""The composable message queryset: lease with any Django lookup.

``Message.objects.for_queue(q).filter(...).lease(qty, vt)`` selects with the ORM
(``select_for_update(skip_locked=True)``) and leases with one UPDATE around it
(:data:`pgq_django.store.sql.messages.LEASE_SELECTED`), with the receipts and semantics of
:func:`pgq_django.read`. The hot-path read is :meth:`MessageManager.lease
<pgq_django.store.managers.MessageManager.lease>`: one prepared statement.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import models, transaction
from django.db.models.functions import Now

from ... import validation as v
from ...conf import settings
from ...exceptions import InvalidArgument, QueueNotFound, QueuePaused
from .. import db
from ..sql.messages import LEASE_SELECTED


class _ClockTimestamp(models.Func):
    """``clock_timestamp()``: the time now, as the hand-written statements compare against
    (``Now()`` is the transaction's start, which a long transaction would hold back)."""

    template = "clock_timestamp()"
    output_field = models.DateTimeField()


class MessageQuerySet(models.QuerySet):
    """Querysets over live messages: browsing filters, and leasing with any Django lookup.

    ``Message.objects.for_queue("orders").filter(message__customer=7).lease(qty=10, vt=30)``
    leases like :func:`pgq_django.read` (same receipts, ``read_ct`` + 1, visibility timeout,
    priority then msg_id order, FIFO group heads only, paused queues refused) but selects
    with whatever the queryset says. ``read`` stays the hot path: one prepared statement
    with a fixed filter set; this one is compiled by the ORM on every call.
    """

    _pgq_queue: str | None = None

    def _clone(self) -> Any:
        clone = super()._clone()  # type: ignore[misc]
        clone._pgq_queue = self._pgq_queue
        return clone

    def for_queue(self, name: str) -> MessageQuerySet:
        """The messages of one queue (the queue :meth:`lease` leases from)."""
        clone = self.filter(queue__name=name)
        clone._pgq_queue = name
        return clone

    def visible(self) -> MessageQuerySet:
        return self.filter(vt__lte=Now())

    def in_flight(self) -> MessageQuerySet:
        return self.filter(vt__gt=Now(), read_ct__gt=0)

    def ready_labels(self, labels: Iterable[str | None]) -> set[str | None]:
        """Which of ``labels`` a read of this queryset's queue would find a message for now
        (``None`` stands for a read without a label filter: any visible message).

        Leases nothing: a long-poll that waits for one label asks this on behalf of waiters
        with other labels, in one or two queries however many labels there are. Needs
        :meth:`for_queue`; a paused queue has nothing ready. A FIFO queue may answer a label
        whose message is not yet its group's turn; the woken reader then finds nothing.
        """
        wanted = set(labels)
        now = _ClockTimestamp()
        ready = self.filter(
            models.Q(expires_at__isnull=True) | models.Q(expires_at__gt=now),
            vt__lte=now,
            queue__paused=False,
        ).order_by()
        found: set[str | None] = set()
        if None in wanted and ready.exists():
            found.add(None)
        named = [label for label in wanted if label is not None]
        if named:
            rows = ready.filter(label__in=named).order_by().values_list("label", flat=True)
            found.update(rows.distinct())
        return found

    def lease(self, qty: int = 1, vt: Any = None) -> list[Any]:
        """Lease up to ``qty`` visible messages this queryset selects, for ``vt`` seconds.

        Needs :meth:`for_queue`. Returns Message objects whose ``receipt`` acknowledges
        them with :func:`pgq_django.delete` (or archive, nack, set_vt), best priority first,
        then oldest. Raises QueueNotFound, QueuePaused, or InvalidArgument for a bad
        ``qty``/``vt`` or a sliced queryset. One UPDATE round trip (inside a transaction:
        the caller's, or one of its own).
        """
        if self._pgq_queue is None:
            raise InvalidArgument(
                "lease() needs a queue: start from Message.objects.for_queue(name).",
                field="queue",
            )
        if self.query.is_sliced:
            raise InvalidArgument("lease() takes qty=, not a sliced queryset.", field="qty")
        name = v.name(self._pgq_queue)
        qty = v.quantity(qty)
        vt = v.seconds(vt, "vt", allow_none=True)
        alias = self._db or settings.DATABASE  # type: ignore[attr-defined]
        # The queue model is the one Message's foreign key names: models import managers.
        queue_model: Any = self.model._meta.get_field("queue").related_model
        queue = (
            queue_model.objects.using(alias)
            .filter(name=name)
            .values("id", "paused", "fifo", "visibility_timeout")
            .first()
        )
        if queue is None:
            raise QueueNotFound.for_name(name)
        if queue["paused"]:
            raise QueuePaused.for_name(name)
        now = _ClockTimestamp()
        candidates = self.using(alias).filter(
            models.Q(expires_at__isnull=True) | models.Q(expires_at__gt=now),
            queue_id=queue["id"],
            vt__lte=now,
        )
        if queue["fifo"]:
            # Only the oldest message of each group may be leased: strict order per group.
            earlier = self.model._default_manager.filter(
                queue_id=models.OuterRef("queue_id"),
                group_id=models.OuterRef("group_id"),
                msg_id__lt=models.OuterRef("msg_id"),
            )
            candidates = candidates.filter(
                models.Q(group_id__isnull=True) | ~models.Exists(earlier)
            )
        selected = (
            candidates.order_by("priority", "msg_id")
            .select_for_update(skip_locked=True, of=("self",))
            .values("msg_id")[:qty]
        )
        seconds = queue["visibility_timeout"] if vt is None else vt
        # Compiling a FOR UPDATE query needs a transaction; it is the UPDATE's own.
        with transaction.atomic(using=alias, savepoint=False):
            sql, params = selected.query.get_compiler(using=alias).as_sql()
            rows = db.run_all(
                LEASE_SELECTED.format(candidates=sql),
                (*params, seconds),
                alias,
                prepare=False,
                named=False,
            )
        manager: Any = self.model._default_manager.db_manager(alias)
        messages = manager._instances(rows, queue_name=name)
        return sorted(messages, key=lambda m: (m.priority, m.msg_id))
