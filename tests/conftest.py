"""Shared fixtures: a real PostgreSQL (see tests/settings.py), queues, and subprocess helpers."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.conf import settings
from psycopg import sql
from psycopg.conninfo import make_conninfo

ROOT = Path(__file__).resolve().parent.parent

# Fixtures of the REST tests: a live uvicorn server, users and HTTP sessions.
pytest_plugins = ["tests.http_server"]


@pytest.fixture(autouse=True)
def _close_listeners() -> Iterator[None]:
    """LISTEN connections are cached per thread; close them so test databases can be dropped."""
    yield
    from pgq_django import tallies
    from pgq_django.notify import close_all

    close_all()
    # Counts of this test's autocommit sends and acks go to this test's database, not to
    # whichever database is current when the process exits.
    tallies.flush()


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


class Child(subprocess.Popen[str]):
    """A child process whose output goes to files instead of pipes.

    A chatty child (a worker logging every message at -v 2) fills a 64 KiB pipe long before
    a test reads it and then blocks mid-handler, holding its leases: files never block.
    ``communicate`` waits and returns what the child wrote, as with pipes.
    """

    def __init__(self, args: list[str], *, workdir: Path, **kwargs: Any) -> None:
        self.out_path = workdir / f"child-{uuid.uuid4().hex[:8]}.out"
        self.err_path = self.out_path.with_suffix(".err")
        with self.out_path.open("w") as out, self.err_path.open("w") as err:
            super().__init__(args, stdout=out, stderr=err, text=True, **kwargs)

    def communicate(self, input: Any = None, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout=timeout)
        return self.out_path.read_text(), self.err_path.read_text()


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., Child]]:
    """Start ``python -c CODE`` (or ``-m``) children on the test database; killed at teardown."""
    children: list[Child] = []

    def start(*args: str, **extra: str) -> Child:
        proc = Child(
            [sys.executable, *args], workdir=tmp_path, cwd=ROOT, env=subprocess_env(**extra)
        )
        children.append(proc)
        return proc

    yield start
    for proc in children:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def _conninfo(dbname: str) -> str:
    db: dict[str, Any] = settings.DATABASES["default"]
    params = {
        "dbname": dbname,
        "user": db.get("USER") or None,
        "password": db.get("PASSWORD") or None,
        "host": db.get("HOST") or None,
        "port": str(db["PORT"]) if db.get("PORT") else None,
        **db.get("OPTIONS", {}),
    }
    return make_conninfo(**{k: v for k, v in params.items() if v is not None})


@pytest.fixture
def fresh_database() -> Iterator[str]:
    """A new, empty database on the test server; its conninfo. Dropped at teardown."""
    name = "pgq_fresh_" + uuid.uuid4().hex[:10]
    admin_db = settings.DATABASES["default"]["NAME"]
    with psycopg.connect(_conninfo(admin_db), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield _conninfo(name)
    finally:
        with psycopg.connect(_conninfo(admin_db), autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def wait_until(
    condition: Callable[[], object], *, timeout: float = 60.0, what: str = "condition"
) -> None:
    """Poll ``condition`` until it is true; the timeout only guards against a hang.

    Tests wait for an observable state this way instead of sleeping a guessed time, so a slow
    machine makes them slower, never flaky.
    """
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.02)


def time_passes(queue: Any, seconds: float) -> int:
    """Make ``seconds`` pass for the messages of ``queue``: every clock on their rows moves back.

    Visibility timeouts, delays and expiry are comparisons with ``now()``, so shifting a
    message's ``vt``, ``enqueued_at`` and ``expires_at`` into the past is the same, for the
    database, as waiting; tests stay exact and fast instead of sleeping past a deadline.
    Returns how many messages moved.
    """
    from django.db import connection

    name = queue if isinstance(queue, str) else queue.name
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE pgq_message SET vt = vt - make_interval(secs => %s),"
            " enqueued_at = enqueued_at - make_interval(secs => %s),"
            " expires_at = expires_at - make_interval(secs => %s)"
            " WHERE queue_id = (SELECT id FROM pgq_queue WHERE name = %s)",
            [seconds, seconds, seconds, name],
        )
        return int(cursor.rowcount)


def run_quick_bench(module: str, *args: str) -> str:
    """Run ``python -m <module> --quick [args]`` on the test database; its standard output.

    The benchmark smoke tests check that a benchmark runs end to end and prints numbers,
    never how fast anything was.
    """
    proc = subprocess.run(
        [sys.executable, "-m", module, "--quick", *args],
        cwd=ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout
