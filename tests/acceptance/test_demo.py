"""`make demo` works: the demo script, run for real, prepares a database and serves the admin.

The script runs as a subprocess with ``--check`` against a fresh database created on the test
server for this test only (and dropped afterwards), on a free port, so it never touches the
demo's own data directory or another run's database.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from tests.conftest import ROOT, direct_dsn

pytestmark = [pytest.mark.slow, pytest.mark.install]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _installed_extras(tmp_path: Path, target: str) -> list[set[str]]:
    """The extras each ``pip install -e '.[...]'`` of ``make -n target`` names, in order.

    Runs make for real, as a dry run, on a copy of the Makefile and pyproject.toml made in
    ``tmp_path`` on the first call: it prints the commands a fresh clone would run and runs
    none of them.
    """
    if not (tmp_path / "Makefile").exists():
        for name in ("Makefile", "pyproject.toml"):
            shutil.copy(ROOT / name, tmp_path / name)
    done = subprocess.run(
        ["make", "-n", target], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return [
        set(extras.split(","))
        for extras in re.findall(r"pip install.* -e '\.\[([^\]]*)\]'", done.stdout)
    ]


def test_make_demo_installs_only_what_the_demo_uses_and_make_test_everything(
    tmp_path: Path,
) -> None:
    assert _installed_extras(tmp_path, "demo") == [{"embedded", "asgi", "tasks"}]
    [everything] = _installed_extras(tmp_path, "test")
    assert {"dev", "docs", "tasks", "bench", "asgi", "spark"} <= everything
    # A full install counts as the demo's too, so `make demo` after `make test` installs nothing.
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    python = tmp_path / ".venv" / "bin" / "python"
    python.symlink_to(sys.executable)
    full = subprocess.run(
        ["make", "-n", "venv"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    stamps = re.search(r"^touch (.*)$", full.stdout, re.MULTILINE)
    assert stamps is not None, full.stdout
    for stamp in stamps[1].split():
        (tmp_path / stamp).touch()
    assert _installed_extras(tmp_path, "demo") == []


def test_demo_check_migrates_seeds_and_serves_the_admin_login(fresh_database: str) -> None:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PGQ_", "DJANGO_"))}
    # The demo's settings are a plain project's (prepared statements on): past any pooler.
    env.update(DATABASE_URL=direct_dsn(fresh_database), PORT=str(port))
    done = subprocess.run(
        [sys.executable, str(ROOT / "example_project" / "demo.py"), "--check"],
        cwd=ROOT,
        env=env,
        # One pipe for both streams keeps the order in which the demo and its worker wrote.
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=120,
    )
    output = done.stdout
    assert done.returncode == 0, output
    assert "check passed: the admin login page and its stylesheet are served" in output
    assert f"http://127.0.0.1:{port}/admin/   login: demo / demo" in output
    assert f"dashboard: http://127.0.0.1:{port}/admin/pgq_django/queue/dashboard/" in output
    assert f"sqs:     http://127.0.0.1:{port}/sqs/" in output
    assert "pgq_credentials create demo" in output
    # The addresses come last: after the worker's start-up lines, not buried under them,
    # and followed by what the worker's "card declined" failures are.
    lines = output.splitlines()

    def first(text: str) -> int:
        return next(i for i, line in enumerate(lines) if text in line)

    assert first("event=worker_started") < first("[demo] ready:") < first("login: demo / demo")
    assert first("login: demo / demo") < first('"card declined" failures are the dead-letter demo')
    assert first("dead-letter demo") < first("check passed")
    block = lines[first("[demo] ready:") : first("dead-letter demo") + 1]
    assert all(line.startswith("[demo] ") for line in block), block
    # demo.py itself fetched /admin/login/ over HTTP and required a 200 with a login form
    # before printing "check passed" (runserver's own access-log line may not be flushed
    # before the demo stops it, so it is not a reliable witness).

    with psycopg.connect(fresh_database) as conn:
        user = conn.execute(
            "SELECT is_superuser, is_staff FROM auth_user WHERE username = 'demo'"
        ).fetchone()
        assert user == (True, True)

        queues = dict(
            conn.execute(
                "SELECT q.name, d.name FROM pgq_queue q "
                "LEFT JOIN pgq_queue d ON d.id = q.dead_letter_queue_id"
            ).fetchall()
        )
        assert queues == {
            "orders": None,
            "emails": None,
            "events.fifo": None,
            "page-views": None,
            "payments": "payments-dlq",
            "payments-dlq": None,
            "reports": None,
            "pricing": None,
            "heartbeat": None,
            "tasks_default": None,
        }
        fifo = conn.execute("SELECT fifo FROM pgq_queue WHERE name = 'events.fifo'").fetchone()
        assert fifo == (True,)

        # page-views is non-durable: its messages (live, or archived once the worker ran)
        # carry ids of the second space, whose live ranges are UNLOGGED tables.
        views = conn.execute(
            "SELECT q.durable, count(m.msg_id), "
            "       bool_and(m.msg_id >= 4000000000000000) "
            "FROM pgq_queue q LEFT JOIN (SELECT queue_id, msg_id FROM pgq_message "
            "      UNION ALL SELECT queue_id, msg_id FROM pgq_archived_message) m "
            "  ON m.queue_id = q.id WHERE q.name = 'page-views' GROUP BY q.durable"
        ).fetchone()
        assert views is not None and views[0] is False, views
        assert views[2] is not False, views  # every id of its messages in the second space
        unlogged = conn.execute(
            "SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = 'pgq_message'::regclass AND c.relpersistence = 'u'"
        ).fetchone()
        assert unlogged is not None and unlogged[0] >= 1

        # The seed failed a payment past its retries, so the dead-letter queue holds it (a
        # worker, when there is one, may have dead-lettered more by now).
        dead = conn.execute(
            "SELECT bool_and(m.headers ? 'pgq_dead_letter'), count(*) FROM pgq_message m "
            "JOIN pgq_queue q ON q.id = m.queue_id WHERE q.name = 'payments-dlq'"
        ).fetchone()
        assert dead is not None and dead[0] is True and dead[1] >= 1

        # Transactional enqueue: every committed order has its message (live, or archived
        # once a worker handled it: the orders queue archives on ack), and the rolled-back
        # order left neither an order nor a message.
        orders = conn.execute(
            "SELECT o.customer, m.message->>'order_id' = o.id::text FROM demo_app_order o "
            "JOIN (SELECT msg_id, message FROM pgq_message "
            "      UNION ALL SELECT msg_id, message FROM pgq_archived_message) m "
            "  ON m.msg_id = o.msg_id ORDER BY o.id"
        ).fetchall()
        assert orders == [
            ("ada", True),
            ("grace", True),
            ("linus", True),
            ("barbara", True),
        ]
        orphans = conn.execute(
            "SELECT count(*) FROM (SELECT queue_id, msg_id FROM pgq_message "
            "      UNION ALL SELECT queue_id, msg_id FROM pgq_archived_message) m "
            "JOIN pgq_queue q ON q.id = m.queue_id "
            "WHERE q.name = 'orders' AND NOT EXISTS "
            "(SELECT 1 FROM demo_app_order o WHERE o.msg_id = m.msg_id)"
        ).fetchone()
        assert orphans == (0,)

        # The demo django.tasks task was stored in its queue (or already run and archived).
        tasks = conn.execute(
            "SELECT count(*) FROM (SELECT queue_id FROM pgq_message "
            "      UNION ALL SELECT queue_id FROM pgq_archived_message) m "
            "JOIN pgq_queue q ON q.id = m.queue_id WHERE q.name = 'tasks_default'"
        ).fetchone()
        assert tasks == (1,)
