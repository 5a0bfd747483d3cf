"""Acceptance tests: real processes and real clients (workers, uvicorn with requests or boto3,
headless Chromium, a new project, the demo, the docs, benchmarks, Spark). Every item here is
marked ``acceptance``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import assign_layer
from tests.store_services import store_services  # noqa: F401  (autouse: RUNS_SERVICES)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    assign_layer(items, Path(__file__).parent, "acceptance")
