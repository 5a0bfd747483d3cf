"""Throughput behind PgBouncer in transaction mode vs a direct connection, in one run.

Three contenders run the same pgq_django API calls on the same database, interleaved round
by round (each on a queue of its own):

- ``direct``: Django's connection straight to PostgreSQL with the default settings
  (statements prepared once per connection);
- ``direct, unprepared``: the same connection with ``PREPARED_STATEMENTS = False``, to tell
  the two costs of a pooler apart;
- ``pgbouncer``: Django's connection through a PgBouncer in transaction mode that this
  benchmark starts in front of the same server, with the settings
  docs/howto/pgbouncer.md gives (``PREPARED_STATEMENTS = False``,
  ``DISABLE_SERVER_SIDE_CURSORS``, LISTEN on the direct connection).

Cases: ``send`` (one message per call, autocommit), ``send_batch`` (100 per call),
``read+delete`` with qty 1 and qty 100 (ack by receipt), and a worker drain (4 worker
processes running a no-op handler, each message leased, handled and acked in its own
transaction, as ``pgq_worker`` does). The headline is the median of the per-round ratios
pgbouncer / direct; the goal is at least 0.8.

Run: ``python -m bench.pooler`` (``--quick`` for a smoke run, ``--rounds N``). The server is
the embedded PostgreSQL in ``.pgdata/bench`` (database ``pgq_bench``), or the one
``DATABASE_URL`` names, which PgBouncer must be able to reach on the host or socket given.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from . import common
from .pgbouncer import PgBouncer, direct_url

BODY = {"event": "order.created", "order_id": 12345, "items": ["a", "b", "c"], "note": "x" * 64}
WORKER_PROCESSES = 4

# name -> (Django alias, PGQ settings over the defaults)
CONTENDERS: dict[str, tuple[str, dict[str, Any]]] = {
    "direct": ("default", {}),
    "direct, unprepared": ("default", {"PREPARED_STATEMENTS": False}),
    "pgbouncer": ("pooled", {"PREPARED_STATEMENTS": False}),
}


@dataclass(frozen=True)
class Case:
    key: str
    title: str
    kind: str  # send | send_batch | drain | worker
    qty: int
    full: int  # messages per round
    quick: int

    def size(self, quick: bool) -> int:
        return self.quick if quick else self.full


CASES = (
    Case("send", "send (1 per call)", "send", 1, 1000, 50),
    Case("send_batch", "send_batch (100 per call)", "send_batch", 100, 10_000, 200),
    Case("read_delete_1", "read+delete qty 1", "drain", 1, 1000, 50),
    Case("read_delete_100", "read+delete qty 100", "drain", 100, 10_000, 200),
    Case("worker", f"worker drain, {WORKER_PROCESSES} processes", "worker", 1, 4000, 100),
)


def queue_for(name: str) -> str:
    return "bench_pooler_" + name.replace(", ", "_")


def _settings(name: str) -> dict[str, Any]:
    """The PGQ settings of contender ``name`` (the LISTEN connection always goes direct)."""
    from django.conf import settings

    alias, extra = CONTENDERS[name]
    direct = dict(settings.DATABASES["default"])
    listen = {k: direct[k] for k in ("HOST", "PORT", "USER", "PASSWORD") if direct.get(k)}
    return {"DATABASE": alias, "LISTEN_CONNECTION": listen, **extra}


def _as(name: str) -> Any:
    from django.test import override_settings

    return override_settings(PGQ=_settings(name))


def configure(direct: dict[str, Any], pooled: dict[str, Any]) -> None:
    import django
    from django.conf import settings
    from django.core.management import call_command

    pooled = {**pooled, "DISABLE_SERVER_SIDE_CURSORS": True}
    settings.configure(
        DEBUG=False,
        USE_TZ=True,
        SECRET_KEY="bench-only-not-secret",
        INSTALLED_APPS=["django.contrib.auth", "django.contrib.contenttypes", "pgq_django"],
        DATABASES={"default": direct, "pooled": pooled},
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
    )
    django.setup()
    call_command("migrate", verbosity=0, interactive=False)


def reset(name: str, fill: int = 0) -> None:
    """Empty contender ``name``'s queue, put ``fill`` messages in it, vacuum and analyze the
    table (untimed, on the direct connection), so every contender starts alike."""
    import pgq_django as pgq

    queue = queue_for(name)
    pgq.purge_queue(queue)
    for start in range(0, fill, 1000):
        pgq.send_batch(queue, [BODY] * min(1000, fill - start))
    with common.connect() as admin:
        admin.execute("VACUUM (ANALYZE) pgq_message")


def drain(queue: str, qty: int) -> int:
    import pgq_django as pgq

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


def _worker(name: str) -> Callable[[], int]:
    """In a worker process: settle on the contender's settings, connect, return the drain."""
    from django.db import connections

    from pgq_django.worker.loop import Worker
    from pgq_django.worker.registry import Handler

    _as(name).enable()
    alias, _ = CONTENDERS[name]
    connections[alias].ensure_connection()
    queue = queue_for(name)
    handled = [0]

    def count(message: Any) -> None:
        handled[0] += 1

    worker = Worker(handlers={queue: Handler(queue, count)}, once=True, lead=False)

    def run() -> int:
        while worker.work_once():
            pass
        return handled[0]

    return run


def measure(case: Case, name: str, n: int) -> float:
    """Messages per second of contender ``name`` doing ``case`` once."""
    import pgq_django as pgq

    queue = queue_for(name)
    if case.kind == "worker":
        elapsed, counts = common.run_processes(WORKER_PROCESSES, _worker, name)
        done = sum(counts)
    else:
        with _as(name):
            start = common.clock()
            if case.kind == "send":
                for _ in range(n):
                    pgq.send(queue, BODY)
                done = n
            elif case.kind == "send_batch":
                batch = [BODY] * case.qty
                for _ in range(n // case.qty):
                    pgq.send_batch(queue, batch)
                done = n
            else:
                done = drain(queue, case.qty)
            elapsed = common.clock() - start
    if done != n:
        raise RuntimeError(f"{name} consumed {done} of {n} messages in {case.key}")
    return n / elapsed


def run_cases(rounds: int, quick: bool) -> dict[str, dict[str, list[float]]]:
    import pgq_django as pgq

    for name in CONTENDERS:
        with contextlib.suppress(pgq.QueueAlreadyExists):
            pgq.create_queue(queue_for(name))
    results: dict[str, dict[str, list[float]]] = {}
    for case in CASES:
        n = case.size(quick)

        def prepare(name: str, _round: int, case: Case = case, n: int = n) -> None:
            reset(name, fill=n if case.kind in ("drain", "worker") else 0)

        measures = {
            name: (lambda _r, name=name, case=case, n=n: measure(case, name, n))
            for name in CONTENDERS
        }
        print(f"  {case.title}: {rounds} rounds of {n} messages …", flush=True)
        results[case.key] = common.interleave(rounds, measures, before_each=prepare)
    for name in CONTENDERS:
        pgq.drop_queue(queue_for(name))
    return results


def ratio(values: dict[str, list[float]], a: str, b: str) -> float:
    """Median over rounds of a / b (per-round ratios, so a slow round affects both)."""
    return common.median(x / y for x, y in zip(values[a], values[b], strict=True))


def report(results: dict[str, dict[str, list[float]]], rounds: int) -> list[list[Any]]:
    rows = []
    for case in CASES:
        values = results[case.key]
        rows.append(
            [
                case.title,
                *(common.fmt(common.median(values[name]), 0) for name in CONTENDERS),
                common.fmt(ratio(values, "pgbouncer", "direct")),
                common.fmt(ratio(values, "direct, unprepared", "direct")),
                common.fmt(ratio(values, "pgbouncer", "direct, unprepared")),
            ]
        )
    common.print_table(
        f"Messages per second (median of {rounds} interleaved rounds) and ratios "
        "(median of per-round ratios); goal: pgbouncer / direct >= 0.8",
        [
            "case",
            *CONTENDERS,
            "pgbouncer / direct",
            "unprepared / direct",
            "pgbouncer / unprepared",
        ],
        rows,
    )
    return rows


def _databases() -> tuple[dict[str, Any], str]:
    """The direct Django database dict, and a libpq string PgBouncer can reach it by.

    The embedded server's ``pgq_bench`` by default; the database ``DATABASE_URL`` names; or,
    when ``DJANGO_SETTINGS_MODULE`` is set, that settings module's default database (the
    smoke test runs on the test database this way).
    """
    from psycopg.conninfo import make_conninfo

    from pgq_django.testing import dsn_to_django, embedded_dsn

    module = os.environ.get("DJANGO_SETTINGS_MODULE")
    url = os.environ.get("DATABASE_URL")
    if module:
        db = dict(importlib.import_module(module).DATABASES["default"])
    elif url:
        db = dsn_to_django(url)
    else:
        server = direct_url(embedded_dsn(common.BENCH_DATA_DIR))
        common._ensure_database(server, common.BENCH_DB_NAME)
        db = dsn_to_django(server)
        db["NAME"] = common.BENCH_DB_NAME
    backend = make_conninfo(
        host=db.get("HOST") or None, port=str(db.get("PORT") or 5432), user=db.get("USER") or None
    )
    return db, backend


def main(argv: Sequence[str] | None = None) -> int:
    args = common.arguments(__doc__.splitlines()[0], argv)
    rounds = args.rounds or (3 if args.quick else 7)
    direct, backend = _databases()
    with PgBouncer(backend, pool_size=20) as bouncer:
        pooled = {**direct, **{"HOST": "127.0.0.1", "PORT": str(bouncer.port)}}
        pooled.update(USER=bouncer.user, PASSWORD=bouncer.password)
        configure(direct, pooled)
        print(f"PgBouncer (transaction mode) on 127.0.0.1:{bouncer.port}", flush=True)
        results = run_cases(rounds, args.quick)
        common.close_django_connections()
    rows = report(results, rounds)
    path = common.write_results(
        "pooler",
        {"rounds": rounds, "quick": args.quick, "results": results, "table": rows},
    )
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
