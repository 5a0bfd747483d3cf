"""The SQS peers benchmark runs end to end (``python -m bench.sqs_peers --quick`` on the test
database): moto's server and the endpoint (JSON, and Query through botocore 1.31.0) with
the same workload, shallow and deep. Speed is never asserted: every row must hold numbers.
"""

from __future__ import annotations

import importlib.util
import os
import re
from typing import Any

import pytest

from tests.conftest import ROOT, needs_extra, run_quick_bench

pytestmark = [needs_extra("bench"), pytest.mark.bench]

NUMBER = r"[0-9][0-9,]*(?:\.[0-9]+)?"


@pytest.mark.slow
def test_quick_sqs_peers_benchmark_prints_numeric_ratios(transactional_db: Any) -> None:
    if importlib.util.find_spec("moto") is None and not os.environ.get("PGQ_BENCH_MOTO_PYTHON"):
        pytest.skip("moto[server] (the bench extra) is not installed: pip install -e '.[bench]'")
    if not (ROOT / ".venv-query" / "bin" / "python").exists():
        pytest.fail("`make query-client` makes .venv-query, which the Query row runs in")
    import pgq_django as pgq

    out = run_quick_bench("bench.sqs_peers")
    for case in ("SendMessage", "SendMessageBatch(10)", "ReceiveMessage(10)+DeleteMessageBatch"):
        for depth in ("shallow", "deep"):
            for contender in ("moto server", "pgq_django, JSON", "pgq_django, Query"):
                row = re.search(
                    rf"^\| {re.escape(f'{case}, {depth}')} +\| {re.escape(contender)} +\| "
                    rf"({NUMBER}) +\| ({NUMBER}) +\|",
                    out,
                    re.MULTILINE,
                )
                assert row, f"no numeric row for {case!r}, {depth}, {contender!r} in:\n{out}"
                assert min(float(g.replace(",", "")) for g in row.groups()) > 0
    assert not [q.name for q in pgq.list_queues() if q.name.startswith("bench_sqs_peers_")]
