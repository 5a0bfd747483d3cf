"""Which function handles which queue.

Handlers come from three places, in order of precedence: ``@pgq.handler("queue")`` in an
installed app's ``pgq_handlers`` module (or a module given to ``pgq_worker --import``), the
queue's ``callback`` setting (a dotted path, pgpro's register_callback), and task queues of a
:class:`pgq_django.tasks.PgqBackend` configured in ``settings.TASKS``. The decorator and its
registry are the API's (:mod:`pgq_django.handlers`); they are re-exported here.

The tasks backend is a door of its own, written against Django's tasks framework, which a
plain install on Django 5.2 does not have (the ``django-tasks`` backport comes with the
``[tasks]`` extra). So this module never imports it: where ``settings.TASKS`` names it, the
framework loads it, as it loads any backend, and the backend hands the worker its handlers.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import replace
from typing import Any, Protocol, cast

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
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

logger = logging.getLogger("pgq_django.worker")

TASKS_BACKEND = "pgq_django.tasks.PgqBackend"

# Where Django's tasks framework keeps its backends: built in since Django 6, the
# django-tasks backport on 5.2.
_TASK_FRAMEWORKS = ("django.tasks.task_backends", "django_tasks.task_backends")


class TaskBackendServed(Protocol):
    """What the worker needs of a tasks backend: the handlers of its task queues."""

    def worker_handlers(self) -> dict[str, Handler]: ...


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


def task_framework() -> Any | None:
    """Django's tasks framework's backends (``task_backends``), or None when neither Django
    6's ``django.tasks`` nor the django-tasks backport is installed."""
    for path in _TASK_FRAMEWORKS:
        with contextlib.suppress(ImportError):
            return import_string(path)
    return None


def configured_task_aliases() -> list[str]:
    """The aliases of ``settings.TASKS`` whose backend is pgq's, read without loading it."""
    configured = getattr(django_settings, "TASKS", None) or {}
    return [alias for alias, params in configured.items() if params.get("BACKEND") == TASKS_BACKEND]


def task_framework_missing_message() -> str:
    return (
        f"settings.TASKS names {TASKS_BACKEND}, but no tasks framework is installed: "
        "Django 6 has django.tasks built in; on Django 5.2 install the django-tasks backport "
        '(the [tasks] extra: pip install -e "/path/to/pgq_django[tasks]").'
    )


def task_handlers(queues: list[str] | None = None) -> dict[str, Handler]:
    """Handlers running each task queue of every PgqBackend in ``settings.TASKS`` (only
    those in ``queues`` when given); none, and no tasks import, where TASKS does not name it."""
    aliases = configured_task_aliases()
    if not aliases:
        return {}
    backends = task_framework()
    if backends is None:
        raise ImproperlyConfigured(task_framework_missing_message())
    found: dict[str, Handler] = {}
    for alias in aliases:
        found.update(cast(TaskBackendServed, backends[alias]).worker_handlers())
    return {name: entry for name, entry in found.items() if queues is None or name in queues}


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
