"""``python -m bench.pressure``: pgq_django and PGMQ side by side under a pinned xmin horizon.

Both contenders run at once on one database, so each meets the same pin at the same moment:
a producer sends ``--rate`` messages per second (batches every 25 ms) and ``--consumers``
processes read (``read_with_poll``, ``--qty``) and delete, on each side. pgq_django's side
also runs the worker leader's upkeep every ``--upkeep-interval`` seconds (partitions,
counters, retention), as a deployment's worker does; PGMQ has none and relies on autovacuum.
The run goes through five phases:

1. **baseline** (``--baseline`` seconds);
2. **pin**: a transaction that took an xid sits idle for ``--pin`` seconds, so VACUUM may
   remove no row deleted after it began (the forgotten ``BEGIN`` of a console session);
3. **after the pin** (``--recovery`` seconds);
4. **readers**: four REPEATABLE READ transactions scan both queue tables every two seconds,
   each held ``--reader-hold`` seconds before the next begins, staggered so that one
   always holds an old snapshot (and the tables' locks), for ``--pin`` seconds;
5. **after the readers** (``--recovery`` seconds).

It prints, per phase and side: throughput, pickup latency p50/p99 (a message's send to its
read), the most dead tuples seen in the queue's tables, and the longest upkeep run; then
the dead tuples sampled each minute, and how far each side stayed from its baseline. With
``--highest`` it then runs each side alone, as fast as its consumers keep up (``--qty`` 50,
the producer keeping at most 20,000 queued), for ``--highest-seconds``, and prints
throughput and table size over time. ``--png`` draws both (default under docs/img/).

The database: ``DATABASE_URL`` (it must hold no queue yet), else ``pgq_pressure`` on the
embedded server in ``.pgdata/bench``, made anew. ``--quick``: about a minute in all.
Ctrl+C (or SIGTERM) stops every process and reports what was measured so far.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psycopg

from . import loadgen
from .common import ROOT, clock, fresh_database, write_results
from .pressure_load import QUEUE, READERS, Fault, Sampler, params, upkeep
from .pressure_report import phase_rows, plot_highest, plot_pins, print_highest, print_pins

# -- database ----------------------------------------------------------------------------------


def _database() -> dict[str, Any]:
    from pgq_django.testing import dsn_to_django, embedded_dsn

    url = os.environ.get("DATABASE_URL")
    if url:
        return dsn_to_django(url)
    server = embedded_dsn(ROOT / ".pgdata" / "bench")
    fresh_database(server, "pgq_pressure")
    db = dsn_to_django(server)
    db["NAME"] = "pgq_pressure"
    return db


def setup(args: argparse.Namespace) -> None:
    """Django on the bench's database, a pgq_django queue and a PGMQ queue, both empty."""
    import django
    from django.conf import settings

    settings.configure(
        DEBUG=False,
        USE_TZ=True,
        SECRET_KEY="bench-only-not-secret",
        INSTALLED_APPS=["django.contrib.auth", "django.contrib.contenttypes", "pgq_django"],
        DATABASES={"default": _database()},
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        PGQ={"PARTITION_SIZE": args.partition_size, "PARTITION_PREMAKE": args.premake},
    )
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    import pgq_django as pgq
    from pgq_django import partitions

    from .core import install_pgmq

    if pgq.list_queues():
        raise SystemExit("DATABASE_URL holds queues already: the bench needs a database of its own")
    # Messages land in ranges of the size under test, not in the migration's first range.
    first = partitions.list_partitions(partitions.MESSAGE_TABLE)[0]
    with psycopg.connect(**params(), autocommit=True) as conn:
        conn.execute("SELECT setval('pgq_message_msg_id_seq', %s)", [first.upper - 1])
        partitions.run_maintenance()
        pgq.create_queue(QUEUE, visibility_timeout=30)
        print(f"  PGMQ: {install_pgmq(conn)}", flush=True)
        conn.execute("SELECT pgmq.create(%s)", [QUEUE])


# -- the run -----------------------------------------------------------------------------------


class Stopped(Exception):
    """Ctrl+C or SIGTERM: report what was measured so far."""


def _plans(args: argparse.Namespace, logs: Path, rate: float | None, qty: int) -> dict[str, Any]:
    vt = 30
    return {
        "pgq": loadgen.Plan(
            "pgq",
            lambda: loadgen.PgqClient(QUEUE, vt),
            rate,
            args.consumers,
            qty,
            logs=logs / "pgq",
        ),
        "pgmq": loadgen.Plan(
            "pgmq",
            lambda: loadgen.PgmqClient(params(), QUEUE, vt),
            rate,
            args.consumers,
            qty,
            logs=logs / "pgmq",
        ),
    }


def _wait(
    seconds: float, tick: Callable[[], None], stopping: loadgen.StopFlag, every: float
) -> None:
    end = clock() + seconds
    while clock() < end:
        if stopping.is_set():
            raise Stopped
        tick()
        stopping.wait(min(every, max(0.0, end - clock())))


def _phases(args: argparse.Namespace) -> list[tuple[str, float, str | None]]:
    pin = [("idle-in-transaction pin", args.pin, "pin"), ("after the pin", args.recovery, None)]
    readers = [
        (f"{READERS} REPEATABLE READ readers", args.pin, "readers"),
        ("after the readers", args.recovery, None),
    ]
    faults = {"both": pin + readers, "pin": pin, "readers": readers}[args.faults]
    return [("warm-up", args.warmup, None), ("baseline", args.baseline, None), *faults]


def run_pins(args: argparse.Namespace, work: Path, stopping: loadgen.StopFlag) -> dict[str, Any]:
    ctx = multiprocessing.get_context("fork")
    started = clock()
    plans = _plans(args, work, args.rate, args.qty)
    loads = {side: loadgen.Load(ctx, plan, started) for side, plan in plans.items()}
    for plan in plans.values():
        assert plan.logs is not None
        plan.logs.mkdir(parents=True)
    upkeep_stop = ctx.Event()
    upkeep_out = work / "upkeep.json"
    keeper = ctx.Process(
        target=upkeep, args=(args.upkeep_interval, started, upkeep_stop, upkeep_out)
    )
    for load in loads.values():
        load.start()
    keeper.start()
    sampler = Sampler()
    spans: list[dict[str, Any]] = []
    phase_name = ""
    last_print = [0.0]

    def tick() -> None:
        t = clock() - started
        sampler.take(t, phase_name, loads)
        if t - last_print[0] >= args.progress_every and sampler.rows:
            last_print[0] = t
            row = sampler.rows[-1]
            print(
                f"[{t:6.0f}s] {phase_name:<28} "
                + "  ".join(
                    f"{side}: {row[side]['consumed']:>9,} read, {row[side]['dead']:>9,} dead"
                    for side in loads
                    if side in row
                ),
                flush=True,
            )

    try:
        for name, seconds, fault in _phases(args):
            phase_name = name
            span = {"phase": name, "fault": fault, "start": clock() - started}
            spans.append(span)
            with Fault(fault, ctx, args):
                _wait(seconds, tick, stopping, args.sample_every)
            span["end"] = clock() - started
    except Stopped:
        if spans and "end" not in spans[-1]:
            spans[-1]["end"] = clock() - started
        print("\nstopped: reporting what was measured", flush=True)
    finally:
        for load in loads.values():
            load.finish()
        upkeep_stop.set()
        keeper.join(timeout=60)
        sampler.close()
    upkeep_runs = json.loads(upkeep_out.read_text()) if upkeep_out.exists() else []
    latency = {side: loadgen.latency_by_second(work / side) for side in loads}
    return {
        "phases": spans,
        "samples": sampler.rows,
        "upkeep": upkeep_runs,
        "rows": phase_rows(spans, latency, sampler.rows, upkeep_runs)[1:],  # not the warm-up
        "latency_seconds": {side: {"count_by_second": _counts(h)} for side, h in latency.items()},
        "p99_by_window": _p99_windows(latency, args.window),
    }


def _counts(latency: dict[int, dict[int, int]]) -> dict[int, int]:
    return {s: sum(h.values()) for s, h in sorted(latency.items())}


def _p99_windows(latency: dict[str, dict[int, dict[int, int]]], window: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for side, by_second in latency.items():
        windows: dict[int, list[dict[int, int]]] = {}
        for second, hist in by_second.items():
            windows.setdefault(second // window * window, []).append(hist)
        out[side] = {
            w: loadgen.percentile_ms(loadgen.merge(hs), 99) for w, hs in sorted(windows.items())
        }
    return out


def run_highest(args: argparse.Namespace, work: Path, stopping: loadgen.StopFlag) -> dict[str, Any]:
    """Each side alone, as fast as its consumers keep up, one after the other."""
    ctx = multiprocessing.get_context("fork")
    out: dict[str, Any] = {}
    for side, plan in _plans(args, work / "highest", None, args.highest_qty).items():
        assert plan.logs is not None
        plan.logs.mkdir(parents=True)
        started = clock()
        load = loadgen.Load(ctx, plan, started)
        load.start()
        keeper_stop = ctx.Event()
        keeper = None
        if side == "pgq":
            keeper = ctx.Process(
                target=upkeep,
                args=(args.upkeep_interval, started, keeper_stop, work / "highest-upkeep.json"),
            )
            keeper.start()
        sampler = Sampler()
        print(f"  highest rate: {side} for {args.highest_seconds:.0f}s", flush=True)
        try:
            _wait(
                args.highest_seconds,
                _sample_one(sampler, started, side, load),
                stopping,
                min(args.sample_every, args.highest_seconds / 25),
            )
        except Stopped:
            print("\nstopped: reporting what was measured", flush=True)
        finally:
            load.finish()
            keeper_stop.set()
            if keeper is not None:
                keeper.join(timeout=60)
            sampler.close()
        out[side] = [{"t": r["t"], **r[side]} for r in sampler.rows if side in r]
        if stopping.is_set():
            break
    return out


def _sample_one(
    sampler: Sampler, started: float, side: str, load: loadgen.Load
) -> Callable[[], None]:
    return lambda: sampler.take(clock() - started, "highest", {side: load})


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.pressure", description=__doc__.split("\n")[0]
    )
    add = parser.add_argument
    add("--rate", type=float, default=800.0, help="messages per second, each side")
    add("--consumers", type=int, default=4, help="consumer processes, each side")
    add("--qty", type=int, default=10, help="messages per read")
    add("--warmup", type=float, default=30.0, help="seconds before the baseline, not reported")
    add("--baseline", type=float, default=180.0, help="seconds")
    add("--pin", type=float, default=900.0, help="seconds the pin, then the readers, hold")
    add("--recovery", type=float, default=300.0, help="seconds after each")
    add("--reader-hold", type=float, default=60.0, help="seconds each reader's snapshot lives")
    add("--partition-size", type=int, default=50_000, help="ids per pgq_django range")
    add("--premake", type=int, default=2, help="pgq_django ranges kept ready ahead")
    add("--faults", choices=("both", "pin", "readers"), default="both")
    add("--upkeep-interval", type=float, default=10.0, help="seconds between upkeep runs")
    add("--sample-every", type=float, default=5.0)
    add("--progress-every", type=float, default=60.0)
    add("--window", type=int, default=10, help="seconds per point of the plot")
    add("--dead-every", type=float, default=60.0, help="seconds between rows of dead tuples")
    add("--highest", action=argparse.BooleanOptionalAction, default=True)
    add("--pins", action=argparse.BooleanOptionalAction, default=True)
    add("--highest-seconds", type=float, default=240.0)
    add("--highest-qty", type=int, default=50)
    add("--png", type=Path, default=ROOT / "docs" / "img" / "pressure.png")
    add("--quick", action="store_true", help="about a minute in all")
    args = parser.parse_args(argv)
    if args.quick:
        args.warmup, args.baseline, args.pin, args.recovery = 3.0, 6.0, 10.0, 6.0
        args.reader_hold = 4.0
        args.partition_size, args.upkeep_interval, args.sample_every = 2_000, 1.0, 1.0
        args.progress_every, args.window, args.dead_every = 10.0, 2, 5.0
        args.highest_seconds = 5.0
        if args.png == ROOT / "docs" / "img" / "pressure.png":
            args.png = Path(tempfile.gettempdir()) / "pgq-pressure-quick.png"
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    setup(args)
    stopping = loadgen.StopFlag()
    stopping.install()
    work = Path(tempfile.mkdtemp(prefix="pgq_pressure_"))
    report: dict[str, Any] = {"settings": {k: str(v) for k, v in vars(args).items()}}
    if args.pins:
        report["pins"] = run_pins(args, work, stopping)
        print_pins(report["pins"], args.dead_every)
        plot_pins(report["pins"], args.png, args.window)
        print(f"plot: {args.png}")
    if args.highest and not stopping.is_set():
        report["highest"] = run_highest(args, work, stopping)
        print_highest(report["highest"])
        png = args.png.with_name(args.png.stem + "-highest.png")
        plot_highest(report["highest"], png)
        print(f"plot: {png}")
    print(f"results: {write_results('pressure', report)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
