"""Spark's statements run in the store's pipeline, :mod:`pgq_django.store.managers.pipeline`.

Read from the source (no database, no JVM): no module of ``pgq_django/spark`` executes a
statement itself, and none imports a statement, a parameter builder or the store's
pipeline inside a function, where it would hide what the module depends on. (The Django
side of :mod:`pgq_django.spark`, ``register`` and the jobs, imports Django's settings and
the API when called: executors import the package without them.)
"""

from __future__ import annotations

import ast

from pgq_django.store.sql import catalogue

SPARK = "spark/"
RUNNER = "store/managers/pipeline.py"
EXECUTING = {"execute", "executemany"}


def _spark_modules() -> list[tuple[str, ast.Module]]:
    sources = dict(catalogue.package_sources())
    assert RUNNER in sources
    found = [(r, t) for r, t in sources.items() if r.startswith(SPARK)]
    assert {r for r, _t in found} >= {"spark/sink.py", "spark/source.py"}
    return found


def test_only_the_runner_executes_statements() -> None:
    calls = [
        f"{relative}:{node.lineno}"
        for relative, tree in _spark_modules()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in EXECUTING
    ]
    assert calls == []


def _imports_inside_functions(tree: ast.Module) -> list[ast.ImportFrom]:
    found = []
    for function in ast.walk(tree):
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            found += [n for n in ast.walk(function) if isinstance(n, ast.ImportFrom)]
    return found


def test_statements_and_the_runner_are_imported_at_the_top_of_each_module() -> None:
    late = [
        f"{relative}:{node.lineno} from {'.' * node.level}{node.module or ''}"
        for relative, tree in _spark_modules()
        for node in _imports_inside_functions(tree)
        if node.level > 0
        and (
            (node.module or "").split(".")[0] in {"sql", "queries"}
            or (node.module or "").startswith(("store.sql", "store.managers"))
        )
    ]
    assert late == []
