"""Unit tests: pure functions and checks, with no database, no network and no process of ours
(a static tool such as mypy may run). Every item here is marked ``unit``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import assign_layer


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    assign_layer(items, Path(__file__).parent, "unit")
