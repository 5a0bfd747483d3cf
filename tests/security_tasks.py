"""What a forged task message may name: a real task, a plain function, another backend's task.

Imported by tests/acceptance/test_security.py (under TEST_TASKS) and by the worker processes
it starts.
"""

from __future__ import annotations

from pathlib import Path

try:
    from django.tasks import task
except ImportError:
    from django_tasks import task


@task
def touch(path: str) -> str:
    """A legitimate task: the control that shows a worker does run what was enqueued."""
    Path(path).touch()
    return path


def plain_touch(path: str) -> None:
    """A real function that is not a task: a message naming it must not run it."""
    Path(path).touch()


@task(backend="other")
def other_backend_touch(path: str) -> None:
    """A task of another backend: not ours to run."""
    Path(path).touch()
