"""The process role of a test module: a web process's by default, a worker's on request.

pgq_django runs the store's services (counter flush, wake-up throttle, LISTEN hub) only in
a process that hosts a worker or opts in (``pgq_django.services``). The test process is
otherwise a web process. A module that tests the services themselves sets
``RUNS_SERVICES = True`` and its tests then run as a worker's process does, without touching
``PGQ``, so a test's own settings override cannot undo it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pgq_django import services


@pytest.fixture(autouse=True)
def store_services(request: pytest.FixtureRequest) -> Iterator[None]:
    if not getattr(request.module, "RUNS_SERVICES", False):
        yield
        return
    role = object()  # as a worker: run_services(worker) ... release_services(worker)
    services.run_services(role)
    try:
        yield
    finally:
        services.release_services(role)
