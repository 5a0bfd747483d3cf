"""The methods of ``Dependency.objects``: one per statement of
:mod:`pgq_django.store.sql.workflows`.

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
