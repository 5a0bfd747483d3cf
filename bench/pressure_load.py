"""The parts of ``bench.pressure`` that run beside the load: the worker leader's upkeep, the
REPEATABLE READ readers, the pin, and the sampler of dead tuples and sizes."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import psycopg

from . import loadgen
from .common import clock

QUEUE = "pressure"
PGMQ_TABLE = f"pgmq.q_{QUEUE}"
READERS = 4


def params() -> dict[str, Any]:
    from pgq_django.store.notify import connection_params

    return dict(connection_params())


# -- the side processes: upkeep, readers -------------------------------------------------------


def upkeep(interval: float, started: float, stop: Any, out: Path) -> None:
    """The worker leader's duties every ``interval`` seconds; each run's start, length and
    partition actions go to ``out``."""
    loadgen.quiet_signals()
    from pgq_django.worker import maintenance

    duties = maintenance.default_duties(interval)
    runs: list[dict[str, Any]] = []
    while not stop.is_set():
        t0 = clock()
        done = maintenance.run_due(duties, force=True)
        actions = [str(a) for a in done.get("partitions") or []]
        runs.append({"t": t0 - started, "seconds": clock() - t0, "actions": actions})
        out.write_text(json.dumps(runs))
        stop.wait(max(0.0, interval - (clock() - t0)))


def reader(index: int, hold: float, stop: Any) -> None:
    """A REPEATABLE READ transaction scanning both queue tables every two seconds, begun
    anew every ``hold`` seconds; readers start ``hold / 4`` apart."""
    loadgen.quiet_signals()
    if stop.wait(index * hold / READERS):
        return
    conn = psycopg.connect(**params())
    conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    while not stop.is_set():
        began = clock()
        while not stop.is_set() and clock() - began < hold:
            conn.execute("SELECT count(*), max(enqueued_at) FROM pgq_message").fetchone()
            conn.execute(f"SELECT count(*), max(enqueued_at) FROM {PGMQ_TABLE}").fetchone()
            stop.wait(2.0)
        conn.commit()
    conn.close()


# -- sampling ----------------------------------------------------------------------------------

PGQ_STATS = """
SELECT coalesce(sum(s.n_dead_tup), 0), coalesce(sum(s.n_live_tup), 0),
       coalesce(sum(pg_total_relation_size(t.relid)), 0)
FROM pg_partition_tree('pgq_message'::regclass) t
LEFT JOIN pg_stat_user_tables s ON s.relid = t.relid
WHERE t.isleaf
"""
PGMQ_STATS = f"""
SELECT n_dead_tup, n_live_tup, pg_total_relation_size(relid)
FROM pg_stat_user_tables WHERE relid = '{PGMQ_TABLE}'::regclass
"""


class Sampler:
    """Dead tuples and sizes of each side's queue table, from a connection of its own."""

    def __init__(self) -> None:
        self.conn = psycopg.connect(**params(), autocommit=True)
        self.conn.execute("SET statement_timeout = '5s'")
        self.rows: list[dict[str, Any]] = []

    def take(self, t: float, phase: str, loads: dict[str, loadgen.Load]) -> None:
        row: dict[str, Any] = {"t": t, "phase": phase}
        try:
            for side, statement in (("pgq", PGQ_STATS), ("pgmq", PGMQ_STATS)):
                if side not in loads:
                    continue
                dead, live, size = self.conn.execute(statement).fetchone()  # type: ignore[misc]
                row[side] = {
                    "dead": int(dead),
                    "live": int(live),
                    "bytes": int(size),
                    "consumed": loads[side].consumed.value,
                }
        except psycopg.Error as exc:  # a busy catalog: skip this sample
            print(f"  (sample skipped: {exc.__class__.__name__})", flush=True)
            return
        self.rows.append(row)

    def close(self) -> None:
        self.conn.close()


class Fault:
    """The phase's fault, held for the ``with`` block: a pin or the readers (or nothing)."""

    def __init__(self, kind: str | None, ctx: Any, args: argparse.Namespace) -> None:
        self.kind, self.ctx, self.args = kind, ctx, args
        self.conn: psycopg.Connection[Any] | None = None
        self.stop: Any = None
        self.procs: list[Any] = []

    def __enter__(self) -> None:
        if self.kind == "pin":
            self.conn = psycopg.connect(**params())
            self.conn.execute("SELECT txid_current()")  # an xid: the horizon stays here
        elif self.kind == "readers":
            self.stop = self.ctx.Event()
            hold = self.args.reader_hold
            self.procs = [
                self.ctx.Process(target=reader, args=(i, hold, self.stop)) for i in range(READERS)
            ]
            for proc in self.procs:
                proc.start()

    def __exit__(self, *exc: object) -> None:
        if self.conn is not None:
            self.conn.rollback()
            self.conn.close()
        if self.stop is not None:
            self.stop.set()
            for proc in self.procs:
                proc.join(timeout=30)
