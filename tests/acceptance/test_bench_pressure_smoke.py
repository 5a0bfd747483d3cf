"""``python -m bench.pressure --quick`` runs end to end on a fresh database of its own.

Speed is never asserted here (that is the benchmark's job, docs/performance.md): this checks
that both queues went through every phase and that each table holds numbers for both.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, direct_dsn, needs_extra, subprocess_env

pytestmark = [needs_extra("bench"), pytest.mark.bench]

NUMBER = r"[0-9][0-9,]*(?:\.[0-9]+)?"
PHASES = (
    "baseline",
    "idle-in-transaction pin",
    "after the pin",
    "4 REPEATABLE READ readers",
    "after the readers",
)


def _run(database: str, *args: str) -> str:
    env = subprocess_env(DATABASE_URL=direct_dsn(database))
    env.pop("DJANGO_SETTINGS_MODULE")  # the bench configures Django for its own database
    proc = subprocess.run(
        [sys.executable, "-m", "bench.pressure", "--quick", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def _is_png(path: Path) -> bool:
    return path.stat().st_size > 10_000 and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_quick_pressure_run_reports_every_phase_for_both_queues(
    fresh_database: str, tmp_path: Path
) -> None:
    png = tmp_path / "pressure.png"
    out = _run(fresh_database, "--no-highest", "--png", str(png))
    for phase in PHASES:
        # phase, seconds, then per queue: msg/s and "p50 / p99", then dead tuples for both.
        latency = rf"({NUMBER}) / ({NUMBER})"
        row = re.search(
            rf"^\| {re.escape(phase)} +\| {NUMBER} +\| ({NUMBER}) +\| {latency} +\|"
            rf" ({NUMBER}) +\| {latency} +\| ({NUMBER}) +\| ({NUMBER}) +\|",
            out,
            re.MULTILINE,
        )
        assert row, f"no numeric row for {phase!r} in:\n{out}"
        pgq_rate, pgq_p50, pgq_p99, pgmq_rate, pgmq_p50, pgmq_p99 = (
            float(g.replace(",", "")) for g in row.groups()[:6]
        )
        assert pgq_rate > 0 and pgmq_rate > 0
        assert 0 < pgq_p50 <= pgq_p99 and 0 < pgmq_p50 <= pgmq_p99
    for fault in ("idle-in-transaction pin", "4 REPEATABLE READ readers"):
        for queue in ("pgq_django", "PGMQ"):
            goal = rf"^\| {re.escape(fault)} +\| {queue} +\| ({NUMBER}) +\| ({NUMBER}) +\|"
            assert re.search(goal, out, re.MULTILINE), f"no goal row {fault}/{queue}:\n{out}"
    assert "Dead tuples in the queue's tables" in out
    assert _is_png(png)


@pytest.mark.slow
def test_quick_highest_rate_run_reports_throughput_and_size_for_both_queues(
    fresh_database: str, tmp_path: Path
) -> None:
    png = tmp_path / "pressure.png"
    out = _run(fresh_database, "--no-pins", "--png", str(png))
    for queue in ("pgq_django", "PGMQ"):
        rows = re.findall(
            rf"^\| {queue} +\| [0-9]+-[0-9]+ +\| ({NUMBER}) +\| ({NUMBER}) +\| ({NUMBER}) +\|",
            out,
            re.MULTILINE,
        )
        assert rows, f"no highest-rate rows for {queue} in:\n{out}"
        assert all(float(rate.replace(",", "")) > 0 for rate, _, _ in rows)
        assert all(float(size.replace(",", "")) > 0 for _, size, _ in rows)
    assert _is_png(tmp_path / "pressure-highest.png")
