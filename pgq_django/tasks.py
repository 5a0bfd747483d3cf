"""A ``django.tasks`` backend that stores tasks as pgq messages.

Django 6 has the tasks framework built in (``django.tasks``); on Django 5.2 the
``django-tasks`` backport provides the same API (``pip install pgq-django[tasks]``)::

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
"""

from __future__ import annotations

import contextlib
import os
import socket
from datetime import datetime
from typing import Any

from django.conf import settings as django_settings
from django.utils import timezone
from django.utils.module_loading import import_string

import pgq_django as pgq

try:  # Django >= 6.0
    from django.tasks import TaskContext, TaskResult, TaskResultStatus
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskError
    from django.tasks.exceptions import TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
except ImportError:  # Django 5.2 with the django-tasks backport (same API, other module)
    from django_tasks import (  # type: ignore[assignment]
        TaskContext,
        TaskResult,
        TaskResultStatus,
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

    def pgq_queue(self, queue_name: str) -> str:
        """The pgq queue that holds tasks of ``queue_name``."""
        return f"{self.queue_prefix}{queue_name}"

    def _send(self, name: str, body: dict[str, Any], **options: Any) -> int:
        try:
            return pgq.send(name, body, **options)
        except pgq.QueueNotFound:
            with contextlib.suppress(pgq.QueueAlreadyExists):
                pgq.create_queue(name, **self.queue_options)
            return pgq.send(name, body, **options)

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        self.validate_task(task)
        now = timezone.now()
        delay = 0.0
        if task.run_after is not None:
            delay = max(0.0, (task.run_after - now).total_seconds())
        body = {
            "task": task.module_path,
            "args": _json_ready(list(args)),
            "kwargs": _json_ready(dict(kwargs)),
            "backend": self.alias,
            "queue_name": task.queue_name,
            "priority": task.priority,
            "run_after": task.run_after.isoformat() if task.run_after else None,
        }
        msg_id = self._send(
            self.pgq_queue(task.queue_name),
            body,
            priority=-task.priority,
            delay=delay,
            headers={"pgq_task": task.module_path},
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
        found = pgq.result(msg_id) if msg_id > 0 else None
        body = found.message if found is not None else None
        if not isinstance(body, dict) or "task" not in body:
            raise TaskResultDoesNotExist(result_id)
        return _task_result(self, found, body)


def _task_result(backend: PgqBackend, found: Any, body: dict[str, Any]) -> TaskResult:
    task = _load_task(body, backend.alias)
    dead = found.headers.get("pgq_dead_letter")
    status = _STATUS.get(found.outcome, TaskResultStatus.FAILED)
    if dead:
        status = TaskResultStatus.FAILED
    stored = found.result if isinstance(found.result, dict) else {}
    error = found.error or (dead or {}).get("last_error")
    errors = []
    if status == TaskResultStatus.FAILED:
        errors.append(
            TaskError(
                exception_class_path=_exception_path(error, found.outcome),
                traceback=error or f"The task was {found.outcome}.",
            )
        )
    finished = found.finished_at if found.finished else None
    started = _parse_time(stored.get("started_at")) or finished
    result: TaskResult[Any, Any] = TaskResult(
        task=task,
        id=str(found.msg_id),
        status=status,
        enqueued_at=found.enqueued_at,
        started_at=started,
        last_attempted_at=started,
        finished_at=finished,
        args=body.get("args", []),
        kwargs=body.get("kwargs", {}),
        backend=backend.alias,
        errors=errors,
        worker_ids=[stored["worker_id"]] if stored.get("worker_id") else [],
    )
    if status == TaskResultStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", stored.get("return_value"))
    return result


def _load_task(body: dict[str, Any], alias: str) -> Task:
    target = import_string(body["task"])
    if isinstance(target, Task):
        return target
    # A plain function enqueued through Task(...) directly: rebuild an equivalent Task.
    return Task(
        func=target,
        priority=body.get("priority", 0),
        backend=alias,
        queue_name=body.get("queue_name", "default"),
        run_after=None,
    )


def _exception_path(error: str | None, outcome: str) -> str:
    """``module.Class`` of the exception from the last line of a stored traceback."""
    if not error:
        return "pgq_django.exceptions.PgqError"
    last = error.strip().splitlines()[-1]
    name = last.split(":", 1)[0].strip()
    if not name or " " in name:
        return "pgq_django.exceptions.PgqError"
    return name if "." in name else f"builtins.{name}"


def _parse_time(value: Any) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def run_task(message: Any) -> dict[str, Any]:
    """The worker's handler for task queues: run the task, return what get_result reads."""
    body = message.message
    backend = _backend(body.get("backend"))
    task = _load_task(body, backend.alias)
    started = timezone.now()
    running: TaskResult[Any, Any] = TaskResult(
        task=task,
        id=str(message.msg_id),
        status=TaskResultStatus.RUNNING,
        enqueued_at=message.enqueued_at,
        started_at=started,
        last_attempted_at=started,
        finished_at=None,
        args=body.get("args", []),
        kwargs=body.get("kwargs", {}),
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
    try:
        from django.tasks import task_backends
    except ImportError:
        from django_tasks import task_backends  # type: ignore[assignment]
    backend = task_backends[alias or "default"]
    if not isinstance(backend, PgqBackend):
        raise TypeError(f"task backend {alias or 'default'!r} is not a PgqBackend")
    return backend


def task_handlers() -> dict[str, Any]:
    """Worker handlers for every queue of every PgqBackend in ``settings.TASKS``."""
    from .worker.registry import Handler

    found: dict[str, Any] = {}
    for alias, params in (getattr(django_settings, "TASKS", None) or {}).items():
        if params.get("BACKEND") != BACKEND_PATH:
            continue
        backend = _backend(alias)
        for queue_name in sorted(backend.queues or {"default"}):
            name = backend.pgq_queue(queue_name)
            found[name] = Handler(name, run_task, batch=1)
    return found
