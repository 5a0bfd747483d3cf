"""The periodic duties the leader runs: each small, named, with its own interval.

Defaults: ``rescue`` (dead-letter messages that exhausted their attempts by crashing or
hanging consumers), ``schedules`` (send the due ticks of periodic schedules, every second,
for at most ``PGQ["SCHEDULE_TURN_BUDGET"]`` seconds of the turn, so the duties after it keep
their pace),
``expire`` (archive messages past retention or expires_in), ``retention`` (prune old
archive rows and dedup claims), ``counters`` (fold counter rows per minute) and
``partitions`` (``pgq_django.store.partitions.run_maintenance()``: repair the default partitions,
premake, tune and drop ranges; it runs before ``retention``).
``workflows`` (resolve the waits of dependencies and groups, every second) and
``workflow_prune`` (forget finished ones past ``PGQ["WORKFLOW_RETENTION"]``).
Projects add their own with :func:`register_duty`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db import close_old_connections

from ..api import messages as api_messages
from ..api import schedules, upkeep, workflows
from ..conf import settings
from ..models import Message
from ..store import availability
from ..store.partitions import run_maintenance

logger = logging.getLogger("pgq_django.worker")


@dataclass
class Duty:
    name: str
    func: Callable[[], Any]
    interval: float
    last_run: float = field(default=float("-inf"))

    def due(self, now: float) -> bool:
        return now - self.last_run >= self.interval


def rescue_expired_leases() -> int:
    return upkeep.dead_letter_expired_leases()


def expire_messages() -> int:
    return api_messages.expire_messages()


def enforce_retention() -> dict[str, int]:
    return upkeep.prune()


def compact_counters() -> Any:

    return Message.objects.db_manager(settings.DATABASE).compact_counters()


def partition_upkeep() -> Any:
    """The store's partition upkeep (:func:`pgq_django.store.partitions.run_maintenance`)."""
    return run_maintenance()


_extra: list[tuple[str, Callable[[], Any], float | None]] = []


def register_duty(name: str, func: Callable[[], Any], interval: float | None = None) -> None:
    """Add a duty the leader runs every ``interval`` seconds (default: the maintenance interval)."""
    _extra.append((name, func, interval))


def default_duties(interval: float) -> list[Duty]:
    duties = [
        Duty("rescue", rescue_expired_leases, min(5.0, interval)),
        # Every second: a tick is sent within about a second of its time.
        Duty("schedules", schedules.enqueue_due, min(1.0, interval)),
        # Every second, a safety net: the ack itself releases dependants (the store's
        # triggers); this catches waits it could not settle, within about a second.
        Duty("workflows", workflows.resolve_waits, min(1.0, interval)),
        Duty("workflow_prune", workflows.prune, interval),
        Duty("expire", expire_messages, interval),
        # Partitions before retention: an archive range wholly past retention then goes in
        # one DROP instead of a DELETE of every row (see pgq_django.store.partitions).
        Duty("partitions", partition_upkeep, interval),
        Duty("retention", enforce_retention, interval),
        Duty("counters", compact_counters, interval),
    ]
    duties += [Duty(name, func, every or interval) for name, func, every in _extra]
    return duties


def _did_work(result: Any) -> bool:
    if isinstance(result, dict):
        return any(result.values())
    if isinstance(result, list | tuple):
        return any(result)
    return bool(result)


def run_due(duties: list[Duty], *, force: bool = False) -> dict[str, Any]:
    """Run each duty that is due; a failing duty is logged and does not stop the others."""
    now = time.monotonic()
    done: dict[str, Any] = {}
    for duty in duties:
        if not (force or duty.due(now)):
            continue
        duty.last_run = now
        try:
            done[duty.name] = result = duty.func()
            # A duty that found nothing to do is routine; only real work is worth INFO.
            level = logging.INFO if _did_work(result) else logging.DEBUG
            logger.log(level, "event=maintenance duty=%s result=%s", duty.name, result)
        except Exception as exc:
            close_old_connections()
            if availability.is_unreachable(exc):
                # The database went away: the process's outage record reports it, and the
                # other duties would only fail the same way. They run on the next turn.
                duty.last_run = float("-inf")
                logger.debug("event=maintenance_interrupted duty=%s", duty.name)
                break
            logger.exception("event=maintenance_failed duty=%s", duty.name)
    return done
