"""``python -m bench.workers --quick`` runs end to end on the test database.

Speed is never asserted here (that lives in bench/ and docs/performance.md): this checks that
batch commit and tuned pgqueuer both drain every round, each message exactly once (the bench
itself fails a round otherwise), and that the table holds numeric ratios to both pgqueuers.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.conftest import needs_extra, run_quick_bench

pytestmark = [needs_extra("bench"), pytest.mark.bench]

NUMBER = r"[0-9][0-9,]*(?:\.[0-9]+)?"


@pytest.mark.slow
def test_quick_workers_benchmark_checks_every_round_and_prints_both_ratios(
    transactional_db: Any,
) -> None:
    only = ["pgq_django batch 100", "pgqueuer", "pgqueuer tuned 100"]
    args = [a for name in only for a in ("--only", name)]
    out = run_quick_bench("bench.workers", "--messages", "300", "--no-latency", *args)
    for procs in (1, 4):
        for name in only:
            cells = rf" +\| ({NUMBER})" * 3
            row = re.search(rf"^\| {procs} +\| {re.escape(name)}{cells} +\|", out, re.MULTILINE)
            assert row, f"no numeric row for {name!r} at {procs} in:\n{out}"
            assert min(float(g.replace(",", "")) for g in row.groups()) > 0
