"""A ``django.tasks`` backend that stores tasks as pgq messages.

Django 6 has the tasks framework built in (``django.tasks``); on Django 5.2 the
``django-tasks`` backport provides the same API (the ``[tasks]`` extra:
``pip install -e "/path/to/pgq_django[tasks]"`` from a checkout)::

    TASKS = {
        "default": {
            "BACKEND": "pgq_django.tasks.PgqBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {"queue_prefix": "tasks_", "max_retries": 0},
        }
    }

A task's ``queue_name`` maps to the pgq queue ``<queue_prefix><queue_name>``, created on
first use with ``archive_on_ack`` so results outlive the message. Enqueueing is a
``pgq.send`` and joins the caller's transaction. ``manage.py pgq_worker`` runs the tasks:
the result id is the msg_id, and ``get_result`` reads the live message (READY, RUNNING) or
its archived copy (SUCCESSFUL with the return value, FAILED with the error). ``priority``
maps to pgq's (Django's higher-is-sooner becomes pgq's lower-is-sooner) and ``run_after``
to a delivery delay. Retries follow the queue's settings; ``max_retries`` defaults to 0
because django.tasks expects a failed task to stay failed.

A message never chooses the code that runs. Anyone with a write grant on a task queue can put
a message there, so the worker does not trust what a body names: ``enqueue`` signs the task's
path, arguments and backend with Django's signing (``SECRET_KEY``, salted), and the worker
runs a message only when the signature holds *and* the path resolves to a ``Task`` object
whose backend is a :class:`PgqBackend`. Anything else is rejected: archived as ``dead`` with
the reason, nothing imported or called (see docs/threat-model.md). ``get_result`` never
imports an unsigned path either; it reports such a message as FAILED.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from datetime import datetime
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone
from django.utils.module_loading import import_string

from .exceptions import QueueAlreadyExists, QueueNotFound, RejectMessage
from .handlers import Handler
from .task_signing import sign_call, verified_call

# Only Django's tasks framework imports this module (settings.TASKS names the backend), so
# it may require the framework; nothing else in pgq_django imports it.
try:  # Django >= 6.0
    from django.tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskError
    from django.tasks.exceptions import TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
except ImportError:  # Django 5.2 with the django-tasks backport (same API, other module)
    from django_tasks import (  # type: ignore[assignment]
        TaskContext,
        TaskResult,
        TaskResultStatus,
        task_backends,
    )
    from django_tasks.backends.base import BaseTaskBackend  # type: ignore[assignment]
    from django_tasks.base import Task, TaskError  # type: ignore[assignment]
    from django_tasks.exceptions import TaskResultDoesNotExist  # type: ignore[assignment]
    from django_tasks.signals import task_enqueued, task_finished, task_started

BACKEND_PATH = "pgq_django.tasks.PgqBackend"
WORKER_ID = f"{socket.gethostname()}:{os.getpid()}"

# pgq outcome/state -> django.tasks status.
_STATUS = {
    "pending": TaskResultStatus.READY,
    "leased": TaskResultStatus.RUNNING,
    "acked": TaskResultStatus.SUCCESSFUL,
}


# Tasks this process has seen built for a PgqBackend (every Task validates itself against its
# backend when created, so the @task decorator lands here at import): module path -> Task.
_KNOWN_TASKS: dict[str, Task] = {}


def _json_ready(value: Any) -> Any:
    # Django 6.1 keeps normalize_json in django.tasks.base, 6.0 in django.tasks.utils, and
    # the backport in django_tasks.utils.
    for module in ("django.tasks.base", "django.tasks.utils", "django_tasks.utils"):
        with contextlib.suppress(ImportError):
            normalize_json = import_string(f"{module}.normalize_json")
            return normalize_json(value)
    raise ImportError("no normalize_json in django.tasks or django_tasks")


class PgqBackend(BaseTaskBackend):
    """Tasks as messages in pgq queues; results from the archive (see the module docs)."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.queue_prefix = self.options.get("queue_prefix", "tasks_")
        self.queue_options = {
            "max_retries": self.options.get("max_retries", 0),
            "retry_delay": self.options.get("retry_delay", 10),
            "visibility_timeout": self.options.get("visibility_timeout", 300),
            "archive_on_ack": True,
        }

    def validate_task(self, task: Task) -> None:
        """Django's checks, then remember the task so workers and results need no import."""
        super().validate_task(task)
        if task.func is not unavailable_task:
            known = _KNOWN_TASKS.get(task.module_path)
            if known is None or known.func is not task.func:
                _KNOWN_TASKS[task.module_path] = task

    def pgq_queue(self, queue_name: str) -> str:
        """The pgq queue that holds tasks of ``queue_name``."""
        return f"{self.queue_prefix}{queue_name}"

    def worker_handlers(self) -> dict[str, Handler]:
        """The worker runs :func:`run_task` for each task queue, one message at a time."""
        names = [self.pgq_queue(q) for q in sorted(self.queues or {"default"})]
        return {name: Handler(name, run_task, batch=1) for name in names}

    def _send(self, name: str, body: dict[str, Any], **options: Any) -> int:
        from .api.messages import send
        from .api.queues import create_queue

        try:
            return send(name, body, **options)
        except QueueNotFound:
            with contextlib.suppress(QueueAlreadyExists):
                create_queue(name, **self.queue_options)
            return send(name, body, **options)

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        self.validate_task(task)
        now = timezone.now()
        delay = 0.0
        if task.run_after is not None:
            delay = max(0.0, (task.run_after - now).total_seconds())
        call = {
            "task": task.module_path,
            "args": _json_ready(list(args)),
            "kwargs": _json_ready(dict(kwargs)),
            "backend": self.alias,
        }
        body = {
            **call,
            "queue_name": task.queue_name,
            "priority": task.priority,
            "run_after": task.run_after.isoformat() if task.run_after else None,
            "signature": sign_call(call),
        }
        msg_id = self._send(
            self.pgq_queue(task.queue_name),
            body,
            priority=-task.priority,
            delay=delay,
            label=task.module_path,
        )
        result: TaskResult[Any, Any] = TaskResult(
            task=task,
            id=str(msg_id),
            status=TaskResultStatus.READY,
            enqueued_at=now,
            started_at=None,
            last_attempted_at=None,
            finished_at=None,
            args=list(args),
            kwargs=dict(kwargs),
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult:
        try:
            msg_id = int(result_id)
        except (TypeError, ValueError):
            raise TaskResultDoesNotExist(result_id) from None
        from .api.delivery import result

        found = result(msg_id) if msg_id > 0 else None
        body = found.message if found is not None else None
        if not isinstance(body, dict) or "task" not in body:
            raise TaskResultDoesNotExist(result_id)
        return _task_result(self, found, body)


def _task_result(backend: PgqBackend, found: Any, body: dict[str, Any]) -> TaskResult:
    task, problem = _result_task(body, backend)
    dead = found.headers.get("pgq_dead_letter")
    status = _STATUS.get(found.outcome, TaskResultStatus.FAILED)
    if dead or problem == _FORGED:
        status = TaskResultStatus.FAILED
    stored = found.result if isinstance(found.result, dict) else {}
    error = found.error or (dead or {}).get("last_error")
    if problem == _FORGED:
        error = f"{RejectMessage.__module__}.RejectMessage: {_FORGED_REASON}"
    errors = []
    if status == TaskResultStatus.FAILED:
        errors.append(
            TaskError(
                exception_class_path=_exception_path(error, found.outcome),
                traceback=error or problem or f"The task was {found.outcome}.",
            )
        )
    finished = found.finished_at if found.finished else None
    started = _parse_time(stored.get("started_at")) or finished
    args, kwargs = body.get("args"), body.get("kwargs")
    result: TaskResult[Any, Any] = TaskResult(
        task=task,
        id=str(found.msg_id),
        status=status,
        enqueued_at=found.enqueued_at,
        started_at=started,
        last_attempted_at=started,
        finished_at=finished,
        args=args if isinstance(args, list) else [],
        kwargs=kwargs if isinstance(kwargs, dict) else {},
        backend=backend.alias,
        errors=errors,
        worker_ids=[stored["worker_id"]] if stored.get("worker_id") else [],
    )
    if status == TaskResultStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", stored.get("return_value"))
    return result


# -- which code a message may run ------------------------------------------------------------

_FORGED = "forged"
_FORGED_REASON = (
    "This message is not a task enqueued by this project (no valid enqueue signature), so "
    "it was not run. Tasks are enqueued with Task.enqueue(); a message sent to a task queue "
    "any other way never runs."
)


def _resolve(path: str) -> Task:
    """The Task a *signed* path names: this process's known tasks, else an import.

    Raises RejectMessage when the path cannot be imported (a task defined in a shell or a
    module the worker does not have) or names something that is not a pgq task.
    """
    task = _KNOWN_TASKS.get(path)
    if task is None:
        try:
            target = import_string(path)
        except ImportError as exc:
            raise RejectMessage(
                f"Task {path!r} cannot be imported here ({exc}). Tasks must be defined in an "
                "importable module (not a shell or __main__) that the worker can import."
            ) from None
        task = _KNOWN_TASKS.get(path, target)
    if not isinstance(task, Task):
        raise RejectMessage(
            f"{path!r} is not a task: only functions decorated with @task run as tasks."
        )
    try:
        runs_here = isinstance(task.get_backend(), PgqBackend)
    except Exception:
        runs_here = False
    if not runs_here:
        raise RejectMessage(f"Task {path!r} belongs to task backend {task.backend!r}, not pgq.")
    return task


def _result_task(body: dict[str, Any], backend: PgqBackend) -> tuple[Task, str | None]:
    """The Task to report a result under, and why it is a stand-in if it is one.

    An unsigned body is never resolved (its path was chosen by whoever sent it): the result
    names :func:`unavailable_task` instead and is FAILED. A signed one is resolved like the
    worker does; if that fails here, the stand-in is used and the status left as it is.
    """
    call = verified_call(body)
    if call is None:
        return _stand_in(backend), _FORGED
    try:
        return _resolve(call["task"]), None
    except RejectMessage as exc:
        return _stand_in(backend), exc.message


def unavailable_task(*args: Any, **kwargs: Any) -> None:
    """Stands in for a task a result cannot (or must not) load; it never runs anything."""
    raise RejectMessage("unavailable_task stands in for a task that cannot be loaded.")


def _stand_in(backend: PgqBackend) -> Task:
    queues = sorted(backend.queues or {"default"})
    queue_name = "default" if "default" in queues else queues[0]
    return Task(
        func=unavailable_task,
        priority=0,
        backend=backend.alias,
        queue_name=queue_name,
        run_after=None,
    )


def _exception_path(error: str | None, outcome: str) -> str:
    """``module.Class`` of the exception from the last line of a stored traceback.

    Only a class already loaded in this process is named (TaskError imports the path when
    asked for ``exception_class``, and an error message can end in any text), so reading a
    result never imports a module; anything else reads as PgqError.
    """
    fallback = "pgq_django.exceptions.PgqError"
    if not error or not error.strip():
        return fallback
    last = error.strip().splitlines()[-1]
    name = last.split(":", 1)[0].strip()
    if not name or " " in name:
        return fallback
    path = name if "." in name else f"builtins.{name}"
    module_name, _, attr = path.rpartition(".")
    found = getattr(sys.modules.get(module_name), attr, None)
    if isinstance(found, type) and issubclass(found, BaseException):
        return path
    return fallback


def _parse_time(value: Any) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def run_task(message: Any) -> dict[str, Any]:
    """The worker's handler for task queues: run the task, return what get_result reads."""
    call = verified_call(message.message)
    if call is None:
        raise RejectMessage(_FORGED_REASON)
    try:
        backend = _backend(call["backend"])
    except (ImproperlyConfigured, TypeError) as exc:
        raise RejectMessage(f"Task backend {call['backend']!r} cannot run it here: {exc}") from None
    task = _resolve(call["task"])
    started = timezone.now()
    running: TaskResult[Any, Any] = TaskResult(
        task=task,
        id=str(message.msg_id),
        status=TaskResultStatus.RUNNING,
        enqueued_at=message.enqueued_at,
        started_at=started,
        last_attempted_at=started,
        finished_at=None,
        args=call["args"],
        kwargs=call["kwargs"],
        backend=backend.alias,
        errors=[],
        worker_ids=[WORKER_ID] * max(1, message.read_ct),
    )
    task_started.send(type(backend), task_result=running)
    args, kwargs = running.args, running.kwargs
    try:
        if task.takes_context:
            value = task.call(TaskContext(task_result=running), *args, **kwargs)
        else:
            value = task.call(*args, **kwargs)
    except Exception:
        object.__setattr__(running, "status", TaskResultStatus.FAILED)
        object.__setattr__(running, "finished_at", timezone.now())
        task_finished.send(type(backend), task_result=running)
        raise
    object.__setattr__(running, "status", TaskResultStatus.SUCCESSFUL)
    object.__setattr__(running, "finished_at", timezone.now())
    task_finished.send(type(backend), task_result=running)
    return {
        "return_value": _json_ready(value),
        "started_at": started.isoformat(),
        "worker_id": WORKER_ID,
    }


def _backend(alias: str | None) -> PgqBackend:
    backend = task_backends[alias or "default"]
    if not isinstance(backend, PgqBackend):
        raise TypeError(f"task backend {alias or 'default'!r} is not a PgqBackend")
    return backend
