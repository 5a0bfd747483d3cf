"""The embedded PostgreSQL of pgq_django.testing stops when its last process ends, however it ends.

Real processes attach to a real server in a throwaway data directory; the tests then end
them with SIGTERM (with and without a handler of their own) or SIGKILL and watch the
server's postmaster.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from pgq_django.testing import HANDLES_FILE, dsn_to_django
from tests.conftest import ROOT, wait_until

pytestmark = pytest.mark.slow

# Attach, prove the server answers, say so, then wait to be killed (or exit when told to).
CHILD = """
import signal, sys, time
if sys.argv[2] == "own-handler":
    signal.signal(signal.SIGTERM, lambda *args: sys.exit(3))
from pgq_django.testing import database_settings
import psycopg
db = database_settings(sys.argv[1])
keys = {"HOST": "host", "PORT": "port", "USER": "user", "NAME": "dbname"}
with psycopg.connect(**{v: db[k] for k, v in keys.items() if db.get(k)}) as c:
    c.execute("SELECT 1")
print("ready", flush=True)
if sys.argv[2] != "exit":
    time.sleep(600)
"""


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "pg"
    yield path
    pid = _postmaster(path)
    if pid is not None:  # a failed test must not leave a server behind
        psutil.Process(pid).kill()


@pytest.fixture
def attach(data_dir: Path) -> Iterator[Callable[[str], subprocess.Popen[str]]]:
    children: list[subprocess.Popen[str]] = []
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env["PYTHONPATH"] = str(ROOT)

    def start(mode: str) -> subprocess.Popen[str]:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(data_dir), mode],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        children.append(child)
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        return child

    yield start
    for child in children:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=30)


def _postmaster(data_dir: Path) -> int | None:
    """The running postmaster's pid, from postmaster.pid; None when no server runs."""
    try:
        pid = int((data_dir / "postmaster.pid").read_text().split()[0])
    except (FileNotFoundError, IndexError, ValueError):
        return None
    return pid if psutil.pid_exists(pid) else None


def _handles(data_dir: Path) -> list[int]:
    path = data_dir / HANDLES_FILE
    return json.loads(path.read_text()) if path.exists() else []


def test_sigterm_detaches_and_the_last_process_stops_the_server(data_dir, attach):
    first = attach("sleep")
    second = attach("own-handler")
    server = _postmaster(data_dir)
    assert server is not None
    assert sorted(_handles(data_dir)) == sorted([first.pid, second.pid])

    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=60) == -signal.SIGTERM  # still dies of the signal
    assert _handles(data_dir) == [second.pid]
    assert psutil.pid_exists(server)  # the other process still uses it

    # A process with a SIGTERM handler of its own exits through it, and so through atexit.
    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=60) == 3
    wait_until(lambda: not psutil.pid_exists(server), what="the server to stop")
    assert _handles(data_dir) == []


def test_a_killed_process_leaves_a_stale_pid_the_next_process_clears(data_dir, attach):
    killed = attach("sleep")
    server = _postmaster(data_dir)
    killed.kill()
    killed.wait(timeout=30)
    assert _handles(data_dir) == [killed.pid]  # SIGKILL runs no clean-up at all
    assert psutil.pid_exists(server)

    # The next process drops the dead pid, attaches to the running server, and being the
    # last handle when it exits, stops it.
    later = attach("exit")
    assert later.wait(timeout=60) == 0
    wait_until(lambda: not psutil.pid_exists(server), what="the server to stop")
    assert _handles(data_dir) == []


def test_database_url_wins_over_the_embedded_server(monkeypatch, tmp_path):
    from pgq_django.testing import database_settings

    monkeypatch.setenv(
        "DATABASE_URL", "postgresql://app:s3cret@db.example:6543/shop?sslmode=require"
    )
    assert database_settings(tmp_path / "never-created") == {
        **dsn_to_django("host=db.example port=6543 user=app password=s3cret dbname=shop"),
        "OPTIONS": {"sslmode": "require"},
    }
    assert not (tmp_path / "never-created").exists()


@pytest.mark.django_db
def test_drain_runs_handlers_inside_the_callers_uncommitted_transaction(queue):
    """The case TestCase users have: nothing is committed, yet the handlers run."""
    import pgq_django as pgq
    from pgq_django.testing import drain
    from pgq_django.worker import registry

    seen = []

    @pgq.handler(queue.name)
    def handle(message):
        if message.message == "bad":
            raise ValueError("bad message")
        seen.append(message.message)

    try:
        pgq.send_batch(queue, [1, "bad", 2])
        assert drain(queue.name) == (2, 1)
    finally:
        registry.unregister(queue.name)
    assert seen == [1, 2]
    assert pgq.metrics(queue).queue_length == 1  # the failed one waits for its retry
