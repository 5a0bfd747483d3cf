"""The SQS benchmark runs end to end (``python -m bench.sqs --quick`` on the test database).

Speed is never asserted: this checks that both cases ran for every contender (the Python
API, boto3 against the lean ASGI path, against the Django view and against canned answers)
and that the table holds numeric rates and ratios.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.conftest import needs_extra, run_quick_bench

pytestmark = [needs_extra("bench"), pytest.mark.bench]

NUMBER = r"[0-9][0-9,]*(?:\.[0-9]+)?"


@pytest.mark.slow
def test_quick_sqs_benchmark_prints_numeric_ratios(transactional_db: Any) -> None:
    import pgq_django as pgq

    out = run_quick_bench("bench.sqs")
    for case in ("SendMessageBatch(10)", "ReceiveMessage(10)+DeleteMessageBatch"):
        for contender in (
            "Python API",
            "boto3, lean ASGI",
            "boto3, Django view",
            "boto3, canned answers",
        ):
            row = re.search(
                rf"^\| {re.escape(case)} +\| {re.escape(contender)} +\| ({NUMBER}) +\| "
                rf"({NUMBER}) +\|",
                out,
                re.MULTILINE,
            )
            assert row, f"no numeric row for {case!r}, {contender!r} in:\n{out}"
            assert min(float(g.replace(",", "")) for g in row.groups()) > 0
    assert not [q.name for q in pgq.list_queues() if q.name.startswith("bench_sqs_")]
