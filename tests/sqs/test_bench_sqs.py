"""The SQS benchmark runs end to end (``python -m bench.sqs --quick`` on the test database).

Speed is never asserted: this checks that both cases ran for both contenders and that the
table holds numeric rates and ratios.
"""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import pytest

from ..conftest import ROOT, subprocess_env

NUMBER = r"[0-9][0-9,]*(?:\.[0-9]+)?"


@pytest.mark.slow
def test_quick_sqs_benchmark_prints_numeric_ratios(transactional_db: Any) -> None:
    import pgq_django as pgq

    proc = subprocess.run(
        [sys.executable, "-m", "bench.sqs", "--quick"],
        cwd=ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for case in ("SendMessageBatch(10)", "ReceiveMessage(10)+DeleteMessageBatch"):
        row = re.search(
            rf"^\| {re.escape(case)} +\| ({NUMBER}) +\| ({NUMBER}) +\| ({NUMBER}) +\|",
            proc.stdout,
            re.MULTILINE,
        )
        assert row, f"no numeric row for {case!r} in:\n{proc.stdout}"
        assert min(float(g.replace(",", "")) for g in row.groups()) > 0
    assert not [q.name for q in pgq.list_queues() if q.name.startswith("bench_sqs_")]
