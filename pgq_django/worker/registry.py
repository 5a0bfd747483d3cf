"""Which function handles which queue.

Handlers come from three places, in order of precedence: ``@pgq.handler("queue")`` in an
installed app's ``pgq_handlers`` module (or a module given to ``pgq_worker --import``), the
queue's ``callback`` setting (a dotted path, pgpro's register_callback), and task queues of a
:class:`pgq_django.tasks.PgqBackend` configured in ``settings.TASKS``. The decorator and its
registry are the API's (:mod:`pgq_django.handlers`); they are re-exported here.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from django.utils.module_loading import import_string

from ..exceptions import InvalidArgument

# The decorator's registry, re-exported: worker code and projects import them from here too.
from ..handlers import HANDLERS_MODULE as HANDLERS_MODULE
from ..handlers import Handler as Handler
from ..handlers import autodiscover as autodiscover
from ..handlers import handler as handler
from ..handlers import periodic_schedules as periodic_schedules
from ..handlers import registered as registered
from ..handlers import unregister as unregister
from ..models import Queue
from ..tasks import run_task, task_queues

logger = logging.getLogger("pgq_django.worker")


def batched(handlers: dict[str, Handler], size: int) -> dict[str, Handler]:
    """The handlers with batch commit turned on, ``size`` messages a batch (``--batch-size``).

    Handlers with ``atomic=False`` stay as they are: their work must commit on its own, so
    they keep one message per transaction (theirs) and their own ``batch``.
    """
    return {
        queue: replace(entry, batch=size, batch_commit=True) if entry.atomic else entry
        for queue, entry in handlers.items()
    }


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
    found = {**task_handlers(queues), **callback_handlers(queues), **registered()}
    if queues is None:
        return found
    missing = [q for q in queues if q not in found]
    if missing:
        raise InvalidArgument(
            f"No handler for queue(s) {', '.join(missing)}: register one with "
            "@pgq.handler in an app's pgq_handlers module, or set the queue's callback."
        )
    return {q: found[q] for q in queues}
