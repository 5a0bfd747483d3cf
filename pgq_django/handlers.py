"""Handlers registered with ``@pgq.handler``: which function handles which queue.

The registry belongs to the public API (``pgq.handler`` registers, the worker and
:func:`pgq_django.testing.drain` read it), so it sits beside the API rather than in the
worker that runs it; :mod:`pgq_django.worker.registry` adds the other sources of
handlers (queue callbacks, task queues) and the precedence between them.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.utils.module_loading import autodiscover_modules

from . import validation as v
from .cron import check_cron, check_timezone, schedule_name
from .exceptions import InvalidArgument

HANDLERS_MODULE = "pgq_handlers"


@dataclass(frozen=True)
class Handler:
    """A function bound to a queue, with the options the worker uses to run it.

    ``vt`` overrides the queue's visibility timeout for leases taken for this handler;
    ``batch`` is how many messages one fetch leases at a time; ``atomic`` (default True)
    runs the handler in the same transaction as its ack — turn it off only for handlers whose
    work must commit even when they fail later. ``timeout`` (seconds, default: the worker's
    ``--handler-timeout``, else none) bounds one attempt: past it the lease is no longer
    extended and the attempt is nacked as failed, so a hung handler cannot hold its message
    forever (the thread itself cannot be stopped; its late ack is fenced like any other).
    ``batch_commit`` (default False) runs each leased batch of an ``atomic`` handler in one
    transaction: every handler in a savepoint of its own, the successes acknowledged by one
    statement and committed together with their writes (see :mod:`.batch`).
    """

    queue: str
    func: Callable[..., Any]
    vt: float | None = None
    batch: int = 10
    atomic: bool = True
    options: dict[str, Any] = field(default_factory=dict)
    timeout: float | None = None
    batch_commit: bool = False

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.func)

    @property
    def name(self) -> str:
        return f"{self.func.__module__}.{self.func.__qualname__}"


_registry: dict[str, Handler] = {}


def handler(
    queue: str,
    *,
    vt: Any = None,
    batch: int = 10,
    atomic: bool = True,
    timeout: Any = None,
    batch_commit: bool = False,
    **options: Any,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function (sync or ``async def``) as the handler of ``queue``.

    The function receives the leased :class:`~pgq_django.Message`; what it returns is stored
    as the message's result when the queue archives acknowledged messages. Raising an
    exception nacks the message (retry with backoff, then dead letter). ``batch_commit=True``
    commits each leased batch (``batch`` messages) in one transaction instead of one per
    message; it needs ``atomic=True``.
    """
    name = v.name(queue)
    entry_vt = v.seconds(vt, "vt", allow_none=True)
    size = v.integer(batch, "batch", minimum=1, maximum=1000)
    limit = v.seconds(timeout, "timeout", allow_none=True, minimum=0.001)
    if not isinstance(batch_commit, bool):
        raise InvalidArgument("batch_commit must be True or False.", field="batch_commit")
    if batch_commit and not atomic:
        raise InvalidArgument(
            "batch_commit=True needs atomic=True: a batch commits its handlers' writes together "
            "with their acknowledgements.",
            field="batch_commit",
        )

    def register(func: Callable[..., Any]) -> Callable[..., Any]:
        if not callable(func):
            raise InvalidArgument(f"handler for {name!r} must be callable, not {func!r}.")
        _registry[name] = Handler(
            name, func, entry_vt, size, atomic, dict(options), limit, batch_commit
        )
        return func

    return register


@dataclass(frozen=True)
class Periodic:
    """A schedule declared with ``@pgq.periodic``: what :func:`pgq_django.schedule` gets
    when a worker serving ``queue`` starts."""

    name: str
    cron: str
    queue: str
    message: Any
    timezone: str
    catch_up: bool


_periodic: dict[str, Periodic] = {}


def periodic(
    cron: str,
    *,
    queue: str,
    name: str | None = None,
    message: Any = None,
    timezone: str = "UTC",
    catch_up: bool = False,
    **handler_options: Any,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function as the handler of ``queue`` and schedule it.

    A worker that serves ``queue`` creates the queue if it is missing and the schedule
    ``name`` (by default the function's dotted path) with :func:`pgq_django.schedule` when
    it starts, so ``message`` reaches the handler at each tick of ``cron`` (read in
    ``timezone``). ``handler_options`` are :func:`handler`'s. An invalid expression, time
    zone or name raises here, when the module is imported. Removing the decorator leaves the
    schedule in place: remove it with :func:`pgq_django.unschedule`.
    """
    cron = check_cron(cron)
    check_timezone(timezone)
    if name is not None:
        schedule_name(name)
    if not isinstance(catch_up, bool):
        raise InvalidArgument(
            f"catch_up must be True or False, not {catch_up!r}.", field="catch_up"
        )
    register_handler = handler(queue, **handler_options)

    def register(func: Callable[..., Any]) -> Callable[..., Any]:
        register_handler(func)
        found = name or re.sub(r"[^A-Za-z0-9_.:-]", "_", Handler(queue, func).name)[:200]
        _periodic[found] = Periodic(found, cron, v.name(queue), message, timezone, catch_up)
        return func

    return register


def periodic_schedules() -> dict[str, Periodic]:
    """Schedules declared with ``@pgq.periodic`` so far, by name."""
    return dict(_periodic)


def unregister(queue: str) -> None:
    _registry.pop(queue, None)
    for found in [p.name for p in _periodic.values() if p.queue == queue]:
        del _periodic[found]


def registered() -> dict[str, Handler]:
    """Handlers registered with the decorator so far (import handler modules first)."""
    return dict(_registry)


def autodiscover(extra_modules: list[str] | tuple[str, ...] = ()) -> None:
    """Import every installed app's ``pgq_handlers`` module and any extra modules."""
    autodiscover_modules(HANDLERS_MODULE)
    for module in extra_modules:
        importlib.import_module(module)
