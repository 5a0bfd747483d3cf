"""The statement catalogue: every named statement as the complete text PostgreSQL receives,
under its name, with what it does and the code that runs it.

Statements are composed from shared fragments (:mod:`.fragments`) so a piece is written
once; the price is that a reader of ``messages.py`` sees f-strings, not SQL. This module
renders the finished texts into ``docs/reference/sql.md`` so they can be read (and reviewed
in a diff) without running Python::

    python -m pgq_django.store.sql.catalogue > docs/reference/sql.md
    python -m pgq_django.store.sql.catalogue --check docs/reference/sql.md   # exit 1 when stale

Who runs a statement is read from the package's source (``ast``), never imported, so the
catalogue needs neither Django nor a database.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import re
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

from psycopg.sql import Composable

from . import MODULES, Statement, statements

PACKAGE = Path(__file__).resolve().parents[2]
SQL_DIR = PACKAGE / "store" / "sql"


# -- who runs what ---------------------------------------------------------------------------


def package_sources() -> Iterator[tuple[str, ast.Module]]:
    """(path relative to the package, parsed module) for every module outside sql/."""
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith(("store/sql/", "migrations/")):
            continue
        yield relative, ast.parse(path.read_text(encoding="utf-8"))


def _sql_module(node: ast.ImportFrom) -> str | None:
    """ "messages" for ``from ..sql.messages import …``; "" for ``from ..sql import …``."""
    module = node.module or ""
    if node.level == 0:
        if not module.startswith("pgq_django.store.sql"):
            return None
        module = module.removeprefix("pgq_django.")
    # ``from .store.sql import …`` (outside the store) or ``from ..sql import …`` (inside it)
    module = module.removeprefix("store.")
    if module == "sql":
        return ""
    if module.startswith("sql."):
        return module.removeprefix("sql.")
    return None


class _References(ast.NodeVisitor):
    """Which function (by qualified name) mentions which statement, in one module."""

    def __init__(self, names: dict[str, set[str]]) -> None:
        self.names = names  # statement module -> statement names
        self.modules: dict[str, str] = {}  # local alias -> statement module
        self.direct: dict[str, tuple[str, str]] = {}  # local name -> (module, NAME)
        self.scope: list[str] = []
        self.found: dict[tuple[str, str], set[str]] = defaultdict(set)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = _sql_module(node)
        if module is None:
            return
        for alias in node.names:
            local = alias.asname or alias.name
            if module == "" and alias.name in self.names:
                self.modules[local] = alias.name
            elif alias.name in self.names.get(module, ()):
                self.direct[local] = (module, alias.name)

    def _scoped(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scoped

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if isinstance(node.value, ast.Name) and node.value.id in self.modules:
            module = self.modules[node.value.id]
            if node.attr in self.names[module]:
                self.found[(module, node.attr)].add(".".join(self.scope) or "<module>")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in self.direct and isinstance(node.ctx, ast.Load):
            self.found[self.direct[node.id]].add(".".join(self.scope) or "<module>")


def statement_users() -> dict[tuple[str, str], set[tuple[str, str]]]:
    """(statement module, NAME) -> {(file, function qualname)} that mention it."""
    names: dict[str, set[str]] = defaultdict(set)
    for module, name, _statement in statements():
        names[module].add(name)
    users: dict[tuple[str, str], set[tuple[str, str]]] = defaultdict(set)
    for relative, tree in package_sources():
        visitor = _References(names)
        visitor.visit(tree)
        for key, functions in visitor.found.items():
            users[key] |= {(relative, f) for f in functions}
    return users


# -- rendering -------------------------------------------------------------------------------


def description(module: str, name: str) -> str:
    """The ``# -- name -- …`` comment above a statement, as one paragraph ("" if none)."""
    source = (SQL_DIR / f"{module}.py").read_text(encoding="utf-8")
    pattern = re.escape(f"# -- {name.lower()} -- ") + r"(\S.*\n(?:#.*\n)*)" + re.escape(name)
    found = re.search(pattern + " = ", source)
    if found is None:
        return ""
    lines = [line.removeprefix("#").strip() for line in found.group(1).splitlines()]
    return " ".join(line for line in lines if line)


def text_of(statement: str | Composable) -> str:
    """The statement as PostgreSQL receives it; a template shows its ``{identifiers}``."""
    text = statement.as_string(None) if isinstance(statement, Composable) else statement
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


def _variants(statement: Statement) -> list[tuple[str, str]]:
    if isinstance(statement, dict):
        return [(f"`[{key}]`", text_of(statement[key])) for key in sorted(statement)]
    return [("", text_of(statement))]


def _module_summary(module: str) -> str:
    doc = importlib.import_module(f"{__package__}.{module}").__doc__ or ""
    return " ".join(doc.strip().split("\n\n")[0].split())


def render() -> str:
    """The whole catalogue page (Markdown)."""
    users = statement_users()
    by_module: dict[str, list[tuple[str, Statement]]] = defaultdict(list)
    for module, name, statement in statements():
        by_module[module].append((name, statement))
    out = [
        "# SQL statements",
        "",
        "Every statement pgq_django sends to PostgreSQL, as the complete text it sends, with",
        "what it does and the code that runs it. Values always travel as parameters",
        "(`%(name)s`); `{name}` in a template is an identifier (a partition, a table) filled",
        "in with `psycopg.sql.Identifier`. A statement shown with `[False]` and `[True]` has",
        "one text per queue shape (standard and FIFO, or their counterparts named in its",
        "description).",
        "",
        "This page is generated from `pgq_django/store/sql/` by",
        "`python -m pgq_django.store.sql.catalogue > docs/reference/sql.md`; a test fails when it",
        "is out of date.",
        "",
    ]
    for module in MODULES:
        out += [f"## `sql.{module}`", "", _module_summary(module), ""]
        for name, statement in by_module[module]:
            runners = sorted(users.get((module, name), set()))
            out += [f"### {name}", "", description(module, name), ""]
            if runners:
                run_by = ", ".join(f"`{path}`: `{function}`" for path, function in runners)
                out += [f"Run by {run_by}.", ""]
            for label, text in _variants(statement):
                if label:
                    out += [label, ""]
                out += ["```sql", text, "```", ""]
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", metavar="FILE", help="exit 1 if FILE differs from the render")
    args = parser.parse_args(argv)
    rendered = render()
    if args.check:
        if Path(args.check).read_text(encoding="utf-8") != rendered:
            print(
                f"{args.check} is stale: run python -m pgq_django.store.sql.catalogue",
                file=sys.stderr,
            )
            return 1
        return 0
    sys.stdout.write(rendered)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
