"""The django.tasks backend: enqueue through pgq, run in the worker, results from the archive.

Runs on Django 6's built-in ``django.tasks`` or the ``django-tasks`` backport on 5.2.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

import pgq_django as pgq
from pgq_django.tasks import TaskResultDoesNotExist, TaskResultStatus
from pgq_django.worker.loop import Worker
from pgq_django.worker.registry import task_handlers

try:
    from django.tasks import exceptions as task_exceptions
    from django.tasks import task
except ImportError:
    from django_tasks import exceptions as task_exceptions
    from django_tasks import task

# Django 6 names it InvalidTask; the django-tasks backport InvalidTaskError.
InvalidTaskError = getattr(task_exceptions, "InvalidTask", None) or task_exceptions.InvalidTaskError

TASKS = {
    "default": {
        "BACKEND": "pgq_django.tasks.PgqBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"queue_prefix": "tasks_"},
    }
}

pytestmark = pytest.mark.usefixtures("tasks_backend")


@pytest.fixture
def tasks_backend(db):
    with override_settings(TASKS=TASKS):
        yield


@task
def add(a, b):
    return a + b


@task(priority=10)
def urgent(label):
    return label


@task
def explode(reason):
    raise ValueError(reason)


@task
def send_email(to):
    return {"sent": to}


@task(takes_context=True)
def with_context(context, n):
    return {"attempt": context.attempt, "n": n, "id": context.task_result.id}


@task
async def async_add(a, b):
    return a + b


def run_worker() -> int:
    """Run every task queue's handler in this thread until nothing is visible."""
    worker = Worker(handlers=task_handlers(), once=True)
    runs = 0
    while worker.work_once():
        runs += 1
    return runs


def test_enqueue_stores_the_task_as_a_message_and_reports_it_ready():
    result = add.enqueue(2, 3)
    assert result.status == TaskResultStatus.READY
    message = pgq.read_by_id("tasks_default", int(result.id))
    assert message.message["task"] == "tests.integration.test_tasks.add"
    assert message.message["args"] == [2, 3]
    fetched = add.get_result(result.id)
    assert fetched.status == TaskResultStatus.READY
    assert fetched.enqueued_at is not None and fetched.args == [2, 3]


def test_the_worker_runs_a_task_and_get_result_returns_its_value_and_timestamps():
    result = add.enqueue(2, 3)
    assert run_worker() == 1
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert len(result.worker_ids) == 1 and result.errors == []


def test_a_failing_task_is_failed_with_its_exception_and_traceback():
    result = explode.enqueue("kaboom")
    run_worker()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    (error,) = result.errors
    assert error.exception_class_path == "builtins.ValueError"
    assert error.exception_class is ValueError
    assert "kaboom" in error.traceback
    with pytest.raises(ValueError, match="failed"):
        _ = result.return_value


def test_run_after_defers_the_task_until_it_is_due():
    later = add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(1, 1)
    assert run_worker() == 0
    assert add.get_result(later.id).status == TaskResultStatus.READY
    message = pgq.read_by_id("tasks_default", int(later.id))
    assert message.vt > timezone.now() + timedelta(minutes=59)


def test_higher_priority_tasks_run_first():
    low = add.enqueue(0, 0)
    high = urgent.enqueue("first")
    (leased,) = pgq.read("tasks_default")
    assert leased.msg_id == int(high.id)
    pgq.release_leases("tasks_default", [leased])
    run_worker()
    assert add.get_result(low.id).is_finished and urgent.get_result(high.id).is_finished


def test_queue_name_maps_to_its_own_pgq_queue_and_unknown_queues_are_rejected():
    result = send_email.using(queue_name="emails").enqueue("a@example.com")
    assert pgq.read_by_id("tasks_emails", int(result.id)) is not None
    run_worker()
    assert send_email.get_result(result.id).return_value == {"sent": "a@example.com"}
    with pytest.raises(InvalidTaskError):
        add.using(queue_name="nope")


def test_tasks_that_take_context_see_their_attempt_and_id():
    result = with_context.enqueue(4)
    run_worker()
    value = with_context.get_result(result.id).return_value
    assert value == {"attempt": 1, "n": 4, "id": result.id}


def test_aenqueue_and_async_tasks():
    from asgiref.sync import async_to_sync

    result = async_to_sync(async_add.aenqueue)(20, 22)
    run_worker()
    async_to_sync(result.arefresh)()
    assert result.return_value == 42


def test_get_result_of_an_unknown_or_non_task_id_raises_does_not_exist(queue):
    plain = pgq.send(queue, {"not": "a task"})
    for bad in ("999999999", str(plain), "abc", "-1"):
        with pytest.raises(TaskResultDoesNotExist):
            add.get_backend().get_result(bad)


def test_enqueue_joins_the_callers_transaction():
    class Rollback(Exception):
        pass

    add.enqueue(0, 1)  # creates the queue outside the rolled-back block
    with pytest.raises(Rollback), transaction.atomic():
        add.enqueue(1, 1)
        raise Rollback
    assert pgq.metrics("tasks_default").queue_length == 1


def test_task_arguments_must_be_json():
    with pytest.raises((TypeError, pgq.InvalidMessage)):
        add.enqueue(object(), 1)
