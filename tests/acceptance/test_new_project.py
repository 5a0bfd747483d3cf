"""A new project works from the docs alone: the tutorial and the tasks page, run for real.

In a temporary directory the test does what a new user does with docs/tutorial.md: it runs
the page's console commands in order (``pip install``, ``django-admin startproject``,
``startapp``, ``makemigrations``, ``migrate``, ``pgq_worker``), writes the files its
``# path`` blocks show (appending where the block says "add at the end"), and pastes its
shell blocks into ``manage.py shell``; then ``manage.py check``, and the testing page's
tests. Then it does the same with docs/tasks.md: settings, ``shop/tasks.py``, and a
django.tasks task enqueued and run by the worker, whose result must be SUCCESSFUL (through
the django-tasks backport on Django 5.2, built in on 6.x). The blocks are read from the
pages on every run, so the docs and this test cannot drift apart: a command the test does
not know how to run fails it.

The install is the documented line, exactly, into an isolated virtualenv (``python -m
venv``: no system site packages, nothing of the test environment visible), so pip resolves
the dependencies a user gets: the tutorial's ``[embedded]`` alone, once with Python 3.11
(where pip picks Django 5.2 and no tasks framework comes with it) and once with Python 3.12+
(Django 6). The tasks page's install line (``[embedded,tasks]``) is run where the page says
it is needed. Each virtualenv is built once per module and pip's cache is reused. The
database is the test server's (``DATABASE_URL`` pointing at a fresh, empty database), so no
embedded server is started in the new project.
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.conftest import ROOT, direct_dsn

pytestmark = [pytest.mark.slow, pytest.mark.install]

_BLOCK = re.compile(r"^```(console|python)\n(.*?)^```", re.MULTILINE | re.DOTALL)
_FILE = re.compile(r"#\s*([\w/.]+\.py)\b(.*)")
_CHECKOUT = "/path/to/pgq_django"
TIMEOUT = 300


@dataclass(frozen=True)
class Install:
    """An isolated virtualenv holding the documented install of the checkout."""

    row: str
    python: Path
    django: tuple[int, ...]

    def pip_install(self, documented: str) -> None:
        """Run a documented ``pip install -e "/path/to/pgq_django[...]"`` line, verbatim but
        for the checkout's path."""
        words = shlex.split(documented)
        assert words[:3] == ["pip", "install", "-e"] and len(words) == 4, documented
        assert words[3].startswith(_CHECKOUT + "["), documented
        target = str(ROOT) + words[3][len(_CHECKOUT) :]
        done = subprocess.run(
            [self.python, "-m", "pip", "install", "-q", "-e", target],
            env=_isolated_environment(),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert done.returncode == 0, f"{documented}\n{done.stdout}\n{done.stderr}"


@dataclass
class Project:
    """The new project under construction: its directory, virtualenv and environment."""

    root: Path
    install: Install
    env: dict[str, str]
    cwd: Path

    @property
    def python(self) -> Path:
        return self.install.python

    def run(self, args: list[str | Path], *, stdin: str | None = None, status: int = 0) -> str:
        done = subprocess.run(
            [str(a) for a in args],
            cwd=self.cwd,
            env=self.env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert done.returncode == status, f"{args}\n{done.stdout}\n{done.stderr}"
        return done.stdout + done.stderr

    def shell(self, code: str) -> str:
        """Paste ``code`` into ``manage.py shell``, as a reader would."""
        return self.run([self.python, "manage.py", "shell"], stdin=code)


def _blocks(page: Path) -> list[tuple[str, str]]:
    return _BLOCK.findall(page.read_text())


def _documented_install(page: Path, extras: str) -> str:
    """The page's own ``pip install -e`` line for ``extras``, as a reader copies it."""
    line = f'pip install -e "{_CHECKOUT}[{extras}]"'
    assert line in page.read_text(), f"{page.name} no longer shows {line!r}"
    return line


def _command(project: Project, line: str) -> str:
    """Run one documented console line (the forms the docs use, and only those)."""
    words = shlex.split(line.split(" #")[0])
    if words[:3] == ["pip", "install", "-e"]:
        # The virtualenv fixture ran this very line before the project began.
        assert line == _documented_install(ROOT / "docs" / "tutorial.md", "embedded"), line
        return ""
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


def _interpreter(*versions: str) -> Path:
    """A Python of one of ``versions`` (this one, one on PATH, or one pyenv installed); the
    row is skipped, saying why, when none is."""
    for version in versions:
        if f"{sys.version_info.major}.{sys.version_info.minor}" == version:
            return Path(sys.executable)
        pyenv = sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python")))
        if pyenv:
            return Path(pyenv[-1])
        found = shutil.which(f"python{version}")
        if found:
            return Path(found)
    # Like a missing extra or browser: said, not failed, so `make test` passes on a machine
    # with Python 3.11 alone (README); CI's machine has them all, through pyenv.
    wanted = " or ".join(versions)
    pytest.skip(f"no Python {wanted} found (pyenv install {versions[0]}) for this row")


def _isolated_environment() -> dict[str, str]:
    """The environment without anything pointing at the test's own virtualenv."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DJANGO_SETTINGS_MODULE", "PYTHONPATH", "PGQ_USE_TEST_DB", "VIRTUAL_ENV")
    }
    env.pop("DIRECT_DATABASE_URL", None)
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(sys.prefix)
    )
    return env


# Python 3.11 cannot run Django 6, so pip resolves 5.2 there (the LTS); 3.12+ gets Django 6.
_ROWS = {"django52": ("3.11",), "django6": ("3.13", "3.12")}


@pytest.fixture(scope="module", params=sorted(_ROWS))
def install(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Install:
    """A fresh, isolated virtualenv with the tutorial's install line run in it."""
    venv = tmp_path_factory.mktemp(f"venv-{request.param}")
    base = _interpreter(*_ROWS[request.param])
    subprocess.run(
        [base, "-m", "venv", "--clear", venv],
        env=_isolated_environment(),
        check=True,
        timeout=TIMEOUT,
    )
    python = venv / "bin" / "python"
    probe = subprocess.run([python, "-c", "import django"], capture_output=True)
    assert probe.returncode != 0, "the new virtualenv sees packages it did not install"
    made = Install(request.param, python, ())
    made.pip_install(_documented_install(ROOT / "docs" / "tutorial.md", "embedded"))
    version = subprocess.run(
        [python, "-c", "import django; print(*django.VERSION[:2])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return Install(request.param, python, tuple(int(part) for part in version))


def _environment(database_url: str) -> dict[str, str]:
    env = _isolated_environment()
    # The tutorial's project has no pooler settings: it talks to the server itself.
    env["DATABASE_URL"] = direct_dsn(database_url)
    return env


def _count(database_url: str, sql: str, params: Any = ()) -> int:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(sql, params).fetchone()
    assert row is not None
    return int(row[0])


def _has_module(python: Path, name: str) -> bool:
    code = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({name!r}) is None)"
    return subprocess.run([python, "-c", code]).returncode == 0


def test_a_new_project_follows_the_tutorial_and_the_tasks_page(
    install: Install, tmp_path: Path, fresh_database: str
) -> None:
    expected = (5, 2) if install.row == "django52" else (6,)
    assert install.django[: len(expected)] == expected, install.django
    # The plain install brings no tasks framework on Django 5.2, and needs none.
    assert _has_module(install.python, "django_tasks") is False
    project = Project(tmp_path, install, _environment(fresh_database), tmp_path)

    _follow(project, ROOT / "docs" / "tutorial.md")

    assert project.cwd == tmp_path / "mysite"
    checked = project.run([install.python, "manage.py", "check"])
    assert "System check identified no issues" in checked, checked
    # pgq_django came from the new environment's install of the checkout.
    found = project.run([install.python, "-c", "import pgq_django; print(pgq_django.__file__)"])
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

    if install.django < (6,):
        # Configuring the backend before installing its framework is a clear check error,
        # not an ImportError from somewhere inside Django's start-up.
        tasks_settings = _blocks(ROOT / "docs" / "tasks.md")[0][1]
        assert "TASKS = " in tasks_settings, tasks_settings
        (project.cwd / "mysite" / "settings_tasks.py").write_text(
            "from .settings import *  # noqa\n" + tasks_settings
        )
        refused = project.run(
            [install.python, "manage.py", "check", "--settings", "mysite.settings_tasks"],
            status=1,
        )
        assert "pgq_django.E010" in refused and "[tasks] extra" in refused, refused
        # Django 5.2 takes the backport from the [tasks] extra, installed as the page says.
        install.pip_install(_documented_install(ROOT / "docs" / "tutorial.md", "embedded,tasks"))
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
