"""``python -m bench.otel --quick`` runs end to end on the test database, prints its rows and
leaves no queue behind (never how fast anything was)."""

from __future__ import annotations

import re
from typing import Any

import pytest

import pgq_django as pgq
from tests.conftest import run_quick_bench

pytestmark = [pytest.mark.slow, pytest.mark.bench]


def test_quick_otel_benchmark_prints_its_rows_and_leaves_no_queue(transactional_db: Any) -> None:
    out = run_quick_bench("bench.otel")
    for case in ("send", "send_batch(100)", "process"):
        (row,) = [line for line in out.splitlines() if line.startswith(f"| {case} ")]
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert all(re.fullmatch(r"-?[\d,.]+", c) for c in cells[1:]), row
    assert "| hook check without an SDK" in out
    assert not [q for q in pgq.list_queues() if q.name == "bench_otel"]
