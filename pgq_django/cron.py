"""Cron expressions and time zones of periodic schedules, free of models.

:func:`pgq_django.schedule`, the admin's schedule form, the REST API and the
``@pgq.periodic`` decorator (which runs when a handler module is imported) check a
schedule's expression, time zone and name by these same rules, and the leader's duty walks
the ticks with :func:`next_tick`. Parsing is croniter's.
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
    """A cron expression croniter understands, with five fields or six (seconds last)."""
    if not isinstance(value, str) or not value.strip() or len(value) > 120:
        raise InvalidArgument(
            f"cron must be a cron expression such as '*/5 * * * *', not {value!r}.",
            field="cron",
        )
    cron = " ".join(value.split())
    fields = len(cron.split(" "))
    if not cron.startswith("@") and fields not in (5, 6):
        raise InvalidArgument(
            f"{value!r} has {fields} fields: a cron expression has five (minute hour day "
            "month weekday) or six (the same, then seconds).",
            field="cron",
        )
    try:
        croniter(cron, datetime(2000, 1, 1, tzinfo=UTC)).get_next(datetime)
    except (CroniterBadCronError, CroniterBadDateError, ValueError, KeyError) as exc:
        raise InvalidArgument(
            f"{value!r} is not a valid cron expression: {exc}.", field="cron"
        ) from None
    return cron


def next_tick(cron: str, zone: ZoneInfo, after: datetime) -> datetime:
    """The first tick of ``cron`` in ``zone`` strictly after ``after`` (an aware time), in
    UTC."""
    found = croniter(cron, after.astimezone(zone)).get_next(datetime)
    assert isinstance(found, datetime)
    return found.astimezone(UTC)


def latest_tick(cron: str, zone: ZoneInfo, now: datetime) -> datetime:
    """The last tick of ``cron`` at or before ``now``, in UTC."""
    found = croniter(cron, now.astimezone(zone)).get_prev(datetime)
    assert isinstance(found, datetime)
    following = next_tick(cron, zone, found)
    return following if following <= now else found.astimezone(UTC)
