"""The documentation stays true: its code samples run, and the API reference covers the API.

Python blocks of README.md and docs/tutorial.md are executed in order, one namespace per
file, against the test database, exactly as a reader would paste them into
``manage.py shell``. A block whose first line is a ``# some/file.py`` comment shows a file's
contents (settings, a handler module) rather than shell input: it is compiled, and handler
modules are executed so their ``@pgq.handler`` registrations are checked (and undone after).
"""

from __future__ import annotations

import ast
import itertools
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import pgq_django as pgq
from tests.conftest import ROOT

pytestmark = pytest.mark.docs

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
        timeout=400,  # a few seconds alone; minutes on a machine loaded by a parallel suite
    )
    assert done.returncode == 0, done.stdout + done.stderr
    html = (tmp_path / "reference" / "api" / "index.html").read_text()
    html += (tmp_path / "reference" / "exceptions" / "index.html").read_text()
    missing = [anchor for anchor in _public_api_ids() if f'id="{anchor}"' not in html]
    assert missing == []
    # Sphinx roles of the docstrings are turned into plain code by docs/hooks.py.
    assert ":func:" not in html and ":class:" not in html


_FENCE = re.compile(r"^\s*(?:```|~~~)")
# An inline code span; it cannot cross a blank line (a paragraph's end).
_INLINE = re.compile(r"(`+)((?:(?!\n\s*\n).)+?)\1", re.DOTALL)
_INSTALL = re.compile(r"\b(?:pip3?\s+install|uv\s+add|poetry\s+add)\s+(.*)")
_PACKAGE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_DOC_PAGES = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]


def _code_in_order(path: Path) -> list[tuple[str, str]]:
    """(code, the prose right after it) for each command a reader could copy, in page order:
    every line of a fenced block (a line ending in ``\\`` joined with the next) and every
    inline code span (its line breaks folded to spaces; the prose after it is kept so a
    sentence that quotes a command as what fails can be told from one that recommends it).
    """
    found: list[tuple[str, str]] = []
    prose: list[str] = []

    def flush() -> None:
        text = "\n".join(prose)
        found.extend((" ".join(m[2].split()), text[m.end() :]) for m in _INLINE.finditer(text))
        prose.clear()

    in_fence, pending = False, ""
    for line in path.read_text().splitlines():
        if _FENCE.match(line):
            if not in_fence:
                flush()
            in_fence = not in_fence
        elif not in_fence:
            prose.append(line)
        elif line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
        else:
            found.append((pending + line.strip(), ""))
            pending = ""
    flush()
    return found


def _installs_by_bare_name(path: Path) -> list[str]:
    """Install commands of ``path`` that name pgq-django as a package an index would serve.

    A checkout path (``-e /path/to/pgq_django[extra]``) or a direct reference
    (``"pgq-django[extra] @ git+<URL>"``) is what works while the package is unpublished.
    The troubleshooting entry that quotes the bare command as the one that "finds nothing"
    is the one place allowed to show it.
    """
    bare = []
    for code, after in _code_in_order(path):
        quoted_as_failing = path.name == "troubleshooting.md" and after.startswith(" finds nothing")
        for found in _INSTALL.finditer(code):
            arguments = found[1].split(" #")[0]  # a shell comment names no package
            try:
                words = shlex.split(arguments)
            except ValueError:  # an unbalanced quote in prose: judge the words as written
                words = arguments.split()
            for word in words:
                name = _PACKAGE_NAME.match(word)
                if (
                    word.startswith(("-", "/", ".", "~"))
                    or "/" in word.split("@")[0]
                    or re.search(r"@\s*git\+", word)
                    or name is None
                ):
                    continue
                named = re.sub(r"[-_.]+", "-", name[0].lower())
                if named == "pgq-django" and not quoted_as_failing:
                    bare.append(f"{path.relative_to(ROOT)}: {code}")
    return bare


def test_no_page_installs_the_unpublished_package_by_its_bare_name() -> None:
    """pgq-django is not on PyPI: a page telling readers to ``pip install pgq-django`` (with
    or without extras) sends them to a command that finds nothing, or to whatever someone
    else publishes under that name. Every install names a checkout or a git URL."""
    bare = [line for page in _DOC_PAGES for line in _installs_by_bare_name(page)]
    assert bare == []
    # The check sees the pages' install lines at all, and the quoted failing command.
    installs = [c for p in _DOC_PAGES for c, _a in _code_in_order(p) if _INSTALL.search(c)]
    assert any("/path/to/pgq_django[embedded]" in c for c in installs), installs
    troubleshooting = _code_in_order(ROOT / "docs" / "troubleshooting.md")
    assert ("pip install pgq-django", " finds nothing") in [
        (code, after[: len(" finds nothing")]) for code, after in troubleshooting
    ]


def _aws_sqs_without_region(path: Path) -> tuple[list[str], int]:
    """(the ``aws … sqs`` commands of ``path`` that name no region, how many it has).

    A command names one with ``--region``, with ``AWS_DEFAULT_REGION=… aws …``, or after an
    earlier command of the page set ``AWS_DEFAULT_REGION`` (``export AWS_DEFAULT_REGION=…``).
    """
    missing, examples, region_set = [], 0, False
    for code, _after in _code_in_order(path):
        for segment in re.split(r"&&|\|\||;|\|", code):
            words = segment.split()
            words = words[1:] if words[:1] == ["$"] else words
            words = words[1:] if words[:1] in (["export"], ["set"]) else words
            assigned = list(itertools.takewhile(lambda w: "=" in w and w[0] != "-", words))
            names_region = any(w.startswith("AWS_DEFAULT_REGION=") for w in assigned)
            command = words[len(assigned) :]
            if names_region and not command:
                region_set = True
            if command[:1] != ["aws"] or "sqs" not in command:
                continue
            examples += 1
            flagged = any(w == "--region" or w.startswith("--region=") for w in command)
            if not (flagged or names_region or region_set):
                missing.append(f"{path.relative_to(ROOT)}: {code}")
    return missing, examples


def test_every_aws_cli_example_names_a_region() -> None:
    """The AWS CLI signs every request for a region and refuses to run without one: an
    ``aws sqs`` example that names none fails for a reader with no AWS configuration."""
    results = [_aws_sqs_without_region(page) for page in _DOC_PAGES]
    assert [line for missing, _n in results for line in missing] == []
    assert sum(n for _m, n in results) >= 1  # docs/sqs.md's example is seen


def test_the_home_page_presents_every_surface_as_built_and_links_each() -> None:
    """docs/index.md is where a new user decides what the project can do: it must not call
    the HTTP API, the SQS endpoint or the Spark pipeline unbuilt, and its next-steps table
    must lead to the pages of the REST API, SQS, Spark and the admin."""
    text = (ROOT / "docs" / "index.md").read_text()
    sentences = re.split(r"(?<=[.!?])\s+", " ".join(text.split()))
    unbuilt = re.compile(r"\bnot\s+(?:yet\s+)?(?:built|available|implemented)\b|\bnot\s+yet\b")
    surfaces = re.compile(r"\b(?:HTTP|REST|SQS|Spark)\b")
    assert [s for s in sentences if surfaces.search(s) and unbuilt.search(s.lower())] == []
    section = text.split("## Where to go next", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    linked = {target for row in rows for target in re.findall(r"\]\(([^)#\s]+)", row)}
    assert {"rest.md", "sqs.md", "spark.md", "admin.md"} <= linked, sorted(linked)
