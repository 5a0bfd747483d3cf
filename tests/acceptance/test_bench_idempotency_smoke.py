"""``python -m bench.idempotency --quick`` runs end to end on the test database, prints the
ratio of a keyed send to a plain one and leaves no queue behind (never how fast anything
was)."""

from __future__ import annotations

import re
from typing import Any

import pytest

import pgq_django as pgq
from tests.conftest import run_quick_bench

pytestmark = [pytest.mark.slow, pytest.mark.bench]


def test_quick_idempotency_benchmark_prints_its_ratio_and_leaves_no_queue(
    transactional_db: Any,
) -> None:
    out = run_quick_bench("bench.idempotency")
    rows = [line for line in out.splitlines() if line.startswith("| send")]
    assert len(rows) == 2, out
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert all(re.fullmatch(r"[\d,.]+", c) for c in cells[1:]), row
    assert not [q for q in pgq.list_queues() if q.name == "bench_idempotency"]
