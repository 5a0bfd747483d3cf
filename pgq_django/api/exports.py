"""The record of what the Spark pipeline exported from the archive.

``pgq_spark export`` records each finished export here; archive retention (or an operator)
asks :func:`exports_cover` before dropping archived rows that exist nowhere else.
"""

from __future__ import annotations

from datetime import datetime

from ..conf import settings
from ..exceptions import InvalidArgument
from ..models import SparkExport


def record_export(
    *,
    since: datetime | None,
    until: datetime,
    path: str,
    rows: int,
    min_msg_id: int | None = None,
    max_msg_id: int | None = None,
) -> SparkExport:
    """Record a finished export of the archived_at window ``[since, until)`` to ``path``."""
    if since is not None and since >= until:
        raise InvalidArgument("since must be earlier than until.", field="since")
    if rows < 0:
        raise InvalidArgument("rows cannot be negative.", field="rows")
    return SparkExport.objects.using(settings.DATABASE).create(
        since=since,
        until=until,
        path=path,
        rows=rows,
        min_msg_id=min_msg_id,
        max_msg_id=max_msg_id,
    )


def list_exports() -> list[SparkExport]:
    """Every recorded export, newest first."""
    return list(SparkExport.objects.using(settings.DATABASE).all())


def exports_cover(since: datetime | None, until: datetime) -> bool:
    """Whether recorded exports together cover archived_at ``[since, until)``.

    ``since=None`` asks about everything archived before ``until`` (covered only by an
    export that started at the beginning of the archive).
    """
    windows = list(SparkExport.objects.using(settings.DATABASE).values_list("since", "until"))
    open_ended = [end for start, end in windows if start is None]
    if since is None and not open_ended:
        return False
    reached = max([*open_ended, *([since] if since is not None else [])])
    for start, end in sorted((s, e) for s, e in windows if s is not None):
        if start > reached:
            break
        reached = max(reached, end)
    return reached >= until
