"""The core benchmark runs end to end: ``python -m bench.core --quick`` on the test database.

Speed is never asserted here (that lives in bench/ and docs/performance.md); this checks that
the benchmark works: every contender ran every case and the table holds numeric ratios.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.conftest import needs_extra, run_quick_bench

pytestmark = [needs_extra("bench"), pytest.mark.bench]

CASES = (
    "send",
    "send_batch(100)",
    "read+delete qty 1, 1 consumer",
    "read+delete qty 100, 1 consumer",
    "read+delete qty 1, 4 consumers",
    "read+delete qty 100, 4 consumers",
)
NUMBER = r"[0-9][0-9,]*(?:\.[0-9]+)?"


@pytest.mark.slow
def test_quick_core_benchmark_prints_a_table_of_numeric_ratios(transactional_db: Any) -> None:
    out = run_quick_bench("bench.core")
    for case in CASES:
        row = re.search(
            rf"^\| {re.escape(case)} +\|"
            rf" ({NUMBER}) +\| ({NUMBER}) +\| ({NUMBER}) +\| ({NUMBER}) +\| ({NUMBER}) +\|",
            out,
            re.MULTILINE,
        )
        assert row, f"no numeric row for {case!r} in:\n{out}"
        pgq_rate, hand_rate, pgmq_rate, vs_hand, vs_pgmq = (
            float(g.replace(",", "")) for g in row.groups()
        )
        assert min(pgq_rate, hand_rate, pgmq_rate, vs_hand, vs_pgmq) > 0
    assert re.search(rf"read latency, .* backlogged +\| .* \| ({NUMBER}) +\|", out)
    assert re.search(rf"read_with_poll wake-up p50 / p95 \(pgq_django\) +\| .* \| ({NUMBER})", out)
    assert "results: " in out


def test_quick_cpu_benchmark_prints_cpu_per_message_and_leaves_no_queues(
    transactional_db: Any,
) -> None:
    """``bench.core_cpu``: client and server CPU per message of the single-consumer cases."""
    import pgq_django as pgq

    out = run_quick_bench("bench.core_cpu")
    for case in CASES[:4]:
        row = re.search(
            rf"^\| {re.escape(case)} +\| ({NUMBER}) +\| ({NUMBER}) +\| ({NUMBER}) +\|", out, re.M
        )
        assert row, f"no numeric row for {case!r} in:\n{out}"
        assert float(row.group(1).replace(",", "")) > 0  # the client's CPU is never nothing
    assert "results: " in out
    assert not [q.name for q in pgq.list_queues() if q.name.startswith("bench_core_")]


def test_quick_benchmark_leaves_no_queues_behind(transactional_db: Any) -> None:
    """The run above (or any run) drops its queues; a fresh run here does too."""
    import pgq_django as pgq

    run_quick_bench("bench.core", "--only", "send")
    assert not [q.name for q in pgq.list_queues() if q.name.startswith("bench_core_")]


def test_quick_unlogged_comparison_prints_its_ratios_and_leaves_no_queues(
    transactional_db: Any,
) -> None:
    """``--unlogged``: durable and non-durable queues of pgq_django and PGMQ, side by side."""
    import pgq_django as pgq

    out = run_quick_bench("bench.core", "--unlogged", "--only", "send", "--only", "read100")
    for case in ("send", "read+delete qty 100, 1 consumer"):
        row = re.search(rf"^\| {re.escape(case)} +\|" + rf" ({NUMBER}) +\|" * 8, out, re.MULTILINE)
        assert row, f"no numeric row for {case!r} in:\n{out}"
        assert min(float(g.replace(",", "")) for g in row.groups()) > 0
    assert "Durable vs unlogged" in out
    assert not [q.name for q in pgq.list_queues() if q.name.startswith("bench_core_")]


def test_quick_settings_variants_print_each_ratio_and_leave_no_queues(
    transactional_db: Any,
) -> None:
    """``--variants``: FAST_PATHS off, each shortcut off alone, BACKGROUND_SERVICES off."""
    import pgq_django as pgq

    out = run_quick_bench("bench.core", "--variants", "--only", "send")
    row = re.search(r"^\| send +\|" + rf" ({NUMBER}) +\|" * 11, out, re.MULTILINE)
    assert row, f"no numeric row for send in:\n{out}"
    assert min(float(g.replace(",", "")) for g in row.groups()) > 0
    assert "FAST_PATHS off / pgq" in out and "BACKGROUND_SERVICES off / PGMQ" in out
    assert not [q.name for q in pgq.list_queues() if q.name.startswith("bench_core_")]


def test_quick_statement_variants_print_each_statement_and_leave_no_queue(
    transactional_db: Any,
) -> None:
    """``bench.statement_variants``: every send and ack variant beside its general statement
    (each ran and acted on its queue: a statement that did not send or delete fails the run)."""
    import pgq_django as pgq
    from bench.statement_variants import CASES

    out = run_quick_bench("bench.statement_variants")
    for case in CASES:
        general, *lean = case.statements
        row = rf"^\| {re.escape(case.name)} +\| {general} +\| ({NUMBER}) +\| - +\| - +\|"
        assert re.search(row, out, re.M), f"no row for {case.name} {general} in:\n{out}"
        for name in lean:
            row = (
                rf"^\| {re.escape(case.name)} +\| {name} +\| ({NUMBER}) +\|"
                rf" ([+-]{NUMBER})% +\| ([+-]{NUMBER})% +\|"
            )
            assert re.search(row, out, re.M), f"no row for {case.name} {name} in:\n{out}"
    assert "results: " in out
    assert not [q.name for q in pgq.list_queues() if q.name.startswith("bench_statement")]


REST_CASES = ("send (p50 per call)", "send (p50, http.client)", "send batch 100", "consume+ack 100")


@pytest.mark.slow
def test_quick_rest_benchmark_prints_a_table_of_numeric_ratios(transactional_db: Any) -> None:
    """``python -m bench.rest --quick``: a live uvicorn on the test database, REST vs Python."""
    for module in ("requests", "aiohttp", "uvicorn"):  # the bench extra
        pytest.importorskip(module)
    import pgq_django as pgq

    out = run_quick_bench("bench.rest")
    for case in (*REST_CASES, "metrics scrape, 50 queues"):
        row = re.search(
            rf"^\| {re.escape(case)} +\| ({NUMBER}) +\| ({NUMBER}) +\| ({NUMBER})x",
            out,
            re.MULTILINE,
        )
        assert row, f"no numeric row for {case!r} in:\n{out}"
        rest_ms, python_ms, ratio = (float(g.replace(",", "")) for g in row.groups())
        assert min(rest_ms, python_ms, ratio) > 0
    assert re.search(rf"Each on its own queue, send → woken answer: p50 {NUMBER} ms", out), out
    assert re.search(rf"All on one queue, 5 sends one at a time: p50 {NUMBER} ms", out), out
    assert "results: " in out
    assert not [q.name for q in pgq.list_queues() if q.name.startswith("bench_")]


@pytest.mark.slow
def test_quick_pooler_benchmark_runs_through_its_own_pgbouncer(transactional_db: Any) -> None:
    import pgq_django as pgq

    out = run_quick_bench("bench.pooler")
    assert "PgBouncer (transaction mode) on 127.0.0.1:" in out
    # The test server listens on its Unix socket only (the benchmark never restarts a server
    # it did not start), so the TCP contender is left out, and the output says why; the
    # like-for-like ratio over Unix sockets is there.
    assert "note: the server does not answer on 127.0.0.1:" in out, out
    for case in ("send (1 per call)", "send_batch (100 per call)", "read+delete qty 1"):
        speeds = rf"^\| {re.escape(case)} +\|" + rf" ({NUMBER}) +\|" * 4 + "$"
        assert re.search(speeds, out, re.MULTILINE), f"no speeds for {case!r} in:\n{out}"
        ratios = rf"^\| {re.escape(case)} +\| - +\| ({NUMBER}) +\| ({NUMBER}) +\| - +\|"
        assert re.search(ratios, out, re.MULTILINE), f"no ratios for {case!r} in:\n{out}"
    assert not [q for q in pgq.list_queues() if q.name.startswith("bench_pooler_")]


@pytest.mark.slow
def test_quick_pooler_cpu_benchmark_counts_each_process_of_the_chain(
    transactional_db: Any,
) -> None:
    """``bench.pooler_cpu``: CPU per message of the client, PgBouncer and PostgreSQL, for the
    single-message cases of every contender this server allows."""
    import pgq_django as pgq

    out = run_quick_bench("bench.pooler_cpu")
    for case in ("send (1 per call)", "read+delete qty 1"):
        for contender in ("direct", "pgbouncer", "pgbouncer, Unix socket"):
            row = re.search(
                rf"^\| {re.escape(case)} +\| {re.escape(contender)} +\|"
                + rf" ({NUMBER}) +\|" * 4
                # waiting is the wall time less three CPU counts, each good to a clock
                # tick, so a short quick round can put it a little below zero
                + rf" (-?{NUMBER}) +\|",
                out,
                re.MULTILINE,
            )
            assert row, f"no numeric row for {case!r}, {contender!r} in:\n{out}"
    assert re.search(rf"within ±{NUMBER} µs per message here", out), out
    assert "results: " in out
    assert not [q for q in pgq.list_queues() if q.name.startswith("bench_pooler_")]
