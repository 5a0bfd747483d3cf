"""Shared plumbing for the benchmarks: database, timing, interleaved rounds, tables, results.

Every bench module measures its contenders side by side in one run on one database, because
a shared machine is noisy from run to run (docs/performance.md): a ratio taken inside one
run is meaningful where two absolute numbers from different runs are not. The helpers here
make that the easy path:

- :func:`setup` configures Django once, on the database the benchmarks own (``pgq_bench`` on
  the embedded PostgreSQL in ``.pgdata/bench``, or the database ``DATABASE_URL`` names, or,
  when ``DJANGO_SETTINGS_MODULE`` is already set, that project's default database; the smoke
  test uses this to run on the test database) and applies the migrations.
- :func:`interleave` runs every contender once per round, rotating who goes first, and
  :func:`median` / :func:`percentile` reduce the rounds.
- :func:`run_processes` starts real consumer processes that begin together behind a barrier.
- :func:`print_table` and :func:`write_results` report.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

import pgq_django as pgq

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "bench" / "results"
BENCH_DATA_DIR = ROOT / ".pgdata" / "bench"
BENCH_DB_NAME = "pgq_bench"

_configured = False


# -- database ------------------------------------------------------------------------------


def _ensure_database(server_dsn: str, name: str) -> None:
    """Create database ``name`` on the server of ``server_dsn`` unless it exists."""
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if not found:
            conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))


def fresh_database(server_dsn: str, name: str) -> None:
    """Drop database ``name`` on the server of ``server_dsn`` if it exists and create it
    again: a bench that compares against a peer's freshly made tables starts from the same
    empty state, not from what earlier runs left in the shared ones."""
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        ident = psycopg.sql.Identifier(name)
        conn.execute(psycopg.sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))
        conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(ident))


def _bench_database() -> dict[str, Any]:
    """The Django database dict of the benchmark database (see the module docstring)."""
    from pgq_django.testing import dsn_to_django, embedded_dsn

    url = os.environ.get("DATABASE_URL")
    if url:
        return dsn_to_django(url)
    server = embedded_dsn(BENCH_DATA_DIR)
    _ensure_database(server, BENCH_DB_NAME)
    db = dsn_to_django(server)
    db["NAME"] = BENCH_DB_NAME
    return db


def setup(*, migrate: bool = True) -> None:
    """Configure Django (once per process) and bring the database schema up to date."""
    global _configured
    if _configured:
        return
    import django
    from django.conf import settings

    if not os.environ.get("DJANGO_SETTINGS_MODULE") and not settings.configured:
        settings.configure(
            DEBUG=False,
            USE_TZ=True,
            SECRET_KEY="bench-only-not-secret",
            INSTALLED_APPS=[
                "django.contrib.auth",
                "django.contrib.contenttypes",
                "pgq_django",
            ],
            DATABASES={"default": _bench_database()},
            DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        )
    django.setup()
    if migrate:
        from django.core.management import call_command

        call_command("migrate", verbosity=0, interactive=False)
        _partition_upkeep()
    _configured = True


def _partition_upkeep() -> None:
    """What a worker's upkeep does, which the benchmark database has no worker for: ranges
    made ahead of the sequence, and rows that landed in a DEFAULT partition moved out. Runs
    push millions of ids through; without this their messages end up in the DEFAULT
    partition, which is not the table a deployment reads from, and reads there ran at a third
    of their speed."""
    from pgq_django import partitions

    for action in partitions.repair_default() + partitions.premake_partitions():
        print(f"  partitions: {action}", flush=True)


def connect(*, autocommit: bool = True) -> psycopg.Connection[Any]:
    """A plain psycopg connection to the benchmark database, with psycopg's defaults.

    Hand-written contenders use this: no Django, server-side parameter binding and automatic
    prepared statements after a few executions, as a psycopg user gets them out of the box.
    """
    from pgq_django.store.notify import connection_params

    return psycopg.connect(**connection_params(), autocommit=autocommit)


def server_version() -> str:
    with connect() as conn:
        return str(conn.execute("SHOW server_version").fetchone()[0])  # type: ignore[index]


def close_django_connections() -> None:
    """Close Django's connections (before forking: a child must not share its parent's)."""
    from django.db import connections

    from pgq_django.store.notify import close_all

    connections.close_all()
    close_all()


# -- timing ----------------------------------------------------------------------------------


def clock() -> float:
    """A monotonic clock shared by all processes of the machine (CLOCK_MONOTONIC on Linux)."""
    return time.perf_counter()


def drain(queue: str, qty: int) -> int:
    """Read and delete through the Python API until the queue answers nothing; how many
    messages were consumed (one receipt for ``qty=1``, the list otherwise)."""
    done = 0
    while True:
        found = pgq.read(queue, qty=qty)
        if not found:
            return done
        if qty == 1:
            pgq.delete(queue, found[0].receipt)
        else:
            pgq.delete(queue, [m.receipt for m in found])
        done += len(found)


def timed(fn: Callable[[], Any]) -> float:
    """Seconds one call of ``fn`` takes."""
    start = clock()
    fn()
    return clock() - start


def median(values: Iterable[float]) -> float:
    return float(statistics.median(list(values)))


def percentile(values: Sequence[float], pct: float) -> float:
    """The ``pct``-th percentile (0-100) by linear interpolation between closest ranks."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of no values")
    rank = (len(ordered) - 1) * pct / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def interleave(
    rounds: int,
    contenders: dict[str, Callable[[int], float]],
    *,
    before_each: Callable[[str, int], None] | None = None,
) -> dict[str, list[float]]:
    """Run each contender once per round, rotating the order round by round.

    ``contenders`` maps a name to ``measure(round) -> value``; the answer maps each name to
    its values, one per round. Rotation spreads slow drifts of the machine (a neighbour's
    burst, autovacuum, a cooling cache) over every contender instead of one.
    """
    names = list(contenders)
    values: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            if before_each is not None:
                before_each(name, r)
            values[name].append(contenders[name](r))
    return values


# -- processes ---------------------------------------------------------------------------------


def _child(target: Callable[..., Any], args: tuple[Any, ...], barrier: Any, out: Any) -> None:
    try:
        prepared = target(*args)  # connect, warm up: everything before the start line
        barrier.wait()
        result = prepared()
        out.put(("ok", result, clock()))
    except BaseException as exc:  # report, never hang the parent at the barrier
        barrier.abort()
        out.put(("error", repr(exc), clock()))


def run_processes(
    n: int, target: Callable[..., Callable[[], Any]], *args: Any
) -> tuple[float, list[Any]]:
    """Run ``target(*args)`` in ``n`` forked processes that start together; time them.

    ``target`` does its set-up (connecting, say) and returns the work to time; all children
    and the parent meet at a barrier, and the elapsed time runs from the barrier to the last
    child's finish. Answers (seconds, [each child's result]). Django connections are closed
    first, so each child opens its own.
    """
    close_django_connections()
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(n + 1)
    out = ctx.Queue()
    procs = [ctx.Process(target=_child, args=(target, args, barrier, out)) for _ in range(n)]
    for p in procs:
        p.start()
    try:
        barrier.wait(timeout=60)
        start = clock()
        reports = [out.get(timeout=600) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    errors = [r[1] for r in reports if r[0] != "ok"]
    if errors:
        raise RuntimeError(f"a benchmark process failed: {errors[0]}")
    return max(r[2] for r in reports) - start, [r[1] for r in reports]


# -- reporting -------------------------------------------------------------------------------


def fmt(value: float | None, digits: int = 2) -> str:
    if value is None:
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Print a Markdown table (readable in a terminal, pasteable into docs/)."""
    cells = [[str(c) for c in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"

    print(f"\n{title}\n")
    print(line(cells[0]))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in cells[1:]:
        print(line(row))
    sys.stdout.flush()


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    cpu = platform.processor() or ""
    try:
        for row in Path("/proc/cpuinfo").read_text().splitlines():
            if row.startswith("model name"):
                cpu = row.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "postgres": server_version(),
    }


def write_results(name: str, data: dict[str, Any]) -> Path:
    """Write ``data`` to bench/results/<name>-<UTC time>.json and <name>-latest.json."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    payload = {"bench": name, "at": stamp, "machine": machine(), **data}
    path = RESULTS_DIR / f"{name}-{stamp}.json"
    text = json.dumps(payload, indent=2, default=str)
    path.write_text(text)
    (RESULTS_DIR / f"{name}-latest.json").write_text(text)
    return path


def arguments(
    description: str,
    argv: Sequence[str] | None = None,
    *,
    extra: Callable[[argparse.ArgumentParser], None] | None = None,
) -> argparse.Namespace:
    """The options every bench module takes (``--quick``, ``--rounds``) plus its own.

    Unknown options are ignored, so ``python -m bench`` can pass one command line to every
    module.
    """
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--quick", action="store_true", help="a small smoke run: tiny sizes, 3 rounds"
    )
    parser.add_argument("--rounds", type=int, default=None, help="rounds per case (min 3)")
    if extra is not None:
        extra(parser)
    args, _ = parser.parse_known_args(argv)
    if args.rounds is not None and args.rounds < 3:
        parser.error("--rounds must be at least 3: a median of fewer is not one")
    return args
