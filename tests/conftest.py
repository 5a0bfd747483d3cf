"""Shared fixtures: a real PostgreSQL (see tests/settings.py), queues, and subprocess helpers."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _close_listeners() -> Iterator[None]:
    """LISTEN connections are cached per thread; close them so test databases can be dropped."""
    yield
    from pgq_django.notify import close_all

    close_all()


@pytest.fixture
def queue_name() -> str:
    return "q_" + uuid.uuid4().hex[:12]


@pytest.fixture
def queue(db: Any, queue_name: str) -> Any:
    import pgq_django as pgq

    return pgq.create_queue(queue_name)


@pytest.fixture
def make_queue(db: Any) -> Callable[..., Any]:
    import pgq_django as pgq

    def make(**options: Any) -> Any:
        return pgq.create_queue("q_" + uuid.uuid4().hex[:12], **options)

    return make


def subprocess_env(**extra: str) -> dict[str, str]:
    """Environment for a child Python process that uses this run's test database."""
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="tests.settings",
        PGQ_USE_TEST_DB="1",
        PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
        **extra,
    )
    return env


@pytest.fixture
def spawn() -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Start ``python -c CODE`` (or ``-m``) children on the test database; killed at teardown."""
    children: list[subprocess.Popen[str]] = []

    def start(*args: str, **extra: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, *args],
            cwd=ROOT,
            env=subprocess_env(**extra),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        children.append(proc)
        return proc

    yield start
    for proc in children:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
