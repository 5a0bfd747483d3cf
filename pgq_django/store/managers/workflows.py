"""The methods of ``Dependency.objects``: one per statement of
:mod:`pgq_django.store.sql.workflows`.

The functional API (:mod:`pgq_django.api.workflows`) validates arguments, chooses the order
(await, resolve, lock, release, fail) and turns the answers into errors and results.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...conf import settings
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

    def resolve(self, ids: Sequence[int], *, limit: int) -> tuple[int, list[int]]:
        """Finish the open waits on the messages ``ids`` that left their queue; returns (how
        many finished, the dependants concerned)."""
        row = self._one(sql.RESOLVE, {"ids": list(ids), "limit": limit})
        return int(row.finished), list(row.dependants)

    def sweep(self, *, limit: int) -> tuple[int, list[int]]:
        """:meth:`resolve` for any open wait (the leader's duty)."""
        row = self._one(sql.SWEEP, {"limit": limit})
        return int(row.finished), list(row.dependants)

    def lock_dependants(self, ids: Sequence[int]) -> None:
        """Lock the held dependants before :meth:`release` reads their waits."""
        self._all(sql.LOCK_DEPENDANTS, {"ids": list(ids)})

    def release(self, ids: Sequence[int]) -> tuple[list[int], list[tuple[int, int, str]]]:
        """Release the dependants whose waits all succeeded; returns (released ids,
        [(failed dependant, failed dependency, its outcome)])."""
        row = self._one(sql.RELEASE, {"ids": list(ids), "channel": settings.NOTIFY_CHANNEL})
        failed = list(zip(row.failed, row.failed_by, row.failed_how, strict=True))
        return list(row.released), failed

    def fail_dependant(self, msg_id: int, error: str) -> str | None:
        """Dead-letter (or archive as dead) a held dependant; returns how, None if it was not
        held any more."""
        params = {"msg_id": msg_id, "error": error, "channel": settings.NOTIFY_CHANNEL}
        outcome: str | None = self._one(sql.FAIL_DEPENDANT, params).outcome
        return outcome

    def group_counts(self, group: int) -> Any:
        """A group's row with its pending, done and failed member counts, or None."""
        return self._one(sql.GROUP_COUNTS, {"group": group})

    def prune(self, *, keep: float) -> int:
        """Forget groups and waits that finished more than ``keep`` seconds ago."""
        return int(self._one(sql.PRUNE_WORKFLOWS, {"keep": keep}).pruned)
