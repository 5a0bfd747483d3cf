"""``python -m bench.soak``: does pgq_django stay flat after millions of messages?

One producer process sends, ``--consumers`` processes read and acknowledge (the queue archives
on ack, and archive retention prunes), and an upkeep process runs the worker leader's duties
(partitions, expiry, retention, counters) every ``--upkeep-interval`` seconds, all against a
database of the soak's own. The producer keeps at most ``--backlog`` messages queued, so the
run measures a queue in steady service rather than a growing backlog. The report:

- throughput in each tenth of the messages, and read latency p50/p99 in each tenth (the goal
  is last/first <= 1.5);
- the live tables' size (heap + indexes) right after the queue drains at 10 % and at 100 %
  of the run (goal: within 2x), sampled over time too;
- archive rows and size against what retention should keep (throughput x retention);
- dead tuples and autovacuum runs of the live and archive partitions (pg_stat_user_tables);
- resident memory of every process over time;
- counts: every message sent was acknowledged exactly once, none is left, and the archive
  holds exactly what retention has not pruned.

``--no-partitions`` is the comparison: one partition wide enough for every id (10^15), so the
live table is in effect one unpartitioned table that upkeep never drops, and only VACUUM
reclaims its dead rows. ``--json`` keeps the numbers, ``--compare`` overlays an earlier
run's JSON on the plot, and ``--png`` draws throughput, latency and size over time.

The database: ``DATABASE_URL`` (it must hold no queue yet: the soak moves the msg_id sequence
and drops partitions), else ``pgq_soak`` on the embedded server in ``.pgdata/bench``, made
anew for each run. Ctrl+C (or SIGTERM) stops every process and prints what was measured.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg

from .common import ROOT, clock, fresh_database
from .soak_report import TENTHS, Tenth, plot, print_report, report_of

QUEUE = "soak"
HUGE = 10**15  # the width of the one partition of --no-partitions


# -- database ----------------------------------------------------------------------------------


def _database(fresh_name: str = "pgq_soak") -> dict[str, Any]:
    from pgq_django.testing import dsn_to_django, embedded_dsn

    url = os.environ.get("DATABASE_URL")
    if url:
        return dsn_to_django(url)
    server = embedded_dsn(ROOT / ".pgdata" / "bench")
    fresh_database(server, fresh_name)
    db = dsn_to_django(server)
    db["NAME"] = fresh_name
    return db


def setup(args: argparse.Namespace) -> None:
    import django
    from django.conf import settings

    size = HUGE if args.no_partitions else args.partition_size
    settings.configure(
        DEBUG=False,
        USE_TZ=True,
        SECRET_KEY="bench-only-not-secret",
        INSTALLED_APPS=["django.contrib.auth", "django.contrib.contenttypes", "pgq_django"],
        DATABASES={"default": _database()},
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        PGQ={
            "PARTITION_SIZE": size,
            "PARTITION_PREMAKE": 2,
            # --default-autovacuum: PostgreSQL's own settings, for the comparison.
            **({"LIVE_PARTITION_STORAGE": {}} if args.default_autovacuum else {}),
        },
    )
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    import pgq_django as pgq
    from pgq_django import partitions

    if pgq.list_queues():
        raise SystemExit("DATABASE_URL holds queues already: the soak needs a database of its own")
    # Start past the migration's first range, so every message lands in ranges of the size
    # under test (the first range is drained at once and dropped by the first upkeep), and
    # half a range in: the queue then drains (at 10 % and at the end) with a range half
    # full, never exactly at a range's end, when upkeep would drop the whole of it.
    first = partitions.list_partitions(partitions.MESSAGE_TABLE)[0]
    offset = 0 if args.no_partitions else args.partition_size // 2
    with psycopg.connect(**_params()) as conn:
        conn.execute("SELECT setval('pgq_message_msg_id_seq', %s)", [first.upper - 1 + offset])
    partitions.run_maintenance()
    pgq.create_queue(QUEUE, retention=args.retention, visibility_timeout=60, archive_on_ack=True)


def _params() -> dict[str, Any]:
    from pgq_django.store.notify import connection_params

    return dict(connection_params())


# -- the processes -----------------------------------------------------------------------------


class Shared:
    """Counters all processes see (fork-shared memory)."""

    def __init__(self, ctx: Any) -> None:
        self.sent = ctx.Value("q", 0)
        self.acked = ctx.Value("q", 0)
        self.expired = ctx.Value("q", 0)
        self.upkeeps = ctx.Value("q", 0)  # upkeep runs finished
        self.stop = ctx.Event()
        self.resume = ctx.Event()


def _quiet_signals() -> None:
    # Children leave Ctrl+C to the parent, which stops them through the shared event.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def producer(args: argparse.Namespace, shared: Shared, out: Path) -> None:
    _quiet_signals()
    import pgq_django as pgq

    pad = "x" * args.body_bytes
    pause_at = args.messages // TENTHS
    count = id_sum = 0
    while count < args.messages and not shared.stop.is_set():
        if count >= pause_at and not shared.resume.is_set():
            shared.resume.wait(0.05)  # the parent measures the drained queue at 10 %
            continue
        if count - shared.acked.value - shared.expired.value >= args.backlog:
            time.sleep(0.002)
            continue
        n = min(args.batch, args.messages - count, max(pause_at - count, 0) or args.batch)
        ids = pgq.send_batch(QUEUE, [{"i": count + k, "pad": pad} for k in range(n)])
        count += len(ids)
        id_sum += sum(ids)
        with shared.sent.get_lock():
            shared.sent.value += len(ids)
    out.write_text(json.dumps({"sent": count, "id_sum": id_sum}))


def consumer(args: argparse.Namespace, shared: Shared, out: Path) -> None:
    _quiet_signals()
    import pgq_django as pgq

    # Per tenth of the run: a latency histogram, messages read, first and last read's end.
    # Fixed-size, so the consumer's memory measures pgq_django, not the benchmark's notes.
    tenths = [Tenth() for _ in range(TENTHS)]
    acked = id_sum = 0
    total = args.messages
    while not shared.stop.is_set():
        progress = shared.acked.value + shared.expired.value
        if progress >= total:
            break
        start = clock()
        messages = pgq.read(QUEUE, qty=args.qty, vt=60)
        took = clock() - start
        if not messages:
            time.sleep(0.005)
            continue
        tenths[min(progress * TENTHS // total, TENTHS - 1)].add(start + took, took, len(messages))
        done = pgq.delete(QUEUE, [m.msg_id for m in messages])
        assert isinstance(done, list)
        acked += len(done)
        id_sum += sum(done)
        with shared.acked.get_lock():
            shared.acked.value += len(done)
    tenths_out = [t.as_dict() for t in tenths]
    out.write_text(json.dumps({"acked": acked, "id_sum": id_sum, "tenths": tenths_out}))


def upkeep(args: argparse.Namespace, shared: Shared, out: Path) -> None:
    """The worker leader's duties, on a short interval; records what each run did and cost."""
    _quiet_signals()
    from pgq_django.worker import maintenance

    runs: list[dict[str, Any]] = []
    duties = maintenance.default_duties(args.upkeep_interval)
    while not shared.stop.is_set():
        started = clock()
        timings = {}
        done: dict[str, Any] = {}
        for duty in duties:
            t0 = clock()
            done.update(maintenance.run_due([duty], force=True))
            timings[duty.name] = clock() - t0
        expired = int(done.get("expire") or 0)
        if expired:
            with shared.expired.get_lock():
                shared.expired.value += expired
        actions = [str(a) for a in done.get("partitions") or []]
        runs.append(
            {
                "at": started,
                "seconds": timings,
                "actions": actions,
                "pruned": int((done.get("retention") or {}).get("archive_pruned", 0)),
                "expired": expired,
            }
        )
        out.write_text(json.dumps(runs))
        with shared.upkeeps.get_lock():
            shared.upkeeps.value += 1
        shared.stop.wait(max(0.0, args.upkeep_interval - (clock() - started)))


# -- sampling ----------------------------------------------------------------------------------

SIZES = """
SELECT coalesce(sum(pg_total_relation_size(relid)), 0)
FROM pg_partition_tree(%s::regclass) WHERE isleaf
"""
LIVE_RANGES = """
SELECT count(*) FROM pg_partition_tree('pgq_message'::regclass)
WHERE isleaf AND relid <> 'pgq_message_default'::regclass
"""
STATS = """
SELECT relid, relname, n_live_tup, n_dead_tup, autovacuum_count, vacuum_count
FROM pg_stat_user_tables WHERE relname LIKE 'pgq_message%%' OR relname LIKE 'pgq_archived%%'
"""


def _rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


class Sampler:
    """Sizes, table statistics and memory, every few seconds, from the parent."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self.rows: list[dict[str, Any]] = []
        self.autovacuums: dict[int, int] = {}  # per relation, kept after it is dropped

    def sizes(self) -> tuple[int, int]:
        live = self.conn.execute(SIZES, ["pgq_message"]).fetchone()[0]  # type: ignore[index]
        archive = self.conn.execute(SIZES, ["pgq_archived_message"]).fetchone()[0]  # type: ignore[index]
        return int(live), int(archive)

    def take(self, shared: Shared, pids: dict[str, int], started: float) -> dict[str, Any]:
        live, archive = self.sizes()
        dead = {"live": 0, "archive": 0}
        archive_rows = 0
        partitions = self.conn.execute(LIVE_RANGES).fetchone()[0]  # type: ignore[index]
        for relid, name, n_live, n_dead, autovacuums, _ in self.conn.execute(STATS):
            kind = "archive" if name.startswith("pgq_archived") else "live"
            dead[kind] += n_dead
            if kind == "archive":
                archive_rows += n_live
            self.autovacuums[relid] = max(self.autovacuums.get(relid, 0), autovacuums)
        row = {
            "t": clock() - started,
            "acked": shared.acked.value,
            "sent": shared.sent.value,
            "live_bytes": live,
            "archive_bytes": archive,
            "archive_rows_estimate": archive_rows,
            "dead_live": dead["live"],
            "dead_archive": dead["archive"],
            "autovacuum_runs": sum(self.autovacuums.values()),
            "live_partitions": partitions,
            "rss_kib": {name: _rss_kib(pid) for name, pid in pids.items()},
        }
        self.rows.append(row)
        return row


# -- the run -----------------------------------------------------------------------------------


def _wait_for(condition: Any, shared: Shared, procs: list[Any], tick: Any) -> bool:
    """Call ``tick`` until ``condition()``; False when a child died or a stop was asked."""
    while not condition():
        if shared.stop.is_set():
            return False
        dead = [p for p in procs if p.exitcode not in (None, 0)]
        if dead:
            print(f"a process failed: {dead[0].name} exit code {dead[0].exitcode}", flush=True)
            return False
        tick()
    return True


def run(args: argparse.Namespace) -> dict[str, Any]:
    from django.db import connections

    from pgq_django.store.notify import close_all

    setup(args)
    conn = psycopg.connect(**_params(), autocommit=True)
    sampler = Sampler(conn)
    fresh_live, _ = sampler.sizes()
    connections.close_all()
    close_all()

    ctx = multiprocessing.get_context("fork")
    shared = Shared(ctx)
    work = Path(tempfile.mkdtemp(prefix="pgq_soak_"))
    procs = [
        ctx.Process(target=producer, args=(args, shared, work / "producer.json"), name="producer")
    ]
    procs += [
        ctx.Process(target=consumer, args=(args, shared, work / f"c{i}.json"), name=f"consumer{i}")
        for i in range(args.consumers)
    ]
    procs.append(
        ctx.Process(target=upkeep, args=(args, shared, work / "upkeep.json"), name="upkeep")
    )

    def stop(signum: int, frame: Any) -> None:
        print("\nstopping…", flush=True)
        shared.stop.set()

    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    started = clock()
    for proc in procs:
        proc.start()
    pids = {p.name: p.pid for p in procs if p.pid is not None}
    total = args.messages
    last_print = [0.0]

    def tick() -> None:
        row = sampler.take(shared, pids, started)
        if row["t"] - last_print[0] >= args.progress_every:
            last_print[0] = row["t"]
            rate = row["acked"] / row["t"] if row["t"] else 0.0
            print(
                f"[{row['t']:7.0f}s] acked {row['acked']:>10,}/{total:,} ({rate:,.0f}/s)  "
                f"live {row['live_bytes'] / 2**20:7.1f} MiB in {row['live_partitions']} "
                f"partitions  archive {row['archive_bytes'] / 2**20:7.1f} MiB  "
                f"dead {row['dead_live']:,}",
                flush=True,
            )
        shared.stop.wait(args.sample_every)

    def drained(goal: int) -> int | None:
        """The live tables' size once ``goal`` messages are done and upkeep has run after."""
        if not _wait_for(
            lambda: shared.acked.value + shared.expired.value >= goal, shared, procs, tick
        ):
            return None
        runs = shared.upkeeps.value
        if not _wait_for(lambda: shared.upkeeps.value >= runs + 2, shared, procs, tick):
            return None
        return sampler.sizes()[0]

    drained_tenth = drained(total // TENTHS)
    shared.resume.set()
    drained_end = drained(total) if drained_tenth is not None else None
    ok = drained_end is not None
    elapsed = clock() - started
    sampler.take(shared, pids, started)
    shared.stop.set()
    for proc in procs:
        proc.join(timeout=120)
        if proc.is_alive():
            proc.terminate()
            proc.join()
    for sig, handler in previous.items():
        signal.signal(sig, handler)
    return report_of(args, work, sampler, conn, fresh_live, drained_tenth, drained_end, elapsed, ok)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    def positive(value: str) -> int:
        number = int(value)
        if number <= 0:
            raise argparse.ArgumentTypeError("must be a positive integer")
        return number

    parser = argparse.ArgumentParser(
        prog="python -m bench.soak", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--messages", type=positive, default=1_000_000)
    parser.add_argument("--consumers", type=positive, default=4)
    parser.add_argument("--partition-size", type=positive, default=100_000)
    parser.add_argument(
        "--no-partitions",
        action="store_true",
        help="one range wide enough for every id: the comparison run",
    )
    parser.add_argument(
        "--default-autovacuum",
        action="store_true",
        help="live partitions without LIVE_PARTITION_STORAGE (PostgreSQL's autovacuum defaults)",
    )
    parser.add_argument("--batch", type=positive, default=100, help="messages per send_batch")
    parser.add_argument("--qty", type=positive, default=10, help="messages per read")
    parser.add_argument(
        "--backlog",
        type=positive,
        default=5_000,
        help="most messages queued at once (the producer waits)",
    )
    parser.add_argument("--body-bytes", type=int, default=100)
    parser.add_argument(
        "--retention",
        type=positive,
        default=120,
        help="the queue's retention, seconds: how long the archive keeps rows",
    )
    parser.add_argument("--upkeep-interval", type=float, default=5.0)
    parser.add_argument("--sample-every", type=float, default=2.0)
    parser.add_argument("--progress-every", type=float, default=30.0)
    parser.add_argument("--json", type=Path, help="write the report here")
    parser.add_argument("--png", type=Path, help="plot throughput, latency and size here")
    parser.add_argument("--compare", type=Path, help="an earlier --json to overlay on the plot")
    parser.add_argument(
        "--replot", type=Path, help="run nothing: plot this --json (with --png, --compare)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: 20,000 messages, ranges of 2,000"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.messages, args.partition_size, args.upkeep_interval = 20_000, 2_000, 1.0
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.replot:
        compare = json.loads(args.compare.read_text()) if args.compare else None
        plot(json.loads(args.replot.read_text()), args.png or Path("soak.png"), compare)
        return 0
    report = run(args)
    print_report(report)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1))
        print(f"results: {args.json}")
    if args.png:
        compare = json.loads(args.compare.read_text()) if args.compare else None
        plot(report, args.png, compare)
        print(f"plot: {args.png}")
    counts = report["counts"]
    exact = (
        report["completed"]
        and counts["sent"] == counts["acked"] + counts["expired"] == args.messages
        and counts["left_in_queue"] == 0
        and counts["sent_id_sum_equals_acked_id_sum"]
        and counts["archived_accounted"]
    )
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
