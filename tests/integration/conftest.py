"""Integration tests: the real PostgreSQL, used in this process (API, managers, SQL, admin views
and REST/SQS views through Django's test client). Every item here is marked ``integration``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import assign_layer
from tests.store_services import store_services  # noqa: F401  (autouse: RUNS_SERVICES)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    assign_layer(items, Path(__file__).parent, "integration")
