"""The record of Spark exports: what retention asks before it drops archived rows.

These need no Spark: the record is plain Django, written by ``pgq_spark export``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import pgq_django as pgq

pytestmark = pytest.mark.django_db

DAY = timedelta(days=1)
T0 = datetime(2025, 1, 1, tzinfo=UTC)


def test_recorded_windows_cover_what_they_cover_and_no_more() -> None:
    assert not pgq.exports_cover(T0, T0 + DAY)
    pgq.record_export(since=T0, until=T0 + DAY, path="/x", rows=10)
    pgq.record_export(since=T0 + DAY, until=T0 + 2 * DAY, path="/x", rows=5)
    pgq.record_export(since=T0 + 3 * DAY, until=T0 + 4 * DAY, path="/x", rows=5)
    assert pgq.exports_cover(T0, T0 + 2 * DAY)  # two adjacent days
    assert pgq.exports_cover(T0 + timedelta(hours=5), T0 + DAY)
    assert not pgq.exports_cover(T0, T0 + 4 * DAY)  # day 3 is missing
    assert not pgq.exports_cover(T0 - DAY, T0 + DAY)  # before the first export
    assert not pgq.exports_cover(None, T0 + DAY)  # "from the start" needs an open export
    pgq.record_export(since=None, until=T0 + timedelta(hours=1), path="/y", rows=1)
    assert pgq.exports_cover(None, T0 + 2 * DAY)
    assert [e.rows for e in pgq.list_exports()] == [1, 5, 5, 10]


@pytest.mark.parametrize(
    "bad",
    [
        {"since": T0 + DAY, "until": T0},
        {"since": T0, "until": T0 + DAY, "rows": -1},
    ],
)
def test_a_bad_record_is_refused_and_changes_nothing(bad: dict[str, Any]) -> None:
    with pytest.raises(pgq.InvalidArgument):
        pgq.record_export(**{"path": "/x", "rows": 1, **bad})
    assert pgq.list_exports() == []
