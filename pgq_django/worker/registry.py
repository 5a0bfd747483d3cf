"""Which function handles which queue.

Handlers come from three places, in order of precedence: ``@pgq.handler("queue")`` in an
installed app's ``pgq_handlers`` module (or a module given to ``pgq_worker --import``), the
queue's ``callback`` setting (a dotted path, pgpro's register_callback), and task queues of a
:class:`pgq_django.tasks.PgqBackend` configured in ``settings.TASKS``.
"""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from django.utils.module_loading import autodiscover_modules, import_string

from ..api import validation as v
from ..exceptions import InvalidArgument

logger = logging.getLogger("pgq_django.worker")

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


def batched(handlers: dict[str, Handler], size: int) -> dict[str, Handler]:
    """The handlers with batch commit turned on, ``size`` messages a batch (``--batch-size``).

    Handlers with ``atomic=False`` stay as they are: their work must commit on its own, so
    they keep one message per transaction (theirs) and their own ``batch``.
    """
    return {
        queue: replace(entry, batch=size, batch_commit=True) if entry.atomic else entry
        for queue, entry in handlers.items()
    }


def unregister(queue: str) -> None:
    _registry.pop(queue, None)


def registered() -> dict[str, Handler]:
    """Handlers registered with the decorator so far (import handler modules first)."""
    return dict(_registry)


def autodiscover(extra_modules: list[str] | tuple[str, ...] = ()) -> None:
    """Import every installed app's ``pgq_handlers`` module and any extra modules."""
    autodiscover_modules(HANDLERS_MODULE)
    for module in extra_modules:
        importlib.import_module(module)


def callback_handler(queue: str, path: str) -> Handler | None:
    """A Handler for a queue's dotted-path callback, or None if it cannot be imported.

    Whatever the import raises (an ImportError, or an error of the module's own import-time
    code) is logged and leaves the queue without a handler, so one broken callback module
    does not stop a worker that serves other queues too.
    """
    try:
        func = import_string(path)
    except Exception:
        logger.exception("queue=%s callback=%s event=callback_import_failed", queue, path)
        return None
    return Handler(queue, func)


def task_handlers(queues: list[str] | None = None) -> dict[str, Handler]:
    """Handlers running :func:`pgq_django.tasks.run_task` for the task queues of every
    PgqBackend in ``settings.TASKS`` (only those in ``queues`` when given)."""
    from django.conf import settings as django_settings

    backends = (getattr(django_settings, "TASKS", None) or {}).values()
    if not any(b.get("BACKEND") == "pgq_django.tasks.PgqBackend" for b in backends):
        return {}
    from ..tasks import run_task, task_queues

    return {
        name: Handler(name, run_task, batch=1)
        for name in task_queues()
        if queues is None or name in queues
    }


def callback_handlers(queues: list[str] | None = None) -> dict[str, Handler]:
    """Handlers for the queues' dotted-path callbacks (only those of ``queues`` when given).

    Each callback is imported here, so a worker serving some queues never imports, nor
    runs the import-time code of, another queue's callback.
    """
    from ..models import Queue

    found: dict[str, Handler] = {}
    rows = Queue.objects.exclude(callback="")
    if queues is not None:
        rows = rows.filter(name__in=queues)
    for name, path in rows.values_list("name", "callback"):
        entry = callback_handler(name, path)
        if entry is not None:
            found[name] = entry
    return found


def resolve(queues: list[str] | None = None) -> dict[str, Handler]:
    """The handler for each queue to serve: the named ones, or every queue that has one.

    Precedence: ``@pgq.handler`` over a queue's callback over a task queue. A named queue
    without any handler is an error, so a typo fails at start-up rather than leaving
    messages unprocessed.
    """
    found = {**task_handlers(queues), **callback_handlers(queues), **_registry}
    if queues is None:
        return found
    missing = [q for q in queues if q not in found]
    if missing:
        raise InvalidArgument(
            f"No handler for queue(s) {', '.join(missing)}: register one with "
            "@pgq.handler in an app's pgq_handlers module, or set the queue's callback."
        )
    return {q: found[q] for q in queues}
