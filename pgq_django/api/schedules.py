"""Periodic schedules: a cron expression that puts a message on a queue at each tick.

:func:`schedule` creates or updates one by name, :func:`unschedule` removes it and
:func:`list_schedules` lists them. The worker leader calls :func:`enqueue_due` every second.
It locks each due schedule row, sends its due ticks and moves ``last_tick``/``next_tick``
forward in one transaction, so a tick is sent once however many workers run, and a crash
before the commit sends nothing (the next leader sends the tick instead). Each message
carries the tick in the reserved headers ``pgq_scheduled_at`` and ``pgq_schedule`` and a
deduplication id made of the schedule and the tick, so a tick that is somehow sent again
within the dedup window returns the first message instead of a second one.
"""

from __future__ import annotations

import contextlib
import logging
import time
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from django.db import IntegrityError, transaction
from django.utils import timezone as dj_timezone

from .. import validation as v
from ..conf import settings
from ..cron import (
    check_cron,
    check_timezone,
    latest_tick,
    next_tick,
    schedule_name,
    shortest_interval,
)
from ..exceptions import (
    InvalidArgument,
    QueueAlreadyExists,
    QueueNotFound,
    ScheduleNotFound,
    TooManySchedules,
)
from ..handlers import Periodic
from ..models import Queue, Schedule
from ..store.managers.schedules import ScheduleManager
from ..types import QueueRef
from .queues import create_queue, get_queue
from .recovery import recovers
from .sending import send_trusted

logger = logging.getLogger("pgq_django.worker")

# Ticks one schedule sends per run of enqueue_due: a catch-up after a long outage goes out
# in runs of this many, so one schedule cannot hold its row lock (and the leader) for long.
MAX_TICKS_PER_RUN = 100
# How late the leader may reach a tick before it counts as missed: ticks within this many
# seconds are all sent (a busy or newly elected leader is a little late, not down); when any
# due tick is later than this, a schedule without catch_up sends only the latest one.
MISFIRE_GRACE = 60.0


def _schedules() -> ScheduleManager:
    return Schedule.objects.db_manager(settings.DATABASE)


def check_message(message: Any, headers: Any) -> None:
    """A schedule's message and headers: what a send takes, without ``pgq_`` header keys."""
    v.unreserved_headers(headers)
    v.mapping(headers, "headers")
    v.body(message, headers)


def check_frequency(cron: str) -> None:
    """Refuse an expression that ticks more often than ``PGQ["SCHEDULE_MIN_INTERVAL"]``.

    Cron counts whole seconds, so at the default of one second every expression passes; a
    site that raises the floor (to 60, say, for minutes only) bounds what each schedule
    may cost the leader.
    """
    floor = float(settings.SCHEDULE_MIN_INTERVAL)
    if floor <= 1:
        return
    gap = shortest_interval(cron)
    if gap < floor:
        raise InvalidArgument(
            f"{cron!r} ticks {gap:g} seconds apart: a schedule here may tick at most once "
            f"every {floor:g} seconds (PGQ['SCHEDULE_MIN_INTERVAL']).",
            field="cron",
        )


def check_room(queue: Queue, keep: tuple[str, ...] = ()) -> None:
    """Refuse a new schedule on ``queue`` once it has ``PGQ["SCHEDULES_PER_QUEUE"]``; the
    schedules named in ``keep`` (the one being updated) do not count.

    The leader walks every due schedule each second, so a user who may manage one queue
    must not be able to give it without bound.
    """
    cap = int(settings.SCHEDULES_PER_QUEUE)
    held = _schedules().count_on_queue(queue, keep=keep)
    if held >= cap:
        raise TooManySchedules(
            f"Queue {queue.name!r} has {held} schedules, the most it may have "
            f"(PGQ['SCHEDULES_PER_QUEUE'] is {cap}): remove one with pgq.unschedule first.",
            queue=queue.name,
            limit=cap,
        )


@recovers()
def schedule(
    name: str,
    cron: str,
    queue: QueueRef,
    message: Any,
    *,
    timezone: str = "UTC",
    headers: dict[str, Any] | None = None,
    catch_up: bool = False,
) -> Schedule:
    """Create or update the schedule ``name``: send ``message`` to ``queue`` at each tick.

    ``cron`` has five fields (minute hour day-of-month month day-of-week) or six, seconds
    first (as Spring, Quartz, node-cron and Hangfire read them), read in ``timezone``. The
    worker leader sends each tick once; after downtime a schedule sends one message for the
    ticks it missed, or every missed tick with ``catch_up=True``.
    Updating a schedule keeps its last tick when the expression and time zone stay the same,
    and starts afresh from now when either changes. Header keys starting with ``pgq_`` are
    reserved (each message gets ``pgq_schedule`` and ``pgq_scheduled_at``). A queue holds
    at most ``PGQ["SCHEDULES_PER_QUEUE"]`` schedules (TooManySchedules beyond), each ticking
    at most once every ``PGQ["SCHEDULE_MIN_INTERVAL"]`` seconds.
    """
    name = schedule_name(name)
    cron = check_cron(cron)
    check_frequency(cron)
    zone = check_timezone(timezone)
    if not isinstance(catch_up, bool):
        raise InvalidArgument(
            f"catch_up must be True or False, not {catch_up!r}.", field="catch_up"
        )
    check_message(message, headers)
    target = get_queue(queue)
    for attempt in (1, 2):
        try:
            return _save_schedule(name, cron, zone, timezone, target, message, headers, catch_up)
        except IntegrityError:
            if attempt == 2:
                raise
            # Another caller created the name meanwhile: update theirs instead.
    raise AssertionError("unreachable")


def _save_schedule(
    name: str,
    cron: str,
    zone: ZoneInfo,
    timezone: str,
    target: Any,
    message: Any,
    headers: dict[str, Any] | None,
    catch_up: bool,
) -> Schedule:
    now = dj_timezone.now()
    rows = _schedules()
    with transaction.atomic(using=settings.DATABASE):
        # Creations on one queue take turns, so two at once cannot both pass the cap.
        rows.take_turns_on_queue(target)
        check_room(target, keep=(name,))
        found = rows.locked(name)
        if found is None:
            found = Schedule(name=name, last_tick=now)
        elif found.cron != cron or found.timezone != timezone:
            found.last_tick = now  # a new rhythm starts now, without a backlog of the old one
        found.cron = cron
        found.timezone = timezone
        found.queue = target
        found.message = message
        found.headers = dict(headers or {})
        found.catch_up = catch_up
        found.next_tick = next_tick(cron, zone, found.last_tick or now)
        rows.put(found)
    return found


@recovers()
def unschedule(name: str) -> bool:
    """Remove the schedule ``name``; False when there was none. Sent messages stay."""
    return _schedules().remove(schedule_name(name))


@recovers()
def get_schedule(name: str) -> Schedule:
    """The schedule called ``name``, with its queue; raises ScheduleNotFound."""
    found = _schedules().named(schedule_name(name))
    if found is None:
        raise ScheduleNotFound.for_name(name)
    return found


@recovers()
def list_schedules() -> list[Schedule]:
    """Every schedule, in name order, with its queue."""
    return _schedules().in_name_order()


def ensure_periodic(declared: list[Periodic]) -> list[Schedule]:
    """Create or update the schedules declared with ``@pgq.periodic`` (a worker's start),
    creating each one's queue when it is missing; returns the schedules."""
    saved = []
    for spec in declared:
        try:
            get_queue(spec.queue)
        except QueueNotFound:
            with contextlib.suppress(QueueAlreadyExists):  # another worker made it
                create_queue(spec.queue)
        saved.append(
            schedule(
                spec.name,
                spec.cron,
                spec.queue,
                spec.message,
                timezone=spec.timezone,
                catch_up=spec.catch_up,
            )
        )
    return saved


def due_ticks(found: Schedule, now: datetime) -> tuple[list[datetime], datetime]:
    """The ticks of ``found`` to send at ``now``, and the schedule's next tick after them.

    Every tick in (last_tick, now], at most MAX_TICKS_PER_RUN; without catch_up, when any of
    them is more than MISFIRE_GRACE seconds late, only the latest one (the missed ticks
    collapse into one message).
    """
    zone = ZoneInfo(found.timezone)
    ticks: list[datetime] = []
    tick = found.next_tick
    while tick <= now and len(ticks) < MAX_TICKS_PER_RUN:
        ticks.append(tick)
        tick = next_tick(found.cron, zone, tick)
    if not found.catch_up and ticks and now - ticks[0] > timedelta(seconds=MISFIRE_GRACE):
        latest = latest_tick(found.cron, zone, now)  # the older ones were missed
        return [latest], next_tick(found.cron, zone, latest)
    return ticks, tick


def _send_tick(found: Schedule, tick: datetime) -> int:
    stamp = tick.isoformat()
    headers = {**(found.headers or {}), "pgq_schedule": found.name, "pgq_scheduled_at": stamp}
    (msg_id,) = send_trusted(
        found.queue.name,
        [found.message],
        headers=headers,
        dedup_id=f"pgq_schedule:{found.pk}:{stamp}",
    )
    return msg_id


def enqueue_due(now: datetime | None = None, *, budget: float | None = None) -> int:
    """Send the due ticks of the due schedules; returns how many messages were sent.

    The leader's ``schedules`` duty. Each schedule is its own transaction: the row is locked
    (a second leader in the middle of an election skips it), its ticks are sent, and
    ``last_tick``/``next_tick`` move past them before the commit. A schedule whose send fails
    (a full queue) is logged and tried again on the next run; the others go on.

    The run stops once it has spent ``budget`` seconds (``PGQ["SCHEDULE_TURN_BUDGET"]``) and
    at least one schedule, so the leader's other duties run in the same turn however many
    schedules are due. The most overdue go first: a schedule left out of one run is ahead
    of those that ran when the next one starts, and it sends every tick it is due then (by
    the rule of :func:`due_ticks`), so stopping early loses no tick and sends none twice.
    """
    now = now or dj_timezone.now()
    budget = float(settings.SCHEDULE_TURN_BUDGET) if budget is None else budget
    started = time.monotonic()
    sent = 0
    due = _schedules().due(now)
    for done, pk in enumerate(due):
        if done and time.monotonic() - started >= budget:
            logger.info(
                "event=schedule_budget_spent schedules_run=%s schedules_left=%s",
                done,
                len(due) - done,
            )
            break
        sent += _enqueue_one(pk, now)
    return sent


def _enqueue_one(pk: int, now: datetime) -> int:
    """Send the due ticks of the schedule ``pk`` in one transaction; how many were sent."""
    rows = _schedules()
    try:
        with transaction.atomic(using=settings.DATABASE):
            found = rows.claim_due(pk, now)
            if found is None:
                return 0
            ticks, following = due_ticks(found, now)
            for tick in ticks:
                _send_tick(found, tick)
            last = ticks[-1] if ticks else found.last_tick
            rows.advance(found, last_tick=last, next_tick=following)
            return len(ticks)
    except Exception:
        logger.exception("event=schedule_failed schedule_id=%s", pk)
        return 0
