"""Cron expressions and time zones of periodic schedules, free of models.

:func:`pgq_django.schedule`, the admin's schedule form, the REST API and the
``@pgq.periodic`` decorator (which runs when a handler module is imported) check a
schedule's expression, time zone and name by these same rules, and the leader's duty walks
the ticks with :func:`next_tick`. Six fields are read seconds first, as Spring, Quartz,
node-cron and Hangfire read them; croniter, which parses them, reads the sixth as seconds, so
:func:`croniter_form` moves it there.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, CroniterBadDateError, croniter

from .exceptions import InvalidArgument, InvalidName

SCHEDULE_NAME_RE = re.compile(r"[A-Za-z0-9_.:-]{1,200}")
UTC = ZoneInfo("UTC")

FIVE_FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")
# The names of the fields, in the order they are written, by how many there are.
FIELDS = {5: FIVE_FIELDS, 6: ("second", *FIVE_FIELDS)}
# What each field takes, for the error that names a wrong one.
FIELD_VALUES = {
    "second": "0-59",
    "minute": "0-59",
    "hour": "0-23",
    "day-of-month": "1-31 (or L for the last day)",
    "month": "1-12 or jan-dec",
    "day-of-week": "0-6 (0 is Sunday) or sun-sat",
}


def schedule_name(value: Any) -> str:
    """A schedule name: 1-200 letters, digits, '.', ':', '-' or '_'."""
    if not isinstance(value, str) or not SCHEDULE_NAME_RE.fullmatch(value):
        raise InvalidName(
            f"{value!r} is not a valid schedule name: use 1-200 letters, digits, '.', ':', "
            "'-' or '_'.",
            name=str(value),
        )
    return value


def check_timezone(value: Any) -> ZoneInfo:
    """The IANA time zone called ``value``; InvalidArgument for anything else."""
    if not isinstance(value, str) or not value or len(value) > 64:
        raise InvalidArgument(
            f"timezone must be an IANA time zone name such as 'UTC' or 'Europe/Paris', "
            f"not {value!r}.",
            field="timezone",
        )
    try:
        return ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidArgument(
            f"{value!r} is not a known IANA time zone (for example 'UTC' or 'Europe/Paris').",
            field="timezone",
        ) from None


def check_cron(value: Any) -> str:
    """A cron expression with five fields, or six with seconds first; the fields of a wrong
    one are checked one by one, so the error names the field to fix."""
    if not isinstance(value, str) or not value.strip() or len(value) > 120:
        raise InvalidArgument(
            f"cron must be a cron expression such as '*/5 * * * *', not {value!r}.",
            field="cron",
        )
    cron = " ".join(value.split())
    fields = cron.split(" ")
    if not cron.startswith("@") and len(fields) not in (5, 6):
        raise InvalidArgument(
            f"{value!r} has {len(fields)} fields: a cron expression has five (minute hour "
            "day-of-month month day-of-week) or six (seconds first, then the same five).",
            field="cron",
        )
    if not cron.startswith("@"):
        _check_each_field(value, fields)
    try:
        croniter(croniter_form(cron), datetime(2000, 1, 1, tzinfo=UTC)).get_next(datetime)
    except CroniterBadDateError:
        raise InvalidArgument(
            f"{value!r} never fires: no date matches its day-of-month, month and "
            "day-of-week fields together.",
            field="cron",
        ) from None
    except (CroniterBadCronError, ValueError, KeyError) as exc:
        raise InvalidArgument(
            f"{value!r} is not a valid cron expression: {exc}.", field="cron"
        ) from None
    return cron


def _check_each_field(value: str, fields: list[str]) -> None:
    """Try each field alone, the others left at '*', so an error names the wrong one."""
    names = FIELDS[len(fields)]
    for index, (name, text) in enumerate(zip(names, fields, strict=True)):
        probe = ["*"] * len(fields)
        probe[index] = text
        if not croniter.is_valid(croniter_form(" ".join(probe))):
            raise InvalidArgument(
                f"{name} field {text!r} of {value!r} is not valid: it takes "
                f"{FIELD_VALUES[name]}, '*', lists (1,15), ranges (1-5) and steps (*/10).",
                field="cron",
                cron_field=name,
            )


def croniter_form(cron: str) -> str:
    """``cron`` in croniter's field order: it reads a sixth field as seconds at the end,
    where Spring, Quartz, node-cron and Hangfire (and our users) put them first."""
    fields = cron.split(" ")
    if len(fields) == 6:
        return " ".join([*fields[1:], fields[0]])
    return cron


def shortest_interval(cron: str, *, ticks: int = 120) -> float:
    """The fewest seconds ``cron`` leaves between two ticks, over ``ticks`` consecutive ones
    from a fixed start (in UTC, so daylight saving changes play no part): enough to meet
    the shortest gap of any expression whose fields repeat within that many ticks."""
    found = croniter(croniter_form(cron), datetime(2000, 1, 1, tzinfo=UTC))
    previous = found.get_next(float)
    shortest = float("inf")
    for _ in range(ticks - 1):
        tick = found.get_next(float)
        shortest = min(shortest, tick - previous)
        previous = tick
    return shortest


def next_tick(cron: str, zone: ZoneInfo, after: datetime) -> datetime:
    """The first tick of ``cron`` in ``zone`` strictly after ``after`` (an aware time), in
    UTC."""
    found = croniter(croniter_form(cron), after.astimezone(zone)).get_next(datetime)
    assert isinstance(found, datetime)
    return found.astimezone(UTC)


def latest_tick(cron: str, zone: ZoneInfo, now: datetime) -> datetime:
    """The last tick of ``cron`` at or before ``now``, in UTC."""
    found = croniter(croniter_form(cron), now.astimezone(zone)).get_prev(datetime)
    assert isinstance(found, datetime)
    following = next_tick(cron, zone, found)
    return following if following <= now else found.astimezone(UTC)
