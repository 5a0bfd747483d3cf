"""``Schedule.objects``: the rows of periodic schedules, and the leader's claim on a due one.

The functional API (:mod:`pgq_django.api.schedules`) holds the rules (cron, the cap per
queue, which ticks are due) and the transactions; every read and write of a schedule row
is a method here, so the API never builds a query of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from django.db import models

from .base import SqlManager

if TYPE_CHECKING:
    from ...models import Schedule


class ScheduleManager(SqlManager):
    """``Schedule.objects``: the ORM manager, plus the schedule operations."""

    def _rows(self) -> models.QuerySet[Schedule]:
        return cast("models.QuerySet[Schedule]", self.get_queryset().using(self._db_alias()))

    def take_turns_on_queue(self, queue: Any) -> None:
        """Make creations of schedules on ``queue`` take turns until the transaction ends,
        so two at once cannot both pass the cap. NO KEY UPDATE: sends, which only reference
        the queue row, are not held up."""
        # The model beside Schedule in the app's registry: models import managers, not the
        # other way round.
        queues = self.model._meta.apps.get_model("pgq_django", "Queue")._default_manager
        list(
            queues.using(self._db_alias())
            .select_for_update(no_key=True)
            .filter(pk=queue.pk)
            .values_list("pk", flat=True)
        )

    def count_on_queue(self, queue: Any, *, keep: Sequence[str] = ()) -> int:
        """How many schedules send to ``queue``, leaving out those named in ``keep``."""
        return int(self._rows().filter(queue=queue).exclude(name__in=list(keep)).count())

    def locked(self, name: str) -> Schedule | None:
        """The schedule ``name``, locked until the transaction ends; None if there is none."""
        return self._rows().select_for_update().filter(name=name).first()

    def put(self, found: Schedule) -> Schedule:
        """Write a schedule (new or changed) as it stands; returns it."""
        found.save(using=self._db_alias())
        return found

    def named(self, name: str) -> Schedule | None:
        """The schedule ``name`` with its queue, or None."""
        return self._rows().select_related("queue").filter(name=name).first()

    def in_name_order(self) -> list[Schedule]:
        """Every schedule with its queue, in name order."""
        return list(self._rows().select_related("queue").order_by("name"))

    def remove(self, name: str) -> bool:
        """Delete the schedule ``name``; whether there was one."""
        deleted, _ = self._rows().filter(name=name).delete()
        return deleted > 0

    def due(self, now: datetime) -> list[int]:
        """The ids of the schedules due at ``now``, the most overdue first."""
        return list(
            self._rows()
            .filter(next_tick__lte=now)
            .order_by("next_tick", "pk")
            .values_list("pk", flat=True)
        )

    def claim_due(self, pk: int, now: datetime) -> Schedule | None:
        """Schedule ``pk`` with its queue, locked until the transaction ends, if it is still
        due at ``now``; None when it is not, or when another leader holds it (skipped, not
        waited for: a leader in the middle of an election moves on)."""
        return (
            self._rows()
            .select_for_update(skip_locked=True, of=("self",))
            .select_related("queue")
            .filter(pk=pk, next_tick__lte=now)
            .first()
        )

    def advance(self, found: Schedule, *, last_tick: datetime | None, next_tick: datetime) -> None:
        """Move a claimed schedule past the ticks it sent, in the claim's transaction."""
        found.last_tick = last_tick
        found.next_tick = next_tick
        found.save(using=self._db_alias(), update_fields=["last_tick", "next_tick", "updated_at"])
