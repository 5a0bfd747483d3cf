"""Cron expressions of schedules: six fields read seconds first, and an error naming the field.

Fire times are computed from a fixed start, so each test states exactly which instants a
schedule sends at. The docs' and the demo's expressions are read from their files as
written, so an example that drifts from what it says fails here.
"""

from __future__ import annotations

import ast
import itertools
import re
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from pgq_django.cron import UTC, check_cron, next_tick
from pgq_django.exceptions import InvalidArgument, PgqError

ROOT = Path(__file__).resolve().parents[2]
START = datetime(2030, 5, 6, 12, 0, 0, tzinfo=UTC)


def ticks(cron: str, count: int, start: datetime = START) -> list[datetime]:
    found, tick = [], start
    for _ in range(count):
        tick = next_tick(cron, UTC, tick)
        found.append(tick)
    return found


def seconds_apart(moments: list[datetime]) -> set[float]:
    return {(b - a).total_seconds() for a, b in itertools.pairwise(moments)}


def test_a_six_field_expression_reads_seconds_first():
    # "*/10 * * * * *": every ten seconds, all day, not every second of every tenth minute.
    assert ticks("*/10 * * * * *", 8) == [START + timedelta(seconds=10 * n) for n in range(1, 9)]
    # Second 5 of minute 30 of every hour.
    assert ticks("5 30 * * * *", 2) == [
        START.replace(minute=30, second=5),
        START.replace(hour=13, minute=30, second=5),
    ]
    # Second 0 of every minute of hour 9, weekdays only (2030-05-06 is a Monday).
    assert ticks("0 * 9 * * mon-fri", 2, START.replace(hour=8)) == [
        START.replace(hour=9, minute=0),
        START.replace(hour=9, minute=1),
    ]
    # The docs' other example: 09:00:30 on weekdays (the next one is Tuesday's).
    assert ticks("30 0 9 * * mon-fri", 1) == [START.replace(day=7, hour=9, second=30)]


def test_a_five_field_expression_is_unchanged():
    assert ticks("*/15 * * * *", 3) == [START + timedelta(minutes=15 * n) for n in (1, 2, 3)]
    assert ticks("0 3 * * *", 1) == [START.replace(day=7, hour=3, minute=0)]


def _docs_heartbeat() -> tuple[str, str]:
    text = (ROOT / "docs" / "workflows.md").read_text()
    found = re.search(r'pgq\.schedule\("heartbeat", "([^"]+)".*#\s*(.+)$', text, re.MULTILINE)
    assert found, "docs/workflows.md no longer shows the heartbeat schedule"
    return found.group(1), found.group(2)


def _demo_heartbeat() -> tuple[str, str]:
    path = ROOT / "example_project" / "demo_app" / "pgq_handlers.py"
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef) and node.name == "heartbeat":
            (decorator,) = node.decorator_list
            assert isinstance(decorator, ast.Call)
            cron = decorator.args[0]
            assert isinstance(cron, ast.Constant) and isinstance(cron.value, str)
            return cron.value, ast.get_docstring(node) or ""
    raise AssertionError("the demo no longer declares its heartbeat schedule")


def test_the_docs_heartbeat_fires_every_ten_seconds_as_its_comment_says():
    cron, comment = _docs_heartbeat()
    assert "every 10 seconds" in comment
    fired = ticks(check_cron(cron), 60)
    assert seconds_apart(fired) == {10.0}
    assert [t.second for t in fired[:6]] == [10, 20, 30, 40, 50, 0]


def test_the_demo_heartbeat_fires_every_thirty_seconds_as_its_docstring_says():
    cron, doc = _demo_heartbeat()
    assert "every 30 seconds" in doc
    fired = ticks(check_cron(cron), 60)
    assert seconds_apart(fired) == {30.0}
    assert fired[-1] - fired[0] == timedelta(seconds=30 * 59)


@pytest.mark.parametrize(
    ("cron", "field", "text"),
    [
        ("0 9 * * mon-fir", "day-of-week", "mon-fir"),
        ("61 * * * *", "minute", "61"),
        ("0 24 * * *", "hour", "24"),
        ("0 0 32 * *", "day-of-month", "32"),
        ("0 0 1 13 *", "month", "13"),
        ("0 0 1 smarch *", "month", "smarch"),
        ("*/0 * * * *", "minute", "*/0"),
        ("60 * * * * *", "second", "60"),
        ("0 61 * * * *", "minute", "61"),
        ("0 0 0 * * 8", "day-of-week", "8"),
    ],
)
def test_a_bad_field_is_named_in_the_error(cron, field, text):
    with pytest.raises(InvalidArgument) as caught:
        check_cron(cron)
    assert isinstance(caught.value, PgqError)
    message = caught.value.message
    assert message.startswith(f"{field} field {text!r} of {cron!r} is not valid")
    assert "is not acceptable" not in message  # croniter's words name no field
    assert caught.value.details == {"field": "cron", "cron_field": field}


def test_an_expression_that_never_fires_says_so():
    with pytest.raises(InvalidArgument, match="never fires"):
        check_cron("0 0 30 2 *")


def test_the_wrong_number_of_fields_says_how_six_are_read():
    with pytest.raises(InvalidArgument, match="seconds first"):
        check_cron("* * * * * * *")
