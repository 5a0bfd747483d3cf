"""The methods of ``Dependency.objects`` (one per statement of
:mod:`pgq_django.store.sql.workflows`, and the ORM reads of waits) and of
``WorkflowGroup.objects`` (a group's row).

The functional API (:mod:`pgq_django.api.workflows`) validates arguments and turns the
answers into errors and results; the order of resolving, releasing and failing lives in the
server function ``pgq_resolve_waits``, which the triggers on ``pgq_message`` call too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg.sql import Literal

from ...conf import settings
from .. import db
from ..sql import workflows as sql
from .base import SqlManager


class WorkflowManager(SqlManager):
    """Waits between messages and the counts of groups."""

    def await_messages(
        self, ids: Sequence[int], *, dependant: int | None, group: int | None
    ) -> list[int]:
        """Record the waits of ``dependant`` and/or ``group`` on ``ids`` and hold the
        dependant; returns the refused ids (then nothing was written)."""
        row = self._one(sql.AWAIT, {"ids": list(ids), "dependant": dependant, "group": group})
        return list(row.refused)

    def resolve_waits(self, ids: Sequence[int] | None, *, limit: int) -> Any:
        """Resolve the waits on ``ids`` (None: any open wait) and release or fail what
        waited for them, down a chain, in one call; returns (finished, released, failed,
        failed_by, failed_how)."""
        params = {
            "ids": None if ids is None else list(ids),
            "limit": limit,
            "channel": settings.NOTIFY_CHANNEL,
        }
        return self._one(sql.RESOLVE_WAITS, params)

    def install_functions(self, *, batch: int) -> None:
        """(Re)make ``pgq_resolve_waits`` and the awaited-message triggers' function, the
        latter with this process's notify channel: ``migrate`` runs this every time, so a
        changed channel or statement reaches the database with the next ``migrate``."""
        alias = self._db_alias()
        db.run_rowcount(sql.CREATE_RESOLVE_FUNCTION, None, alias, prepare=False)
        left = sql.CREATE_AWAITED_LEFT_FUNCTION.format(
            batch=Literal(batch), channel=Literal(settings.NOTIFY_CHANNEL)
        )
        db.run_rowcount(left, None, alias, prepare=False)

    def group_counts(self, group: int) -> Any:
        """A group's row with its pending, done and failed member counts, or None."""
        return self._one(sql.GROUP_COUNTS, {"group": group})

    def prune(self, *, keep: float) -> int:
        """Forget groups and waits that finished more than ``keep`` seconds ago."""
        return int(self._one(sql.PRUNE_WORKFLOWS, {"keep": keep}).pruned)

    def open_members(self, group: int) -> list[int]:
        """The members of ``group`` whose wait is still open (not known to have left)."""
        rows = self.using(self._db_alias()).filter(group_id=group, outcome__isnull=True)
        return list(rows.values_list("msg_id", flat=True))

    def waits_of(self, dependants: Sequence[int]) -> list[tuple[int, int, str | None]]:
        """(dependant, dependency, its outcome or None while pending) for each wait of
        ``dependants``, in dependant then dependency order."""
        rows = (
            self.using(self._db_alias())
            .filter(dependant_id__in=list(dependants))
            .order_by("dependant_id", "msg_id")
            .values_list("dependant_id", "msg_id", "outcome")
        )
        return list(rows)


class GroupManager(SqlManager):
    """``WorkflowGroup.objects``: a group's row, made empty and filled in once its members
    and follow-up are sent (all in the caller's transaction)."""

    def open(self, queue_name: str) -> Any:
        """A new, empty group of ``queue_name``'s messages."""
        return self.using(self._db_alias()).create(queue_name=queue_name, size=0)

    def fill(self, group: Any, *, size: int, then_msg_id: int | None, then_queue_name: str) -> None:
        """Record the members' count and the follow-up of a group made by :meth:`open`."""
        group.size = size
        group.then_msg_id = then_msg_id
        group.then_queue_name = then_queue_name
        group.save(using=self._db_alias(), update_fields=["size", "then_msg_id", "then_queue_name"])

    def queue_of(self, group: int) -> str | None:
        """The queue a group's members were sent to; None for an unknown group."""
        found = (
            self.using(self._db_alias())
            .filter(pk=group)
            .values_list("queue_name", flat=True)
            .first()
        )
        return None if found is None else str(found)
