"""``python -m bench.chaos --quick`` runs end to end on a PostgreSQL server of its own.

The bench restarts its server, so it gets one in a data directory of this test's own (the
suite's shared server is never restarted). Speed is never asserted (that is the bench's job,
docs/performance.md): this checks that every fault ran on both queues, that the table holds
numbers, and that no acknowledged message was lost.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import ROOT, needs_extra, subprocess_env

pytestmark = [needs_extra("bench"), pytest.mark.bench]

NUMBER = r"[0-9][0-9,]*(?:\.[0-9]+)?"
FAULTS = ("PostgreSQL restart", "backend kills", "worker SIGKILL", "idle connections", "whole run")


@pytest.mark.slow
def test_quick_chaos_run_loses_nothing_on_either_queue_and_reports_every_fault() -> None:
    # Not under pytest's tmp_path: as root the server runs as a user of its own, which must
    # traverse the directories above its data (see tests/acceptance/test_embedded.py).
    path = Path(tempfile.mkdtemp(prefix="pgq-chaos-"))
    env = subprocess_env()
    for name in ("DJANGO_SETTINGS_MODULE", "PGQ_USE_TEST_DB", "DATABASE_URL"):
        env.pop(name, None)  # the bench configures Django for its own server
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "bench.chaos", "--quick", "--data-dir", str(path / "pgdata")],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=400,
        )
    finally:
        shutil.rmtree(path, ignore_errors=True)
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    for fault in FAULTS:
        for queue in ("pgq_django", "PGMQ"):
            row = re.search(
                rf"^\| [^|]*{re.escape(fault)}[^|]* +\| {queue} +\| [^|]+\|"
                rf" ({NUMBER}) +\| ({NUMBER}) +\| ({NUMBER}) +\| ({NUMBER}) +\|",
                out,
                re.MULTILINE,
            )
            assert row, f"no numeric row for {fault!r} / {queue} in:\n{out}"
            lost = int(row.group(1).replace(",", ""))
            assert lost == 0, f"{queue} lost {lost} acknowledged messages in {fault!r}"
    rates = re.findall(rf"\| ({NUMBER}) +\| ({NUMBER}|-) +\|$", out, re.MULTILINE)
    assert any(float(r.replace(",", "")) > 0 for r, _ in rates), out
