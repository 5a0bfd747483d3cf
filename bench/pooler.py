"""Throughput behind PgBouncer in transaction mode vs a direct connection, in one run.

The contenders run the same pgq_django API calls on the same database, interleaved round by
round (each on a queue of its own), over both transports a client on the database machine
has, so that each pooled contender has a direct one that travels the same way:

- ``direct``: Django's connection straight to PostgreSQL's Unix socket, default settings
  (statements prepared once per connection);
- ``direct, TCP``: the same, to the same server over 127.0.0.1 TCP;
- ``direct, unprepared``: ``direct`` (``direct, TCP`` when there is no socket) with
  ``PREPARED_STATEMENTS = False``, to tell the two costs of a pooler apart;
- ``pgbouncer``: Django's connection to a PgBouncer in transaction mode that this benchmark
  starts in front of the same server, on its 127.0.0.1 TCP port, with the settings
  docs/howto/pgbouncer.md gives (``PREPARED_STATEMENTS = False``,
  ``DISABLE_SERVER_SIDE_CURSORS``, LISTEN on the direct connection);
- ``pgbouncer, Unix socket``: the same PgBouncer through its Unix socket.

PgBouncer reaches the server by the server's Unix socket when it has one (else by TCP).

Cases: ``send`` (one message per call, autocommit), ``send_batch`` (100 per call),
``read+delete`` with qty 1 and qty 100 (ack by receipt), and a worker drain (4 worker
processes running a no-op handler, each message leased, handled and acked in its own
transaction, as ``pgq_worker`` does). The headlines are medians of per-round ratios, like
for like: pgbouncer / direct, TCP and pgbouncer, Unix socket / direct; the goal is at least
0.8. pgbouncer / direct (TCP through the pooler against the direct socket, the only ratio
before both transports were measured) is kept for continuity.

``--pgbouncer-setting KEY=VALUE`` (repeatable) starts a second PgBouncer with those settings
laid over the first one's, as one more contender (``pgbouncer, Unix socket, altered``, on its
socket) with its own ratio to ``pgbouncer, Unix socket``: how docs/howto/pgbouncer.md's
advice on PgBouncer's settings was measured, e.g. ``--pgbouncer-setting
server_check_delay=0``. With ``max_prepared_statements`` among them (PgBouncer 1.21 or
newer keeps protocol-level prepared statements in transaction mode), that contender runs
with ``PREPARED_STATEMENTS`` on, as docs/howto/pgbouncer.md advises for such a PgBouncer; put
a newer ``pgbouncer`` first on ``PATH`` to measure one.

Run: ``python -m bench.pooler`` (``--quick`` for a smoke run, ``--rounds N``). The server is
the embedded PostgreSQL in ``.pgdata/bench`` (database ``pgq_bench``), restarted to listen
on 127.0.0.1 as well when this run is its only user (bench/transports.py); or the one
``DATABASE_URL`` names (or, with ``DJANGO_SETTINGS_MODULE`` set, that project's default
database), which PgBouncer must be able to reach on the host or socket given. Such a server
is taken as it is: a transport it does not offer is left out, and the output says so.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from . import common, transports
from .pgbouncer import PgBouncer, direct_url, keeps_prepared, setting_argument

BODY = {"event": "order.created", "order_id": 12345, "items": ["a", "b", "c"], "note": "x" * 64}
WORKER_PROCESSES = 4

POOLED = {"PREPARED_STATEMENTS": False}
ALTERED = "pgbouncer, Unix socket, altered"
# Every contender: name -> (Django alias, PGQ settings over the defaults). "direct" is the
# server's Unix socket, "direct_tcp" its 127.0.0.1 port, "pooled" PgBouncer's 127.0.0.1 port,
# "pooled_unix" PgBouncer's socket; "default" is "direct", or "direct_tcp" without a socket.
ALL_CONTENDERS: dict[str, tuple[str, dict[str, Any]]] = {
    "direct": ("direct", {}),
    "direct, TCP": ("direct_tcp", {}),
    "direct, unprepared": ("default", POOLED),
    "pgbouncer": ("pooled", POOLED),
    "pgbouncer, Unix socket": ("pooled_unix", POOLED),
    # Only with --pgbouncer-setting: a second PgBouncer with those settings, on its socket.
    ALTERED: ("pooled_altered", POOLED),
}
# The contenders this run has (configure() drops those whose transport is missing).
CONTENDERS = dict(ALL_CONTENDERS)
# (title, numerator, denominator) of the ratio table, headlines first.
RATIOS = (
    ("pgbouncer / direct, TCP", "pgbouncer", "direct, TCP"),
    ("pgbouncer, Unix / direct", "pgbouncer, Unix socket", "direct"),
    ("pgbouncer (TCP) / direct (Unix), as before", "pgbouncer", "direct"),
    ("direct, TCP / direct", "direct, TCP", "direct"),
    ("unprepared / direct", "direct, unprepared", "direct"),
    ("pgbouncer, Unix / unprepared", "pgbouncer, Unix socket", "direct, unprepared"),
)
# Shown only when this run has the altered PgBouncer: against the first one, and (what the
# goal compares) against the direct socket.
ALTERED_RATIOS = (
    ("altered / pgbouncer, Unix", ALTERED, "pgbouncer, Unix socket"),
    ("altered / direct", ALTERED, "direct"),
)


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


# Single-message cases run 3,000 and 2,000 calls a round (about a second per contender):
# with 1,000 (a third of a second) a 5-round median moved visibly from run to run.
CASES = (
    Case("send", "send (1 per call)", "send", 1, 3000, 50),
    Case("send_batch", "send_batch (100 per call)", "send_batch", 100, 10_000, 200),
    Case("read_delete_1", "read+delete qty 1", "drain", 1, 2000, 50),
    Case("read_delete_100", "read+delete qty 100", "drain", 100, 10_000, 200),
    Case("worker", f"worker drain, {WORKER_PROCESSES} processes", "worker", 1, 4000, 100),
)


def queue_for(name: str) -> str:
    return "bench_pooler_" + name.replace(", ", "_").replace(" ", "_")


def _settings(name: str) -> dict[str, Any]:
    """The PGQ settings of contender ``name`` (the LISTEN connection always goes direct)."""
    from django.conf import settings

    alias, extra = ALL_CONTENDERS[name]
    direct = dict(settings.DATABASES["default"])
    listen = {k: direct[k] for k in ("HOST", "PORT", "USER", "PASSWORD") if direct.get(k)}
    return {"DATABASE": alias, "LISTEN_CONNECTION": listen, **extra}


def _as(name: str) -> Any:
    from django.test import override_settings

    return override_settings(PGQ=_settings(name))


def configure(databases: dict[str, dict[str, Any] | None]) -> None:
    """Configure Django with the aliases of ``databases`` that exist, keep the contenders
    that have theirs, and migrate."""
    import django
    from django.conf import settings
    from django.core.management import call_command

    present = {alias: db for alias, db in databases.items() if db is not None}
    for alias in ("pooled", "pooled_unix", "pooled_altered"):
        if alias in present:
            present[alias] = {**present[alias], "DISABLE_SERVER_SIDE_CURSORS": True}
    present["default"] = present.get("direct") or present["direct_tcp"]
    CONTENDERS.clear()
    CONTENDERS.update((n, c) for n, c in ALL_CONTENDERS.items() if c[0] in present)
    settings.configure(
        DEBUG=False,
        USE_TZ=True,
        SECRET_KEY="bench-only-not-secret",
        INSTALLED_APPS=["django.contrib.auth", "django.contrib.contenttypes", "pgq_django"],
        DATABASES=present,
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


def _worker(name: str) -> Callable[[], int]:
    """In a worker process: settle on the contender's settings, connect, return the drain."""
    from django.db import connections

    from pgq_django.worker.loop import Worker
    from pgq_django.worker.registry import Handler

    _as(name).enable()
    alias, _ = ALL_CONTENDERS[name]
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
    """Messages per second of contender ``name`` doing ``case`` once.

    What its autocommit sends and acks left to this process's background threads (counts
    for the tally thread, owed wake-ups for the wake-up flusher) is written before the next
    contender's settings apply (untimed): the settings are the process's, not the thread's,
    and written under a contender that prepares statements they would be prepared through
    PgBouncer (``prepared statement "_pg3_0" already exists``).
    """
    import pgq_django as pgq
    from pgq_django.store import tallies, wakeups

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
                done = common.drain(queue, case.qty)
            elapsed = common.clock() - start
            tallies.flush()
            wakeups.flush()
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


def ratio(values: dict[str, list[float]], a: str, b: str) -> float | None:
    """Median over rounds of a / b (per-round ratios, so a slow round affects both); None
    when this run lacks one of them."""
    if a not in values or b not in values:
        return None
    return common.median(x / y for x, y in zip(values[a], values[b], strict=True))


def report(results: dict[str, dict[str, list[float]]], rounds: int) -> list[list[Any]]:
    shown = RATIOS + (ALTERED_RATIOS if ALTERED in CONTENDERS else ())
    speeds, ratios = [], []
    for case in CASES:
        values = results[case.key]
        speeds.append(
            [case.title, *(common.fmt(common.median(values[name]), 0) for name in CONTENDERS)]
        )
        ratios.append([case.title, *(common.fmt(ratio(values, a, b)) for _, a, b in shown)])
    common.print_table(
        f"Messages per second (median of {rounds} interleaved rounds)",
        ["case", *CONTENDERS],
        speeds,
    )
    common.print_table(
        "Ratios (median of per-round ratios; '-': a transport this server lacks); "
        "goal: pgbouncer / direct >= 0.8 on the same transport",
        ["case", *(title for title, _, _ in shown)],
        ratios,
    )
    return [speed + ratio_row[1:] for speed, ratio_row in zip(speeds, ratios, strict=True)]


def _databases() -> tuple[dict[str, Any], list[str]]:
    """The direct Django database dict, and notes on a transport it was denied.

    The embedded server's ``pgq_bench`` by default (made to listen on 127.0.0.1 too, when
    it can be); the database ``DATABASE_URL`` names; or, when ``DJANGO_SETTINGS_MODULE`` is
    set, that settings module's default database (the smoke test runs on the test database
    this way).
    """
    from pgq_django.testing import dsn_to_django, embedded_dsn

    module = os.environ.get("DJANGO_SETTINGS_MODULE")
    url = os.environ.get("DATABASE_URL")
    notes = []
    if module:
        db = dict(importlib.import_module(module).DATABASES["default"])
    elif url:
        db = dsn_to_django(url)
    else:
        server = direct_url(embedded_dsn(common.BENCH_DATA_DIR))
        common._ensure_database(server, common.BENCH_DB_NAME)
        db = dsn_to_django(server)
        db["NAME"] = common.BENCH_DB_NAME
        why = transports.listen_on_tcp(common.BENCH_DATA_DIR)
        if why:
            notes.append(f"the embedded server listens on its Unix socket only: {why}")
    return db, notes


@contextlib.contextmanager
def running(altered: dict[str, str] | None = None) -> Iterator[list[str]]:
    """Find the server's transports, start PgBouncer in front of it (and, given ``altered``
    settings, a second one with them), configure Django with every alias this run has (see
    :func:`configure`) and print what runs where; yields the notes on what is missing, and
    stops PgBouncer after closing the connections."""
    db, notes = _databases()
    unix, tcp, missing = transports.ways_in(db)
    notes += missing
    backend = unix or tcp
    assert backend is not None
    with contextlib.ExitStack() as stack:
        bouncer = stack.enter_context(PgBouncer(_conninfo(backend), pool_size=20))
        other = None
        if altered:
            other = PgBouncer(_conninfo(backend), pool_size=20, settings=altered)
            stack.enter_context(other)

        def through(b: PgBouncer | None, host: str | None = None) -> dict[str, Any] | None:
            if b is None:
                return None
            login = {"USER": b.user, "PASSWORD": b.password, "PORT": str(b.port)}
            return {**backend, **login, "HOST": host or str(b.socket_dir)}

        configure(
            {
                "direct": unix,
                "direct_tcp": tcp,
                "pooled": through(bouncer, "127.0.0.1"),
                "pooled_unix": through(bouncer),
                "pooled_altered": through(other),
            }
        )
        print(
            f"PgBouncer (transaction mode) on 127.0.0.1:{bouncer.port} and "
            f"{bouncer.socket_dir}; PostgreSQL: "
            + ", ".join(
                f"{way} {d['HOST'] or 'default socket'}:{d.get('PORT') or 5432}"
                for way, d in (("Unix socket", unix), ("TCP", tcp))
                if d is not None
            )
            + f"; PgBouncer reaches it by its {'Unix socket' if unix else 'TCP port'}",
            flush=True,
        )
        if other is not None:
            print(f"{ALTERED!r}: a second PgBouncer with {altered}", flush=True)
        for note in notes:
            print(f"note: {note}", flush=True)
        global BOUNCER_PID
        BOUNCER_PID = bouncer.pid()
        try:
            yield notes
        finally:
            common.close_django_connections()


# PgBouncer's process id while :func:`running` (bench/pooler_cpu.py counts its CPU).
BOUNCER_PID = 0


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--pgbouncer-setting",
        metavar="KEY=VALUE",
        type=setting_argument,
        action="append",
        default=[],
        help="run a second PgBouncer with this [pgbouncer] setting (repeatable) as one more "
        f"contender, {ALTERED!r}, to measure a setting against the configuration's",
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = common.arguments(__doc__.splitlines()[0], argv, extra=_options)
    rounds = args.rounds or (3 if args.quick else 7)
    altered = dict(args.pgbouncer_setting)
    if keeps_prepared(altered):
        ALL_CONTENDERS[ALTERED] = ("pooled_altered", {})  # forked workers inherit this
    with running(altered) as notes:
        results = run_cases(rounds, args.quick)
    rows = report(results, rounds)
    path = common.write_results(
        "pooler",
        {
            "rounds": rounds,
            "quick": args.quick,
            "contenders": list(CONTENDERS),
            "pgbouncer_settings": dict(args.pgbouncer_setting),
            "notes": notes,
            "results": results,
            "table": rows,
        },
    )
    print(f"\nresults: {path}")
    return 0


def _conninfo(db: dict[str, Any]) -> str:
    """The libpq string PgBouncer logs in to the server with (the server trusts it)."""
    from psycopg.conninfo import make_conninfo

    return make_conninfo(
        host=db.get("HOST") or None, port=str(db.get("PORT") or 5432), user=db.get("USER") or None
    )


if __name__ == "__main__":
    sys.exit(main())
