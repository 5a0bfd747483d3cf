"""Mistakes of a new user's first hour end in a message that says what to do next.

Each test makes the mistake for real in a child process (a worker, ``manage.py shell``,
``manage.py check``) and reads what it prints: on a fresh database where ``migrate`` never
ran, or on the test database with a handler whose queue name has a typo.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import django
import pytest

import pgq_django as pgq
from tests.conftest import ROOT, direct_dsn, run_django, subprocess_env, wait_until


def _manage(
    *args: str, database_url: str | None = None, **extra: str
) -> subprocess.CompletedProcess[str]:
    """``python -m django ARGS`` with the test settings: on ``database_url``'s database when
    given (past any pooler), else on this run's test database."""
    direct = None if database_url is None else direct_dsn(database_url)
    return run_django(*args, database_url=direct, **extra)


def _tables(database_url: str) -> list[str]:
    import psycopg

    with psycopg.connect(database_url) as conn:
        rows = conn.execute("SELECT relname FROM pg_class WHERE relname LIKE 'pgq\\_%'").fetchall()
    return [r[0] for r in rows]


def test_a_worker_on_a_database_without_migrations_says_run_migrate_in_one_line(
    fresh_database: str,
) -> None:
    done = _manage(
        "pgq_worker", "--import", "tests.worker_handlers", "--once", database_url=fresh_database
    )
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert "pgq_django.0001_initial" in lines[0]
    assert "run `python manage.py migrate`" in lines[0]
    assert _tables(fresh_database) == []  # nothing was created behind the user's back


def test_the_api_on_a_database_without_migrations_raises_not_migrated(
    fresh_database: str,
) -> None:
    code = (
        "import pgq_django as pgq\n"
        "try:\n"
        "    pgq.send('emails', {'n': 1})\n"
        "except pgq.NotMigrated as exc:\n"
        "    print('caught', type(exc).__mro__[1].__name__, exc.code, exc)\n"
        "pgq.list_queues()\n"
    )
    done = _manage("shell", "-c", code, database_url=fresh_database)
    assert "caught PgqError not_migrated Database 'default' does not have pgq_django's" in (
        done.stdout
    ), done.stdout + done.stderr
    assert "run `python manage.py migrate`" in done.stdout
    # Uncaught, the last line of the traceback is the same sentence, not psycopg's.
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("pgq_django.exceptions.NotMigrated: Database 'default'"), last
    assert "run `python manage.py migrate`" in last
    assert _tables(fresh_database) == []


# Django 6 runs database-tagged checks only when ``check --database`` names one, and then as
# ``migrate`` does, which this check leaves alone: there the worker's start and the API say it.
check_runs_database_checks = pytest.mark.skipif(
    django.VERSION >= (6, 0),
    reason="Django 6's manage.py check runs no database checks unless --database is given",
)


@check_runs_database_checks
def test_check_warns_while_migrations_are_unapplied(fresh_database: str) -> None:
    done = _manage("check", database_url=fresh_database)
    assert done.returncode == 0, done.stderr  # a warning, not an error: check still passes
    output = done.stdout + done.stderr
    assert "(pgq_django.W001)" in output
    assert "pgq_django.0001_initial" in output and "run `python manage.py migrate`" in output


def test_check_says_nothing_of_the_database_when_it_cannot_reach_it() -> None:
    done = _manage("check", database_url="postgresql://nobody@127.0.0.1:1/none?connect_timeout=2")
    assert done.returncode == 0, done.stderr
    assert "System check identified no issues" in done.stdout


@pytest.fixture
def typo_project(tmp_path: Path) -> dict[str, str]:
    """A project whose app registers ``@pgq.handler`` for a misspelt queue name.

    Its settings are the test settings plus that app; its handlers module is also importable
    on its own for ``pgq_worker --import``.
    """
    tag = uuid.uuid4().hex[:8]
    queue, typo = f"invoices_{tag}", f"invoces_{tag}"
    app = tmp_path / f"typo_app_{tag}"
    app.mkdir()
    (app / "__init__.py").write_text("")
    (app / "pgq_handlers.py").write_text(
        f"import pgq_django as pgq\n\n\n@pgq.handler({typo!r})\ndef handle(message):\n    pass\n"
    )
    (tmp_path / f"typo_settings_{tag}.py").write_text(
        "from tests.settings import *  # noqa: F403\n\n"
        f"INSTALLED_APPS = [*INSTALLED_APPS, {app.name!r}]  # noqa: F405\n"
    )
    return {
        "queue": queue,
        "typo": typo,
        "handlers": f"{app.name}.pgq_handlers",
        "settings": f"typo_settings_{tag}",
        "pythonpath": f"{tmp_path}:{ROOT}",
        "directory": str(tmp_path),
    }


@pytest.mark.django_db(transaction=True)
@check_runs_database_checks
def test_check_warns_of_a_handler_whose_queue_does_not_exist(typo_project: dict[str, str]) -> None:
    pgq.create_queue(typo_project["queue"])
    done = _manage(
        "check",
        DJANGO_SETTINGS_MODULE=typo_project["settings"],
        PYTHONPATH=typo_project["pythonpath"],
    )
    assert done.returncode == 0, done.stderr
    output = done.stdout + done.stderr
    assert "(pgq_django.W002)" in output
    assert f"queue {typo_project['typo']!r}, which does not exist" in output
    assert f"Did you mean {typo_project['queue']!r}?" in output
    # Once the queue the handler names exists, the warning goes.
    pgq.create_queue(typo_project["typo"])
    done = _manage(
        "check",
        DJANGO_SETTINGS_MODULE=typo_project["settings"],
        PYTHONPATH=typo_project["pythonpath"],
    )
    assert "W002" not in done.stdout + done.stderr


@pytest.mark.django_db(transaction=True)
def test_a_worker_warns_at_start_of_a_handler_whose_queue_does_not_exist(
    spawn: Any, typo_project: dict[str, str]
) -> None:
    pgq.create_queue(typo_project["queue"])
    argv = ["manage.py", "pgq_worker", "--import", typo_project["handlers"], "-v", "1"]
    worker = spawn(
        "-c",
        f"import sys; sys.path.insert(0, {typo_project['directory']!r}); "
        "from django.core.management import execute_from_command_line; "
        f"execute_from_command_line({argv!r})",
    )
    wait_until(lambda: worker.logged("event=worker_started"), what="the worker to start")
    wait_until(
        lambda: worker.logged(f"event=handler_queue_missing queue={typo_project['typo']}"),
        what="the warning about the missing queue",
    )
    assert worker.logged(f"close_names={typo_project['queue']}")
    assert worker.logged(f"Did you mean {typo_project['queue']!r}?")
    worker.terminate()
    worker.wait(timeout=30)


# A project of its own: its settings start an embedded PostgreSQL in the project's folder,
# which stops when its last process (here the shell) exits.
OWN_SERVER_SETTINGS = """
from pathlib import Path
from pgq_django.testing import database_settings
BASE_DIR = Path(__file__).resolve().parent
SECRET_KEY = "tests-only-not-secret"
USE_TZ = True
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "pgq_django"]
DATABASES = {"default": database_settings(BASE_DIR / ".pgdata")}
"""

POLL_THEN_LEAVE = """
from django.core.management import call_command
call_command("migrate", verbosity=0)
import pgq_django as pgq
pgq.create_queue("emails")
print("polled", pgq.read_with_poll("emails", max_poll_seconds=0.2))
"""


@pytest.mark.slow
def test_leaving_the_shell_after_a_poll_closes_the_listening_connection_quietly(
    tmp_path: Path,
) -> None:
    (tmp_path / "own_server_settings.py").write_text(OWN_SERVER_SETTINGS)
    env = {k: v for k, v in subprocess_env().items() if not k.startswith(("PGQ_", "DATABASE_URL"))}
    env.update(DJANGO_SETTINGS_MODULE="own_server_settings", PYTHONPATH=f"{tmp_path}:{ROOT}")
    done = subprocess.run(
        [sys.executable, "-m", "django", "shell", "-c", POLL_THEN_LEAVE],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "polled []" in done.stdout  # the poll ran, so the process had a LISTEN connection
    assert "notify_connection_lost" not in done.stderr
    assert "notify_connect_failed" not in done.stderr
    assert "Traceback" not in done.stderr


def test_a_malformed_database_url_names_the_setting_and_not_the_password() -> None:
    """The settings read DATABASE_URL (``database_settings``); a typo in it stops the command
    with a message that names the setting, and the password appears nowhere in the output."""
    secret = "Hunter2xyz"
    env = {k: v for k, v in subprocess_env().items() if k != "PGQ_USE_TEST_DB"}
    env["DATABASE_URL"] = f"postgresql://app:{secret}%zz@db.internal/shop"
    done = subprocess.run(
        [sys.executable, "-m", "django", "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert "DATABASE_URL is not a valid PostgreSQL connection string" in output
    assert secret not in output and "%zz" not in output
