"""``python -m bench.limits --quick`` runs end to end on the test database, prints its
ratios and leaves no queue behind (never how fast anything was)."""

from __future__ import annotations

import re
from typing import Any

import pytest

import pgq_django as pgq
from tests.conftest import run_quick_bench

pytestmark = [pytest.mark.slow, pytest.mark.bench]


def test_quick_limits_benchmark_prints_its_ratios_and_leaves_no_queues(
    transactional_db: Any,
) -> None:
    out = run_quick_bench("bench.limits")
    rows = [line for line in out.splitlines() if line.startswith("| read+delete")]
    assert len(rows) == 2, out
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert all(re.fullmatch(r"[\d,.]+", c) for c in cells[1:]), row
    assert not [q for q in pgq.list_queues() if q.name.startswith("bench_limits_")]
