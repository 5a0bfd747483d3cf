"""pgq_django: durable queues in your Django project's own PostgreSQL.

``import pgq_django as pgq`` gives the functional API (``pgq.send``, ``pgq.read`` …) and
each function's async twin (``pgq.asend`` …).

The public names are listed once, in the stub beside this file (``__init__.pyi``): type
checkers read it for the real signatures, and :func:`__getattr__` reads the same imports to
resolve each name on first use. Resolving lazily keeps ``import pgq_django`` light and safe
before Django's app registry is ready: a name's module (models, the worker, and through them
the optional pieces: REST, SQS, Prometheus, cron, Spark) is imported only when the name is.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import Any

__version__ = "0.1.0"


def _read_exports() -> dict[str, str]:
    """Public name -> the module under pgq_django that defines it, from the stub's imports
    (``from .api.queues import create_queue as create_queue``)."""
    stub = ast.parse(Path(__file__).with_name("__init__.pyi").read_text(encoding="utf-8"))
    return {
        alias.asname or alias.name: str(node.module)
        for node in stub.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


_EXPORTS: dict[str, str] = _read_exports()
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
