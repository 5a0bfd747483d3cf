"""Where a single send and a single read+delete spend their time behind PgBouncer.

``python -m bench.pooler`` reports throughput, which on a shared 2-core machine also measures
how long each process in the chain waited for a core. This module runs bench.pooler's two
single-message cases (``send``, read+delete qty 1) with the same contenders, on the same
transports, and counts the CPU each process of the chain spends per message: the client
(this process, every thread), PgBouncer (its one process) and PostgreSQL (every process of
the server: the backend serving the contender, whichever one PgBouncer hands out, and the
WAL writer and the rest that a commit keeps busy), from ``/proc`` in clock ticks of 10 ms,
so a round needs some thousands of messages. The wall-clock µs per message beside them,
less the CPU of the three, is the time the chain spent waiting: on the wire, in wake-ups,
and for a core. Rounds rotate which contender goes first; the table shows medians.

Run: ``python -m bench.pooler_cpu`` (``--quick``, ``--rounds N``); the server as for
bench.pooler.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Sequence

from . import common, pooler
from .cputime import process_seconds

CASES = {c.key: c for c in pooler.CASES if c.key in ("send", "read_delete_1")}
SIZES = {"send": (3000, 200), "read_delete_1": (2000, 100)}  # (full, quick)
PARTS = ("client", "pgbouncer", "server", "wall")


def _server_pids() -> list[int]:
    """Every process of the PostgreSQL server (the postmaster's children and itself)."""
    import psutil

    with common.connect() as conn:
        backend = int(conn.info.backend_pid)
        postmaster = psutil.Process(backend).parent()
    assert postmaster is not None
    return [postmaster.pid, *(child.pid for child in postmaster.children())]


def _snapshot(pids: list[int]) -> dict[int, float]:
    return {pid: seconds for pid in pids if (seconds := process_seconds(pid)) is not None}


def _spent(before: dict[int, float], pids: list[int]) -> float:
    """CPU seconds ``pids`` spent since ``before``: a process that exited meanwhile counts
    nothing (summing totals instead would subtract its whole life), one that started counts
    from its start."""
    after = _snapshot(pids)
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())


def _cpu(case: pooler.Case, name: str, n: int, bouncer: int) -> dict[str, float]:
    """µs per message of each part of the chain, contender ``name`` doing ``case`` once."""
    server = _server_pids()  # backends come and go: the ones alive at the start and end
    before = {"server": _snapshot(server), "pgbouncer": _snapshot([bouncer])}
    client = time.process_time()
    wall = n / pooler.measure(case, name, n)
    client = time.process_time() - client
    server = sorted(set(server) | set(_server_pids()))
    spent = {
        "server": _spent(before["server"], server),
        "pgbouncer": _spent(before["pgbouncer"], [bouncer]),
    }
    us = {key: seconds / n * 1e6 for key, seconds in spent.items()}
    return {"client": client / n * 1e6, **us, "wall": wall / n * 1e6}


def main(argv: Sequence[str] | None = None) -> int:
    import pgq_django as pgq

    args = common.arguments(__doc__.splitlines()[0], argv)
    rounds = args.rounds or (3 if args.quick else 5)
    found: dict[str, dict[str, list[dict[str, float]]]] = {}
    with pooler.running() as notes:
        names = list(pooler.CONTENDERS)
        for name in names:
            with contextlib.suppress(pgq.QueueAlreadyExists):
                pgq.create_queue(pooler.queue_for(name))
        try:
            for key, case in CASES.items():
                n = SIZES[key][1 if args.quick else 0]
                print(f"  {case.title}: {rounds} rounds of {n} messages …", flush=True)
                for r in range(rounds):
                    shift = r % len(names)
                    for name in names[shift:] + names[:shift]:
                        pooler.reset(name, fill=n if case.kind == "drain" else 0)
                        found.setdefault(key, {}).setdefault(name, []).append(
                            _cpu(case, name, n, pooler.BOUNCER_PID)
                        )
        finally:
            for name in names:
                pgq.drop_queue(pooler.queue_for(name))
    rows = []
    for key, case in CASES.items():
        for name in names:
            values = found[key][name]
            cells = {part: common.median(v[part] for v in values) for part in PARTS}
            waited = cells["wall"] - cells["client"] - cells["pgbouncer"] - cells["server"]
            rows.append(
                [
                    case.title,
                    name,
                    *(common.fmt(cells[part], 0) for part in PARTS),
                    common.fmt(waited, 0),
                ]
            )
    common.print_table(
        f"µs per message (median of {rounds} rounds): CPU of the client, PgBouncer and "
        "PostgreSQL; wall clock; and wall less the three (waiting)",
        ["case", "contender", *PARTS, "waiting"],
        rows,
    )
    path = common.write_results(
        "pooler-cpu-quick" if args.quick else "pooler-cpu",
        {"rounds": rounds, "quick": args.quick, "notes": notes, "us": found, "table": rows},
    )
    fewest = min(SIZES[key][1 if args.quick else 0] for key in CASES)
    tick = 1e4 / fewest  # µs per message that one 10 ms clock tick is worth
    print(
        f"\n/proc counts in 10 ms ticks: the PgBouncer and server columns are each within "
        f"±{tick:.0f} µs per message here, so waiting, what is left of the wall time, "
        f"can read below zero by up to {2 * tick:.0f} µs"
    )
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
