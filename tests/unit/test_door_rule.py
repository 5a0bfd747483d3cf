"""Every door is a translator: REST, SQS, the PGMQ SQL interface's Python, Spark, the admin
and the tasks backend parse, call the API or the store, and map errors. None of them runs a
statement of its own: none imports the store's runner (``pgq_django.store.db``), the
statements it runs (``pgq_django.store.sql``) or a database driver, and none names one of
pgq_django's tables in its code.

A door that still breaks the rule is listed in :data:`KNOWN` with what remains to move; the
list only shrinks: an entry whose door keeps the rule now fails the test until it is removed.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pgq_django

PACKAGE = Path(pgq_django.__file__).parent

# The doors, as paths relative to the package: a directory (every module under it) or a file.
DOORS = ("rest", "sqs", "pgmq", "spark", "admin", "tasks.py")

# What a door may not import (the module or anything under it).
RUNNERS = ("pgq_django.store.db", "pgq_django.store.sql", "psycopg")

# Doors that still break the rule, each with what remains to move and where it goes.
KNOWN: dict[str, str] = {}


def door_modules() -> list[Path]:
    found: list[Path] = []
    for door in DOORS:
        path = PACKAGE / door
        found += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return found


def tables() -> set[str]:
    """pgq_django's tables: its models' and those its migrations make with SQL."""
    names = set()
    for path in (PACKAGE / "models").glob("*.py"):
        names |= set(re.findall(r'db_table = "(pgq_\w+)"', path.read_text(encoding="utf-8")))
    for path in (PACKAGE / "migrations").glob("*.py"):
        names |= set(
            re.findall(
                r"CREATE (?:UNLOGGED )?TABLE (?:IF NOT EXISTS )?(pgq_\w+)",
                path.read_text(encoding="utf-8"),
            )
        )
    return names


def _package_of(path: Path) -> list[str]:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return parts if path.name == "__init__.py" else parts[:-1]


def imported_modules(path: Path, tree: ast.Module) -> set[str]:
    """Every module ``tree`` imports, relative imports resolved, ``from m import n`` counted
    as both ``m`` and ``m.n`` (``n`` may be a submodule)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = _package_of(path)
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            found.add(module)
            found |= {f"{module}.{alias.name}" for alias in node.names}
    return found


def _docstrings(tree: ast.Module) -> set[int]:
    """The ids of the docstring nodes (words for readers, not code)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                found.add(id(body[0].value))
    return found


def violations(path: Path, names: set[str]) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = [
        f"imports {module}"
        for module in sorted(imported_modules(path, tree))
        if any(module == r or module.startswith(r + ".") for r in RUNNERS)
    ]
    docstrings = _docstrings(tree)
    word = re.compile(r"\bpgq_\w+\b")
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
        ):
            found += [
                f"names table {name} (line {node.lineno})"
                for name in word.findall(node.value)
                if name in names
            ]
    return found


def test_the_tables_are_known() -> None:
    """The rule's list of tables is what the package makes (a guard on the scan itself)."""
    names = tables()
    assert {"pgq_message", "pgq_archived_message", "pgq_queue", "pgq_queue_counter"} <= names
    assert {"pgq_queue_limit", "pgq_dedup", "pgq_dependency"} <= names


def test_the_scan_finds_a_runner_and_a_table() -> None:
    """The scan itself: a module that imports the runner and names a table is caught, a
    docstring naming a table is not."""
    sample = PACKAGE / "pgmq" / "install.py"
    tree = ast.parse(
        '"""Reads pgq_message."""\nfrom ..store import db\n'
        'from ..store.sql.messages import READ\nTABLE = "SELECT 1 FROM pgq_message m"\n'
    )
    assert {"pgq_django.store.db", "pgq_django.store.sql.messages"} <= imported_modules(
        sample, tree
    )
    names = tables()
    hits = [
        name
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        for name in re.findall(r"\bpgq_\w+\b", node.value)
        if name in names and id(node) not in _docstrings(tree)
    ]
    assert hits == ["pgq_message"]


def test_no_door_imports_the_runner_or_names_a_table() -> None:
    names = tables()
    offenders = {}
    for path in door_modules():
        relative = path.relative_to(PACKAGE).as_posix()
        found = violations(path, names)
        if found and relative not in KNOWN:
            offenders[relative] = found
    assert offenders == {}, f"doors running SQL of their own: {offenders}"


def test_the_known_exceptions_still_exist_and_each_says_why() -> None:
    """The allow-list shrinks: a door that keeps the rule now leaves it."""
    names = tables()
    for relative, reason in KNOWN.items():
        path = PACKAGE / relative
        assert path.exists(), f"{relative} is gone: remove it from KNOWN"
        assert violations(path, names), f"{relative} keeps the rule now: remove it from KNOWN"
        assert len(reason.split()) >= 8, f"{relative}: say what remains to move"
