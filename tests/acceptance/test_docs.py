"""The documentation stays true: its code samples run, and the API reference covers the API.

Python blocks of README.md and docs/tutorial.md are executed in order, one namespace per
file, against the test database, exactly as a reader would paste them into
``manage.py shell``. A block whose first line is a ``# some/file.py`` comment shows a file's
contents (settings, a handler module) rather than shell input: it is compiled, and handler
modules are executed so their ``@pgq.handler`` registrations are checked (and undone after).
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import pgq_django as pgq
from tests.conftest import ROOT

_BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
_FILE_BLOCK = re.compile(r"#\s*[\w/.]+\.py\b")


def _python_blocks(path: Path) -> list[str]:
    return _BLOCK.findall(path.read_text())


def _is_file_block(block: str) -> bool:
    return bool(_FILE_BLOCK.match(block.lstrip().splitlines()[0]))


def _run_blocks(path: Path, namespace: dict[str, Any], *, handlers: bool = True) -> int:
    """Execute the shell blocks of ``path``; returns how many ran.

    ``handlers=False`` only compiles file blocks: the tutorial's belong to the project it
    builds (``shop.models``), which tests/acceptance/test_new_project.py creates for real.
    """
    ran = 0
    for number, block in enumerate(_python_blocks(path), 1):
        code = compile(block, f"{path.name}:block{number}", "exec")
        if _is_file_block(block):
            if handlers and "@pgq.handler" in block:
                exec(code, {**namespace, "__name__": "docs_handlers"})
            continue
        exec(code, namespace)
        ran += 1
    return ran


@pytest.fixture(autouse=True)
def _restore_handler_registry() -> Iterator[None]:
    """Handlers the samples register must not leak into later tests that run a worker."""
    from pgq_django.worker import registry

    before = registry.registered()
    yield
    for queue, entry in registry.registered().items():
        if queue not in before:
            registry.unregister(queue)
        elif entry is not before[queue]:
            old = before[queue]
            registry.handler(queue, vt=old.vt, batch=old.batch, atomic=old.atomic, **old.options)(
                old.func
            )


def _namespace() -> dict[str, Any]:
    from django.contrib.auth.models import User

    delivered: list[Any] = []
    return {
        "__name__": "__docs__",
        "User": User,
        "deliver": lambda *args: delivered.append(args),
        "delivered": delivered,
    }


@pytest.mark.django_db(transaction=True)
def test_readme_quickstart_runs_and_rolls_back_nothing_it_commits() -> None:
    namespace = _namespace()
    assert _run_blocks(ROOT / "README.md", namespace) == 1
    # The quickstart read the welcome message and deleted it by receipt.
    assert namespace["message"].message == {"to": "ada@example.com", "template": "welcome"}
    assert pgq.metrics("emails").queue_length == 0
    # Its handler module registered send_email for the queue, taking the leased Message.
    from pgq_django.worker.registry import registered

    entry = registered()["emails"]
    assert entry.func.__name__ == "send_email"
    entry.func(namespace["message"])
    assert namespace["delivered"][-1] == ({"to": "ada@example.com", "template": "welcome"},)


@pytest.mark.django_db(transaction=True)
def test_tutorial_samples_run_in_order() -> None:
    from django.contrib.auth.models import User

    namespace = _namespace()
    assert _run_blocks(ROOT / "docs" / "tutorial.md", namespace, handlers=False) >= 6
    # Transactional enqueue: the committed user exists, the rolled-back one does not.
    assert User.objects.filter(username="grace").exists()
    assert not User.objects.filter(username="mallory").exists()
    bodies = [m.message for m in pgq.read("emails", qty=100, vt=0)]
    assert {"to": "grace@example.com", "template": "welcome"} in bodies
    assert {"to": "mallory@example.com"} not in bodies


_EXPECTED = re.compile(r"#\s*(True|False|None)\b")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("page", ["filters.md", "receipts.md", "bodies.md"])
def test_howto_samples_run_and_answer_what_their_comments_say(page: str) -> None:
    """Each how-to's blocks run; an expression commented ``# True`` (False, None) must be so."""
    path = ROOT / "docs" / "howto" / page
    namespace = _namespace()
    checked = 0
    for number, block in enumerate(_python_blocks(path), 1):
        if _is_file_block(block):
            continue
        lines = block.splitlines()
        for statement in ast.parse(block).body:
            code = ast.Module(body=[statement], type_ignores=[])
            expected = _EXPECTED.search(lines[statement.end_lineno - 1])
            if isinstance(statement, ast.Expr) and expected:
                value = eval(compile(ast.Expression(statement.value), page, "eval"), namespace)
                assert value is {"True": True, "False": False, "None": None}[expected[1]], (
                    f"{page} block {number}: {lines[statement.lineno - 1]}"
                )
                checked += 1
            else:
                exec(compile(code, f"{page}:block{number}", "exec"), namespace)
    assert checked > 0 or page != "receipts.md"


# What a production process loads besides the settings: the app, its admin, the HTTP
# surfaces and the worker command.
_PRODUCTION_PROCESS = """
import sys

import django
from django.core.management import call_command

django.setup()
import pgq_django.asgi, pgq_django.rest.urls, pgq_django.sqs.urls  # noqa: E401
from pgq_django.management.commands import pgq_worker  # noqa: F401

call_command("check")
from django.conf import settings

print("HOST", settings.DATABASES["default"]["HOST"])
print("TESTING", sorted(name for name in sys.modules if name.startswith("pgq_django.testing")))
"""


def test_production_settings_of_the_database_url_page_import_nothing_from_testing(
    tmp_path: Path,
) -> None:
    """The page's production settings, in a process of their own, with the whole app loaded:
    ``pgq_django.testing`` (the embedded server, the test helpers) is never imported."""
    [block] = [
        block
        for block in _python_blocks(ROOT / "docs" / "howto" / "database-url.md")
        if block.startswith("# settings.py (production)")
    ]
    assert "pgq_django.testing" not in block
    subprocess.run(
        [sys.executable, "-m", "django", "startproject", "mysite", str(tmp_path)],
        check=True,
        timeout=60,
    )
    with (tmp_path / "mysite" / "settings.py").open("a") as settings_file:
        settings_file.write(f'\nINSTALLED_APPS += ["rest_framework", "pgq_django"]\n{block}')
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}",
        "DJANGO_SETTINGS_MODULE": "mysite.settings",
        # Never connected to: the settings only parse it, and nothing here queries.
        "DATABASE_URL": "postgresql://app:secret@db.invalid:5432/shop",
    }
    done = subprocess.run(
        [sys.executable, "-c", _PRODUCTION_PROCESS],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "HOST db.invalid" in done.stdout
    assert "TESTING []" in done.stdout, done.stdout


def _public_api_ids() -> list[str]:
    """Anchors mkdocstrings gives the public functions, classes and exceptions."""
    from pgq_django import _EXPORTS

    ids = [
        f"pgq_django.{module}.{name}"
        for name, module in _EXPORTS.items()
        # The async twins (api.twins) are described once, in the page's introduction.
        if (module.startswith("api.") and module != "api.twins") or module == "worker.registry"
    ]
    from pgq_django import exceptions

    ids += [f"pgq_django.exceptions.{name}" for name in exceptions.__all__]
    return ids


@pytest.mark.slow
def test_docs_build_strict_and_reference_every_public_function(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="the docs extra is installed by make venv")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    html = (tmp_path / "reference" / "api" / "index.html").read_text()
    html += (tmp_path / "reference" / "exceptions" / "index.html").read_text()
    missing = [anchor for anchor in _public_api_ids() if f'id="{anchor}"' not in html]
    assert missing == []
    # Sphinx roles of the docstrings are turned into plain code by docs/hooks.py.
    assert ":func:" not in html and ":class:" not in html
