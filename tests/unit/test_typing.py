"""What a user's type checker sees of ``import pgq_django as pgq``.

The package resolves its names lazily (``__getattr__``), which a type checker cannot follow;
the stub ``pgq_django/__init__.pyi`` names them instead, and the lazy table is read from that
same stub. These tests run mypy on a small user module and check that the stub is the one
list.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pgq_django

ROOT = Path(__file__).resolve().parents[2]
INIT = Path(pgq_django.__file__)
STUB = INIT.with_name("__init__.pyi")

USER_CODE = """\
import pgq_django as pgq
from pgq_django import Duration, QueueRef


def enqueue(queue: QueueRef, delay: Duration) -> int:
    return pgq.send(queue, {"order": 7}, delay=delay)


async def enqueue_later(queue: QueueRef) -> int:
    return await pgq.asend(queue, {"order": 8})


reveal_type(pgq.send)
reveal_type(pgq.asend)
reveal_type(pgq.read)
pgq.send("orders", {"order": 9}, priority="high")
pgq.send("orders", {"order": 9}, colour="red")
"""


def _mypy(tmp_path: Path) -> dict[int, list[str]]:
    """mypy's notes and errors on USER_CODE, by line, with the project's configuration."""
    module = tmp_path / "user_code.py"
    module.write_text(USER_CODE)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(ROOT / ".mypy_cache"),
            "--no-error-summary",
            "--show-error-codes",
            str(module),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines: dict[int, list[str]] = {}
    # By file name: an unchanged module's messages come back from mypy's cache under the
    # path it had when they were cached.
    for number, message in re.findall(r"user_code\.py:(\d+): (.*)", done.stdout):
        lines.setdefault(int(number), []).append(message)
    assert lines, done.stdout + done.stderr
    return lines


def _line(text: str) -> int:
    """The line number of ``text`` in USER_CODE."""
    return USER_CODE.splitlines().index(text) + 1


def test_a_type_checker_sees_the_real_signatures_not_any(tmp_path):
    found = _mypy(tmp_path)
    send, asend, read = (
        found[_line(f"reveal_type(pgq.{name})")][0] for name in ("send", "asend", "read")
    )
    assert send.startswith('note: Revealed type is "def (queue: str | pgq_django.models')
    assert send.endswith('-> int"'), send
    assert "priority: int" in send and "delay: float | datetime.timedelta | None" in send
    assert asend.endswith('-> typing.Awaitable[int]"'), asend
    assert "priority: int" in asend
    assert read.endswith('-> list[pgq_django.models.messages.Message]"'), read
    # The user's own functions type-check: nothing is reported before the reveals.
    assert min(found) == _line("reveal_type(pgq.send)")
    bad_priority = found[_line('pgq.send("orders", {"order": 9}, priority="high")')]
    assert 'Argument "priority" to "send" has incompatible type "str"' in bad_priority[0]
    bad_option = found[_line('pgq.send("orders", {"order": 9}, colour="red")')]
    assert 'Unexpected keyword argument "colour"' in bad_option[0]


def _stub_imports() -> dict[str, str]:
    """Name -> module of each import in the package's stub, the one list of public names."""
    tree = ast.parse(STUB.read_text())
    names: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                # "name as name" is the explicit re-export --no-implicit-reexport asks for.
                assert alias.asname == alias.name, alias.name
                names[alias.name] = str(node.module)
    return names


def test_the_lazy_names_are_the_stubs_and_each_resolves_where_the_stub_says():
    stub = _stub_imports()
    assert stub == pgq_django._EXPORTS
    assert sorted(stub) == pgq_django.__all__
    for name, module in stub.items():
        assert getattr(pgq_django, name) is getattr(
            importlib.import_module(f"pgq_django.{module}"), name
        ), name


def test_the_package_names_no_public_name_outside_the_stub():
    """``__init__.py`` holds no list of its own: every public attribute it defines is the
    version or the lazy machinery, so a name added to the package is added to the stub."""
    tree = ast.parse(INIT.read_text())
    assigned = {
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign | ast.AnnAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name)
    }
    assert assigned == {"__version__", "_EXPORTS", "__all__"}
    assert not [n for n in tree.body if isinstance(n, ast.If)]  # no TYPE_CHECKING copy


def test_every_api_function_has_an_async_twin_that_wraps_it():
    functions = {
        name
        for name, module in pgq_django._EXPORTS.items()
        if module.startswith("api.") and inspect.isfunction(getattr(pgq_django, name))
    }
    sync = {
        name for name in functions if not inspect.iscoroutinefunction(getattr(pgq_django, name))
    }
    for name in sync:
        twin = getattr(pgq_django, "a" + name)
        assert inspect.iscoroutinefunction(twin), name
        if pgq_django._EXPORTS["a" + name] == "api.twins":
            assert twin.__wrapped__ is getattr(pgq_django, name)
            assert inspect.signature(twin) == inspect.signature(getattr(pgq_django, name))
