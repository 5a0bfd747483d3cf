"""CPU per message of bench.core's single-consumer cases: pgq_django vs PGMQ, client and server.

``python -m bench.core`` reports wall-clock throughput, which on a shared machine also
measures how long each contender waited for a core. This module runs the same cases
(``send``, ``send_batch(100)``, read+delete with qty 1 and qty 100, one consumer) with the
same contenders and counts the CPU each side spends per message instead: the client is
this process (``time.process_time()``, every thread: the wake-up and counter threads
count too), the server is the contender's PostgreSQL backend (its ``utime + stime`` from
``/proc``, in clock ticks of 10 ms, so a round needs some thousands of messages). Rounds
alternate which contender goes first; the table shows medians of the rounds.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from . import common
from .core import CASES, Case, Contender, create_queues, drop_queues, install_pgmq, make, measure
from .core import reset as reset_queue
from .cputime import process_seconds

NAMES = ("pgq", "pgmq")
KEYS = ("send", "send_batch", "read1", "read100")


def _backend_pid(contender: Contender) -> int:
    """The PostgreSQL backend serving the contender's statements."""
    if contender.name.startswith("pgmq"):
        return int(contender.conn.info.backend_pid)  # type: ignore[attr-defined]
    from django.db import connections

    connections["default"].ensure_connection()
    return int(connections["default"].connection.info.backend_pid)


def _cpu(case: Case, contender: Contender, n: int) -> tuple[float, float | None]:
    """(client µs, server µs or None) per message of one contender doing one case once."""
    pid = _backend_pid(contender)
    server = process_seconds(pid)
    client = time.process_time()
    measure(case, contender, n)
    client = time.process_time() - client
    after = process_seconds(pid)
    on_server = None if server is None or after is None else (after - server) / n * 1e6
    return client / n * 1e6, on_server


def main(argv: Sequence[str] | None = None) -> int:
    args = common.arguments(__doc__.splitlines()[0], argv)
    rounds = args.rounds or (3 if args.quick else 5)
    common.setup()
    admin = common.connect()
    install_pgmq(admin)
    create_queues(admin, NAMES)
    contenders = {name: make(name) for name in NAMES}
    cases = [c for c in CASES if c.key in KEYS]
    print(f"bench.core_cpu: {rounds} rounds per case", flush=True)
    found: dict[str, dict[str, list[tuple[float, float | None]]]] = {}
    try:
        for case in cases:
            n = case.size(args.quick)
            print(f"  {case.title}: {rounds} rounds of {n} messages …", flush=True)
            for r in range(rounds):
                for name in NAMES if r % 2 == 0 else tuple(reversed(NAMES)):
                    reset_queue(admin, name, fill=n if case.kind == "drain" else 0)
                    found.setdefault(case.key, {}).setdefault(name, []).append(
                        _cpu(case, contenders[name], n)
                    )
    finally:
        drop_queues(admin, NAMES)
    rows, summary = _report(cases, found)
    common.print_table(
        "CPU µs per message (median of rounds): client = this process, "
        "server = the contender's PostgreSQL backend",
        [
            "case",
            "pgq client",
            "pgq server",
            "PGMQ client",
            "PGMQ server",
            "client pgq/PGMQ",
            "total pgq/PGMQ",
        ],
        rows,
    )
    path = common.write_results(
        "core-cpu-quick" if args.quick else "core-cpu",
        {"rounds": rounds, "quick": args.quick, "rounds_us": found, "summary": summary},
    )
    print(f"\nresults: {path}")
    return 0


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _report(
    cases: list[Case], found: dict[str, dict[str, list[tuple[float, float | None]]]]
) -> tuple[list[list[str]], dict[str, Any]]:
    rows = []
    summary: dict[str, Any] = {}
    for case in cases:
        per = found.get(case.key, {})
        pc = _median([c for c, _s in per.get("pgq", [])])
        ps = _median([s for _c, s in per.get("pgq", [])])
        mc = _median([c for c, _s in per.get("pgmq", [])])
        ms = _median([s for _c, s in per.get("pgmq", [])])
        client = pc / mc if pc and mc else None
        total = None
        if pc is not None and ps is not None and mc is not None and ms is not None and mc + ms:
            total = (pc + ps) / (mc + ms)
        summary[case.key] = {"pgq": [pc, ps], "pgmq": [mc, ms], "client": client, "total": total}
        rows.append(
            [
                case.title,
                common.fmt(pc, 1),
                common.fmt(ps, 1),
                common.fmt(mc, 1),
                common.fmt(ms, 1),
                common.fmt(client),
                common.fmt(total),
            ]
        )
    return rows, summary


if __name__ == "__main__":
    sys.exit(main())
