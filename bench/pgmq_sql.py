"""The PGMQ SQL interface vs real PGMQ: the official ``pgmq`` client against both, side by side.

Two databases on the benchmark server:

- ``pgq_bench_pgmq_ours``: pgq_django migrated with ``PGQ["PGMQ_SCHEMA"] = "pgmq"``, so
  schema ``pgmq`` holds our functions over pgq_django's tables;
- ``pgq_bench_pgmq_real``: PGMQ 1.13.0 installed from the SQL the ``pgmq`` package bundles
  (no extension), PGMQ's own tables.

The same client code (``pgmq.PGMQueue``, extension initialisation off, one pooled
connection) runs each case on both, the two taking turns of a few calls each (see
:data:`TURN`), so that both meet the same drift of the machine: ``send``,
``send_batch(100)``, ``read`` + ``delete`` of one message, and the wake-up of a waiting
``read_with_poll`` (``poll_interval_ms=10``) by a send from another connection. Each case
runs on a queue made for it on both sides. A round's ratio is ours / PGMQ's throughput (for
the wake-up: PGMQ's latency / ours), so above 1.0 means the interface is faster; a case
reports the median of its rounds' ratios.

With ``--queues N`` it first creates N more queues on each side and prints what that
costs: creation rate, a send+read+delete on one queue before and after, ``metrics_all``,
and how much the catalog grew (PGMQ makes two tables, their indexes and a sequence per
queue; the interface makes a row and two views).

Run: ``python -m bench.pgmq_sql`` (``--quick`` for a smoke run, ``--rounds N``,
``--queues N``).
"""

from __future__ import annotations

import contextlib
import random
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from . import common

BODY = {"event": "order.created", "order_id": 12345, "items": ["a", "b", "c"], "note": "x" * 64}
OURS_DB = "pgq_bench_pgmq_ours"
REAL_DB = "pgq_bench_pgmq_real"
QUEUE = "bench_pgmq"


def _server() -> dict[str, Any]:
    """The Django database dict of the benchmark server, on our database."""
    db = common._bench_database()
    db["NAME"] = OURS_DB
    return db


def _conninfo(db: dict[str, Any], name: str) -> str:
    return psycopg.conninfo.make_conninfo(
        dbname=name,
        user=db.get("USER") or None,
        password=db.get("PASSWORD") or None,
        host=db.get("HOST") or None,
        port=str(db["PORT"]) if db.get("PORT") else None,
    )


def setup() -> tuple[str, str]:
    """Both databases ready, each with an empty queue; their conninfos (ours, real)."""
    import django
    from django.conf import settings

    db = _server()
    admin = _conninfo(db, "postgres")
    # Both start empty: PGMQ's side makes its queue's tables afresh, and ours would
    # otherwise inherit the bloat earlier runs left in the shared message and counter tables
    # (no upkeep runs here to drop drained partitions and fold counters).
    for name in (OURS_DB, REAL_DB):
        common.fresh_database(admin, name)
    if not settings.configured:
        settings.configure(
            DEBUG=False,
            USE_TZ=True,
            SECRET_KEY="bench-only-not-secret",
            INSTALLED_APPS=["django.contrib.auth", "django.contrib.contenttypes", "pgq_django"],
            DATABASES={"default": db},
            DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
            PGQ={"PGMQ_SCHEMA": "pgmq"},
        )
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    ours, real = _conninfo(db, OURS_DB), _conninfo(db, REAL_DB)
    with psycopg.connect(real) as conn:
        if conn.execute("SELECT to_regproc('pgmq.format_table_name')").fetchone() == (None,):
            from pgmq.install import get_embedded_install_sql

            conn.execute(get_embedded_install_sql())  # type: ignore[arg-type]
    for dsn in (ours, real):
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SELECT pgmq.drop_queue(%s)", [QUEUE])
            conn.execute("SELECT pgmq.create(%s)", [QUEUE])
    common.close_django_connections()
    # Making two databases and migrating one leaves much to flush: flush it now, so that
    # the first rounds' commits do not queue behind it (a role without the right skips this).
    with (
        psycopg.connect(admin, autocommit=True) as conn,
        contextlib.suppress(psycopg.errors.InsufficientPrivilege),
    ):
        conn.execute("CHECKPOINT")
    return ours, real


class Side:
    """The official client on one database, with one pooled connection."""

    def __init__(self, dsn: str) -> None:
        from pgmq import PGMQueue
        from psycopg_pool import ConnectionPool

        self.dsn = dsn
        self.pool = ConnectionPool(dsn, min_size=1, max_size=1, open=True)
        self.client = PGMQueue(pool=self.pool, init_extension=False)
        self.queue = QUEUE

    def close(self) -> None:
        self.pool.close()

    def fresh_queue(self, name: str) -> None:
        """Make ``name`` the queue the cases use on this side, created empty."""
        self.client.drop_queue(name)
        self.client.create_queue(name)
        self.queue = name

    def drop_queue(self) -> None:
        """Drop the case's queue and vacuum what it leaves: the vacuum autovacuum would run
        soon after, run here so that it does not land in the next case's rounds."""
        self.client.drop_queue(self.queue)
        self.queue = QUEUE
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("VACUUM")


def _rate(n: int, fn: Callable[[], Any]) -> float:
    """Operations per second of ``n`` calls of ``fn``."""
    start = common.clock()
    for _ in range(n):
        fn()
    return n / (common.clock() - start)


# How many calls each side makes before the other takes its turn. The machine's commit
# latency drifts by tens of percent within a second; short alternating turns put both sides
# under the same drift, where whole rounds one after the other would not.
TURN = 20


def _alternating(
    sides: dict[str, Side], n: int, call: Callable[[Side], Any], turn: int = TURN
) -> dict[str, float]:
    """Calls per second of each side over ``n`` calls of ``call``, made in turns of
    ``turn`` calls that alternate between the sides (the first to go alternates too)."""
    spent = dict.fromkeys(sides, 0.0)
    names = list(sides)
    for i in range(max(1, n // turn)):
        for name in names if i % 2 == 0 else names[::-1]:
            side = sides[name]
            start = common.clock()
            for _ in range(turn):
                call(side)
            spent[name] += common.clock() - start
    return {name: max(1, n // turn) * turn / spent[name] for name in names}


def case_send(sides: dict[str, Side], n: int) -> dict[str, float]:
    return _alternating(sides, n, lambda side: side.client.send(side.queue, BODY))


def case_send_batch(sides: dict[str, Side], n: int) -> dict[str, float]:
    batch = [BODY] * 100
    rates = _alternating(sides, max(1, n // 20), lambda s: s.client.send_batch(s.queue, batch), 2)
    return {name: 100 * rate for name, rate in rates.items()}


def case_read_delete(sides: dict[str, Side], n: int) -> dict[str, float]:
    for side in sides.values():
        side.client.send_batch(side.queue, [BODY] * n)  # untimed fill

    def one(side: Side) -> None:
        message = side.client.read(side.queue, vt=30)
        side.client.delete(side.queue, message.msg_id)

    return _alternating(sides, n, one)


def _wait(side: Side, returned: list[Any]) -> None:
    """Wait for one message by polling, and note when it came and what it was."""
    got = side.client.read_with_poll(
        side.queue, vt=30, qty=1, max_poll_seconds=5, poll_interval_ms=10
    )
    returned.append(common.clock())
    returned.append(got)


def _wake_up(side: Side, sender: Any, pause: float) -> float:
    """Seconds from a send's start to the return of the ``read_with_poll`` it wakes. The
    message is then deleted (untimed), as a consumer would once done with it: left leased,
    every later poll of the round would step over it."""
    returned: list[Any] = []
    waiter = threading.Thread(target=_wait, args=(side, returned))
    waiter.start()
    time.sleep(pause)
    sent_at = common.clock()
    sender.send(side.queue, BODY)
    waiter.join()
    woke_at, got = returned
    for message in got or []:
        side.client.delete(side.queue, message.msg_id)
    return float(woke_at - sent_at)


def _trimmed_mean(values: Sequence[float], cut: float = 0.05) -> float:
    """The mean without the lowest and highest ``cut`` of the values."""
    ordered = sorted(values)
    k = int(len(ordered) * cut)
    return statistics.fmean(ordered[k : len(ordered) - k])


def case_wake_up(sides: dict[str, Side], n: int) -> dict[str, float]:
    """Wake-ups per second: 1 / the mean latency from a send's start to the return of a
    waiting ``read_with_poll`` (polling every 10 ms, as tight as a client would set it).
    The sides take turns, one wake-up each, with the same pause before each send.

    A send lands anywhere in the 10 ms cycle, so latencies spread evenly over it: their
    mean (the expected wake-up, less the 5 % at each end, a stall of the machine's) settles
    with far fewer samples than their median, which a flat spread leaves loose."""
    from pgmq import PGMQueue
    from psycopg_pool import ConnectionPool

    latencies: dict[str, list[float]] = {name: [] for name in sides}
    phases = random.Random(n)
    names = list(sides)
    with contextlib.ExitStack() as stack:
        senders = {
            name: PGMQueue(
                pool=stack.enter_context(
                    ConnectionPool(side.dsn, min_size=1, max_size=1, open=True)
                ),
                init_extension=False,
            )
            for name, side in sides.items()
        }
        for i in range(max(5, n // 5)):
            # Let the poll start (set-up, not latency), then send at a random point of its
            # 10 ms cycle: a fixed pause would meet each side's loop at a fixed phase, and
            # the median would measure where that phase fell rather than the wake-up.
            pause = 0.025 + phases.uniform(0, 0.01)
            for name in names if i % 2 == 0 else names[::-1]:
                latencies[name].append(_wake_up(sides[name], senders[name], pause))
    return {name: 1 / _trimmed_mean(values) for name, values in latencies.items()}


CASES: dict[str, tuple[str, Callable[[dict[str, Side], int], dict[str, float]]]] = {
    "send": ("send, one message", case_send),
    "send_batch": ("send_batch(100), messages/s", case_send_batch),
    "read_delete": ("read + delete, one message", case_read_delete),
    "wake_up": ("read_with_poll woken by a send", case_wake_up),
}


# What the catalog holds, for the many-queues case: PGMQ makes two tables, their indexes
# and a sequence per queue; the interface makes two views.
CATALOG = """
SELECT (SELECT count(*) FROM pg_class) AS relations,
       pg_total_relation_size('pg_class') + pg_total_relation_size('pg_attribute')
       + pg_total_relation_size('pg_depend') + pg_total_relation_size('pg_rewrite')
       + pg_total_relation_size('pg_type') AS catalog_bytes
"""


def _many_queues(side: Side, count: int, ops: int) -> dict[str, Any]:
    """Create ``count`` more queues on ``side`` and measure what changes (see main)."""
    with side.pool.connection() as conn:
        before = conn.execute(CATALOG).fetchone()
    base = {
        "send_read_delete_per_s_before": _send_read_delete(side, ops),
    }
    try:
        start = common.clock()
        for i in range(count):
            side.client.create_queue(f"{QUEUE}_{i}")
        created = common.clock() - start
        with side.pool.connection() as conn:
            after = conn.execute(CATALOG).fetchone()
        metrics_all: float | str
        try:
            start = common.clock()
            seen = float(len(side.client.metrics_all()))
            metrics_all = common.clock() - start
        except psycopg.Error as exc:  # PGMQ's locks every queue table in one transaction
            seen, metrics_all = 0.0, f"failed: {exc.diag.message_primary}"
        return {
            "create_per_s": count / created,
            **base,
            "send_read_delete_per_s_after": _send_read_delete(side, ops),
            "metrics_all_s": metrics_all,
            "queues_seen": seen,
            "relations_added": float(after[0] - before[0]),
            "catalog_mb_added": (after[1] - before[1]) / 2**20,
        }
    finally:
        for i in range(count):
            side.client.drop_queue(f"{QUEUE}_{i}")


def _send_read_delete(side: Side, ops: int) -> float:
    """Sends, reads and deletes of one message on QUEUE per second."""

    def one() -> None:
        side.client.send(QUEUE, BODY)
        message = side.client.read(QUEUE, vt=30)
        side.client.delete(QUEUE, message.msg_id)

    return _rate(ops, one)


def _cell(value: Any) -> str:
    return value if isinstance(value, str) else common.fmt(value)


def many_queues_table(sides: dict[str, Side], count: int, ops: int) -> dict[str, Any]:
    """PGMQ and the interface with ``count`` queues more: creation rate, the cost of a call
    on one queue before and after, metrics_all, and what the catalog grew by."""
    found = {name: _many_queues(side, count, ops) for name, side in sides.items()}
    labels = {
        "create_per_s": "queues created /s",
        "send_read_delete_per_s_before": f"send+read+delete /s, {count} fewer queues",
        "send_read_delete_per_s_after": f"send+read+delete /s, {count} more queues",
        "metrics_all_s": "metrics_all, seconds",
        "queues_seen": "queues metrics_all lists",
        "relations_added": "relations added to pg_class",
        "catalog_mb_added": "catalog growth, MiB",
    }
    common.print_table(
        f"{count} more queues, through the pgmq client",
        ["measure", "PGMQ", "ours"],
        [[label, _cell(found["pgmq"][k]), _cell(found["ours"][k])] for k, label in labels.items()],
    )
    return found


def main(argv: Sequence[str] | None = None) -> int:
    args = common.arguments(
        __doc__.splitlines()[0],
        argv,
        extra=lambda p: p.add_argument(
            "--queues",
            type=int,
            default=None,
            help="also create this many queues on each side and compare (10000 as the issue asks)",
        ),
    )
    rounds = args.rounds or (3 if args.quick else 7)
    n = 50 if args.quick else 1000
    ours_dsn, real_dsn = setup()
    sides = {"ours": Side(ours_dsn), "pgmq": Side(real_dsn)}
    rows, results = [], {}
    scale: dict[str, Any] = {}
    try:
        if args.queues:
            scale = many_queues_table(sides, args.queues, 50 if args.quick else 300)
        for key, (label, measure) in CASES.items():
            # Each case on a queue of its own, made for it on both sides. Between cases PGMQ
            # would truncate its queue's table on purge, where ours deletes the rows from
            # tables all queues share: the next case's reads would step over the dead
            # entries until a vacuum, and its inserts, after one, fill the pages it freed.
            # A new queue keeps both sides on what the case itself does. A first round
            # warms both up (plans, buffers) and is not counted.
            for side in sides.values():
                side.fresh_queue(f"{QUEUE}_{key}")
            measure(sides, n)  # a warm-up round, not counted
            values: dict[str, list[float]] = {name: [] for name in sides}
            for _ in range(rounds):
                for name, rate in measure(sides, n).items():
                    values[name].append(rate)
            for side in sides.values():
                side.drop_queue()
            ours, real = common.median(values["ours"]), common.median(values["pgmq"])
            # The sides took turns within each round, so a round's two rates met the same
            # machine: the ratio is the median of the rounds' own ratios, not a ratio of
            # medians taken from different rounds.
            pairs = zip(values["ours"], values["pgmq"], strict=True)
            ratio = common.median([o / p for o, p in pairs])
            results[key] = {"ours": values["ours"], "pgmq": values["pgmq"], "ratio": ratio}
            rows.append([label, common.fmt(real, 0), common.fmt(ours, 0), common.fmt(ratio)])
    finally:
        for side in sides.values():
            side.close()
    common.print_table(
        f"The pgmq client: our PGMQ SQL interface vs PGMQ 1.13.0's SQL (median of {rounds} "
        f"rounds, {n} operations each; ratio = the median of each round's ours / PGMQ, "
        "higher is faster)",
        ["case", "PGMQ /s", "ours /s", "ratio"],
        rows,
    )
    common.write_results(
        "pgmq_sql", {"rounds": rounds, "n": n, "cases": results, "many_queues": scale}
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
