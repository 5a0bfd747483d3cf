"""The core queue operations: pgq_django vs the same SQL by hand vs PGMQ, side by side.

Three contenders do the same work on one database, interleaved round by round:

- ``pgq_django``: the public API (``pgq.send``, ``pgq.send_batch``, ``pgq.read``,
  ``pgq.delete``) through Django's connection.
- ``hand SQL``: the statements of pgq_django/store/sql/messages.py (SEND, READ, DELETE) rewritten by
  hand and run with plain psycopg, as a team without Django would: same tables, same work
  (queue lookup by name, counters, NOTIFY), no ORM, no validation, tuples instead of models.
  The ratio to it is what pgq_django's Python layer costs.
- ``PGMQ``: PGMQ's own SQL functions (``pgmq.send``, ``pgmq.send_batch``, ``pgmq.read``,
  ``pgmq.delete``), installed from the ``pgmq`` package's bundled SQL into schema ``pgmq``
  of the same database, without the extension.

Cases: send, send_batch(100), and read+delete with qty 1 and 100 by 1 and by 4 consumers
(4 forked processes, each with its own connection, draining one prefilled queue). Then two
pgq_django-only checks: read latency with 1,000,000 messages backlogged vs 10,000, and the
wake-up latency of ``read_with_poll`` (a send commits in one process, a waiting
``read_with_poll`` returns in another), with PGMQ's polling ``read_with_poll`` for reference.

With ``--unlogged`` the throughput cases compare durability instead: pgq_django on a durable
queue and on a non-durable one (``create_queue(durable=False)``, UNLOGGED ranges), and PGMQ's
logged queue (``pgmq.create``) and unlogged one (``pgmq.create_unlogged``); hand SQL, the
backlog and the wake-ups are left out.

Run: ``python -m bench.core`` (``--quick`` for a smoke run, ``--rounds N``, ``--only CASE``,
``--unlogged``).
"""

from __future__ import annotations

import json
import multiprocessing
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pgq_django.store.sql.fragments import next_msg_id

from . import common

BODY = {"event": "order.created", "order_id": 12345, "items": ["a", "b", "c"], "note": "x" * 64}

# -- the hand-written statements: sql.messages.SEND / READ / DELETE without Django ---------

HAND_SEND = """
WITH q AS (
    SELECT id, name, delivery_delay, retention FROM pgq_queue
    WHERE name = %(queue)s AND max_message_size >= %(size)s
), ins AS (
    INSERT INTO pgq_message (queue_id, message, headers, attributes, label, priority, read_ct,
                             enqueued_at, vt, expires_at, group_id, dedup_id, max_retries,
                             retry_delay, cancel_requested)
    SELECT q.id, b.body, '{}'::jsonb, '{}'::jsonb, NULL, 0, 0, clock_timestamp(),
           clock_timestamp() + make_interval(secs => q.delivery_delay),
           clock_timestamp() + make_interval(secs => q.retention),
           NULL, NULL, NULL, NULL, false
    FROM q, unnest(%(bodies)s::jsonb[]) WITH ORDINALITY AS b(body, ord)
    ORDER BY b.ord
    RETURNING msg_id
), counted AS (
    INSERT INTO pgq_queue_counter (queue_id, kind, n, at)
    SELECT q.id, 'sent', (SELECT count(*) FROM ins), clock_timestamp() FROM q
)
SELECT (SELECT id FROM q),
       ARRAY(SELECT msg_id FROM ins ORDER BY msg_id),
       (SELECT pg_notify(%(channel)s, q.name) FROM q WHERE q.delivery_delay <= 0)
"""

HAND_READ = """
WITH q AS (
    SELECT id, visibility_timeout FROM pgq_queue
    WHERE name = %(queue)s AND NOT paused AND NOT fifo
), c AS (
    SELECT m.msg_id FROM pgq_message m
    WHERE m.queue_id = (SELECT id FROM q)
      AND m.vt <= clock_timestamp()
      AND (m.expires_at IS NULL OR m.expires_at > clock_timestamp())
    ORDER BY m.priority, m.msg_id
    LIMIT %(qty)s
    FOR UPDATE OF m SKIP LOCKED
)
UPDATE pgq_message m
SET vt = clock_timestamp() + make_interval(secs => q.visibility_timeout),
    read_ct = m.read_ct + 1
FROM c, q
WHERE m.msg_id = c.msg_id
RETURNING m.msg_id, m.queue_id, m.message, m.headers, m.attributes, m.label, m.priority,
          m.read_ct, m.enqueued_at, m.vt, m.expires_at, m.group_id, m.dedup_id,
          m.max_retries, m.retry_delay, m.cancel_requested
"""

HAND_DELETE = """
WITH q AS (SELECT id FROM pgq_queue WHERE name = %(queue)s AND NOT archive_on_ack),
d AS (
    DELETE FROM pgq_message m
    WHERE m.msg_id = ANY(%(ids)s::bigint[])
      AND coalesce((%(cts)s::int[])[array_position(%(ids)s::bigint[], m.msg_id)], m.read_ct)
          = m.read_ct
      AND m.queue_id = (SELECT id FROM q)
    RETURNING m.msg_id
), counted AS (
    INSERT INTO pgq_queue_counter (queue_id, kind, n, at)
    SELECT q.id, 'acked', n.n, clock_timestamp() FROM q, (SELECT count(*) AS n FROM d) n
    WHERE n.n > 0
)
SELECT (SELECT id FROM q), ARRAY(SELECT msg_id FROM d ORDER BY msg_id)
"""

# Fast untimed fill of a pgq_django queue: INSERT … SELECT generate_series, ids from the
# queue's own id space (a non-durable queue's are in its UNLOGGED ranges).
PGQ_FILL = f"""
INSERT INTO pgq_message (msg_id, queue_id, message, priority, read_ct, enqueued_at, vt,
                         expires_at)
SELECT {next_msg_id("q")},
       q.id, %(body)s::jsonb, 0, 0, clock_timestamp(), clock_timestamp(),
       clock_timestamp() + make_interval(secs => q.retention)
FROM pgq_queue q, generate_series(1, %(n)s)
WHERE q.name = %(queue)s
"""


# -- contenders ------------------------------------------------------------------------------


class Contender:
    """One way of doing the queue operations; every contender has its own queue."""

    name = ""
    label = ""

    def __init__(self, queue: str) -> None:
        self.queue = queue

    @contextmanager
    def active(self) -> Iterator[None]:
        """What holds while this contender is measured (settings of a variant)."""
        yield

    def send(self, body: dict[str, Any]) -> None:
        raise NotImplementedError

    def send_batch(self, bodies: list[dict[str, Any]]) -> None:
        raise NotImplementedError

    def read(self, qty: int) -> list[Any]:
        """Lease up to ``qty`` messages; returns what acknowledges each (id or receipt)."""
        raise NotImplementedError

    def delete_one(self, ref: Any) -> None:
        raise NotImplementedError

    def delete_many(self, refs: list[Any]) -> None:
        raise NotImplementedError


class Pgq(Contender):
    """pgq_django's public API, in a process that runs the store's services, as a worker's
    does (counts summed once a second, wake-ups throttled); :class:`PgqInline` measures a
    web process's default, which starts no thread."""

    name = "pgq"
    label = "pgq_django"
    runs_services = True

    @contextmanager
    def active(self) -> Iterator[None]:
        from pgq_django import services

        if not self.runs_services:
            yield
            return
        services.run_services(self)
        try:
            yield
        finally:
            services.release_services(self)

    def __init__(self, queue: str) -> None:
        super().__init__(queue)
        import pgq_django

        self.pgq = pgq_django

    def send(self, body: dict[str, Any]) -> None:
        self.pgq.send(self.queue, body)

    def send_batch(self, bodies: list[dict[str, Any]]) -> None:
        self.pgq.send_batch(self.queue, bodies)

    def read(self, qty: int) -> list[Any]:
        # Acknowledged by receipt, as the README shows: a consumer whose lease ran out
        # cannot delete a message someone else now holds.
        return [m.receipt for m in self.pgq.read(self.queue, qty=qty)]

    def delete_one(self, ref: Any) -> None:
        self.pgq.delete(self.queue, ref)

    def delete_many(self, refs: list[Any]) -> None:
        self.pgq.delete(self.queue, refs)


class PgqSettings(Pgq):
    """pgq_django's public API with some ``PGQ`` settings changed while it is measured
    (``--variants``): what a setting that trades speed for something else costs."""

    overrides: dict[str, Any] = {}

    @contextmanager
    def active(self) -> Iterator[None]:
        from django.conf import settings
        from django.test import override_settings

        overridden = override_settings(PGQ={**getattr(settings, "PGQ", {}), **self.overrides})
        with overridden, super().active():
            yield


class PgqPublicPaths(PgqSettings):
    """``PGQ["FAST_PATHS"] = False``: the public-API path of every shortcut in
    pgq_django.seams."""

    name = "pgq_public"
    label = "pgq FAST_PATHS off"
    overrides = {"FAST_PATHS": False}


def _without(shortcut: str) -> type[PgqSettings]:
    """pgq_django with every shortcut of pgq_django.seams but ``shortcut``."""
    from pgq_django import seams

    return type(
        f"PgqWithout_{shortcut}",
        (PgqSettings,),
        {
            "__doc__": f"FAST_PATHS without {shortcut}.",
            "name": f"pgq_no_{shortcut}",
            "label": f"pgq without {shortcut}",
            "overrides": {"FAST_PATHS": [s for s in seams.SHORTCUTS if s != shortcut]},
        },
    )


class PgqInline(PgqSettings):
    """A web process's default (``PGQ["BACKGROUND_SERVICES"] = False``, no worker in the
    process): counters and wake-ups written by each statement, no thread."""

    name = "pgq_inline"
    label = "pgq BACKGROUND_SERVICES off"
    overrides = {"BACKGROUND_SERVICES": False}
    runs_services = False


class Hand(Contender):
    """sql/messages.py's statements by hand with psycopg (autocommit, psycopg's defaults)."""

    name = "hand"
    label = "hand SQL"

    def __init__(self, queue: str) -> None:
        super().__init__(queue)
        from pgq_django.conf import settings

        self.conn = common.connect()
        self.channel = settings.NOTIFY_CHANNEL

    def _send(self, encoded: list[str]) -> None:
        size = max(len(b.encode()) for b in encoded)
        params = {"queue": self.queue, "bodies": encoded, "size": size, "channel": self.channel}
        row = self.conn.execute(HAND_SEND, params).fetchone()
        assert row is not None and row[0] is not None

    def send(self, body: dict[str, Any]) -> None:
        self._send([json.dumps(body)])

    def send_batch(self, bodies: list[dict[str, Any]]) -> None:
        self._send([json.dumps(b) for b in bodies])

    def read(self, qty: int) -> list[Any]:
        rows = self.conn.execute(HAND_READ, {"queue": self.queue, "qty": qty}).fetchall()
        return [(r[0], r[7]) for r in sorted(rows, key=lambda r: (r[6], r[0]))]

    def _delete(self, refs: list[tuple[int, int]]) -> None:
        params = {"queue": self.queue, "ids": [r[0] for r in refs], "cts": [r[1] for r in refs]}
        self.conn.execute(HAND_DELETE, params).fetchone()

    def delete_one(self, ref: Any) -> None:
        self._delete([ref])

    def delete_many(self, refs: list[Any]) -> None:
        self._delete(refs)


class Pgmq(Contender):
    """PGMQ's SQL functions, called with psycopg."""

    name = "pgmq"
    label = "PGMQ"

    def __init__(self, queue: str) -> None:
        super().__init__(queue)
        self.conn = common.connect()

    def send(self, body: dict[str, Any]) -> None:
        self.conn.execute("SELECT * FROM pgmq.send(%s, %s::jsonb)", [self.queue, json.dumps(body)])

    def send_batch(self, bodies: list[dict[str, Any]]) -> None:
        encoded = [json.dumps(b) for b in bodies]
        self.conn.execute("SELECT * FROM pgmq.send_batch(%s, %s::jsonb[])", [self.queue, encoded])

    def read(self, qty: int) -> list[Any]:
        sql = "SELECT * FROM pgmq.read(%s, %s, %s)"
        return [r[0] for r in self.conn.execute(sql, [self.queue, 30, qty]).fetchall()]

    def delete_one(self, ref: Any) -> None:
        self.conn.execute("SELECT pgmq.delete(%s, %s::bigint)", [self.queue, ref]).fetchone()

    def delete_many(self, refs: list[Any]) -> None:
        sql = "SELECT * FROM pgmq.delete(%s, %s::bigint[])"
        self.conn.execute(sql, [self.queue, refs]).fetchall()


class PgqUnlogged(Pgq):
    """pgq_django's public API on a non-durable queue (``durable=False``)."""

    name = "pgq_unlogged"
    label = "pgq_django unlogged"


class PgmqUnlogged(Pgmq):
    """PGMQ's SQL functions on a queue made by ``pgmq.create_unlogged``."""

    name = "pgmq_unlogged"
    label = "PGMQ unlogged"


CONTENDERS: dict[str, type[Contender]] = {"pgq": Pgq, "hand": Hand, "pgmq": Pgmq}
# --unlogged: durable and non-durable queues of each, side by side.
UNLOGGED_CONTENDERS: dict[str, type[Contender]] = {
    "pgq": Pgq,
    "pgq_unlogged": PgqUnlogged,
    "pgmq": Pgmq,
    "pgmq_unlogged": PgmqUnlogged,
}
# --variants: pgq_django with settings that trade speed away, against its defaults and PGMQ.
# The worker's shortcut (transaction_state) is measured by bench.workers, not here.
_CORE_SHORTCUTS = ("thread_connection", "unwrapped_cursor", "bare_instances", "libpq_statement")
VARIANT_CONTENDERS: dict[str, type[Contender]] = {
    "pgq": Pgq,
    "pgq_public": PgqPublicPaths,
    **{f"pgq_no_{name}": _without(name) for name in _CORE_SHORTCUTS},
    "pgq_inline": PgqInline,
    "pgmq": Pgmq,
}
ALL_CONTENDERS = {**CONTENDERS, **UNLOGGED_CONTENDERS, **VARIANT_CONTENDERS}


def _is_pgmq(name: str) -> bool:
    return name.startswith("pgmq")


def queue_for(name: str) -> str:
    return f"bench_core_{name}"


def make(name: str) -> Contender:
    return ALL_CONTENDERS[name](queue_for(name))


# -- queues: set-up, fill, reset (never timed) ------------------------------------------------


def install_pgmq(conn: Any) -> str:
    """PGMQ's functions in schema ``pgmq``: the extension if present, else the package's SQL."""
    ext = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'pgmq'").fetchone()
    if ext:
        return f"extension {ext[0]}"
    from pgmq.install import get_embedded_sql_version, install_pgmq_from_sql

    if conn.execute("SELECT to_regproc('pgmq.format_table_name')").fetchone()[0] is None:
        with common.connect(autocommit=False) as setup_conn:
            install_pgmq_from_sql(conn=setup_conn)
    return f"SQL-only install {get_embedded_sql_version()} (pgmq package)"


def create_queues(admin: Any, names: Sequence[str] = tuple(CONTENDERS)) -> None:
    import pgq_django as pgq

    for name in names:
        if name == "pgmq":
            admin.execute("SELECT pgmq.create(%s)", [queue_for(name)])
        elif name == "pgmq_unlogged":
            admin.execute("SELECT pgmq.create_unlogged(%s)", [queue_for(name)])
        else:
            pgq.drop_queue(queue_for(name))
            pgq.create_queue(queue_for(name), durable=name != "pgq_unlogged")


def drop_queues(admin: Any, names: Sequence[str] = tuple(CONTENDERS)) -> None:
    import pgq_django as pgq

    for name in names:
        if _is_pgmq(name):
            admin.execute("SELECT pgmq.drop_queue(%s)", [queue_for(name)])
        else:
            pgq.drop_queue(queue_for(name))


def reset(admin: Any, name: str, fill: int = 0) -> None:
    """Empty a contender's queue, prefill ``fill`` messages, vacuum and analyze its table."""
    queue = queue_for(name)
    body = json.dumps(BODY)
    if _is_pgmq(name):
        admin.execute("SELECT pgmq.purge_queue(%s)", [queue])
        if fill:
            admin.execute(
                f"INSERT INTO pgmq.q_{queue} (vt, message) "
                "SELECT clock_timestamp(), %s::jsonb FROM generate_series(1, %s)",
                [body, fill],
            )
        admin.execute(f"VACUUM (ANALYZE) pgmq.q_{queue}")
    else:
        admin.execute(
            "DELETE FROM pgq_message WHERE queue_id = (SELECT id FROM pgq_queue WHERE name = %s)",
            [queue],
        )
        if fill:
            admin.execute(PGQ_FILL, {"queue": queue, "body": body, "n": fill})
        admin.execute("VACUUM (ANALYZE) pgq_message")


# -- cases -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    key: str
    title: str
    messages: int
    quick_messages: int
    qty: int = 1
    consumers: int = 1
    kind: str = "drain"  # send | send_batch | drain

    def size(self, quick: bool) -> int:
        return self.quick_messages if quick else self.messages


CASES = (
    Case("send", "send", 2000, 40, kind="send"),
    # Added after the six original cases: producers contending for one queue (its row was
    # share-locked by every send while the message table had a foreign key to it; 0011).
    Case("send_x4", "send, 4 producers", 4000, 80, consumers=4, kind="send"),
    Case("send_batch", "send_batch(100)", 20_000, 400, qty=100, kind="send_batch"),
    Case("read1", "read+delete qty 1, 1 consumer", 2000, 40),
    Case("read100", "read+delete qty 100, 1 consumer", 20_000, 400, qty=100),
    Case("read1_x4", "read+delete qty 1, 4 consumers", 4000, 80, consumers=4),
    Case("read100_x4", "read+delete qty 100, 4 consumers", 40_000, 800, qty=100, consumers=4),
)


def drain(contender: Contender, qty: int) -> int:
    """Read and delete until the queue answers nothing; returns how many were consumed."""
    done = 0
    while True:
        ids = contender.read(qty)
        if not ids:
            return done
        if qty == 1:
            contender.delete_one(ids[0])
        else:
            contender.delete_many(ids)
        done += len(ids)


def _contender_in_child(name: str) -> Contender:
    """In a forked process: the contender, its Django connection (if any) already open."""
    contender = make(name)
    contender.active().__enter__()  # for the rest of this short-lived process
    if name.startswith("pgq"):
        from django.db import connections

        connections["default"].ensure_connection()
    return contender


def _drainer(name: str, qty: int) -> Callable[[], int]:
    """Run in a consumer process: connect and warm up, then hand back the drain to time."""
    contender = _contender_in_child(name)
    return lambda: drain(contender, qty)


def _sender(name: str, n: int) -> Callable[[], int]:
    """Run in a producer process: connect and warm up, then hand back ``n`` sends to time."""
    contender = _contender_in_child(name)

    def send() -> int:
        for _ in range(n):
            contender.send(BODY)
        return n

    return send


def measure(case: Case, contender: Contender, n: int) -> float:
    """Messages per second of one contender doing one case once."""
    with contender.active():
        return _measure(case, contender, n)


def _measure(case: Case, contender: Contender, n: int) -> float:
    if case.kind == "send" and case.consumers > 1:
        each = n // case.consumers
        elapsed, counts = common.run_processes(case.consumers, _sender, contender.name, each)
        if sum(counts) != each * case.consumers:
            raise RuntimeError(f"{contender.label} sent {sum(counts)} of {n} in {case.key}")
        return sum(counts) / elapsed
    if case.kind == "send":
        start = common.clock()
        for _ in range(n):
            contender.send(BODY)
        return n / (common.clock() - start)
    if case.kind == "send_batch":
        batch = [BODY] * case.qty
        start = common.clock()
        for _ in range(n // case.qty):
            contender.send_batch(batch)
        return n / (common.clock() - start)
    if case.consumers == 1:
        start = common.clock()
        done = drain(contender, case.qty)
        elapsed = common.clock() - start
    else:
        elapsed, counts = common.run_processes(case.consumers, _drainer, contender.name, case.qty)
        done = sum(counts)
    if done != n:
        raise RuntimeError(f"{contender.label} consumed {done} of {n} messages in {case.key}")
    return n / elapsed


def run_cases(
    cases: Sequence[Case], rounds: int, quick: bool, admin: Any, names: Sequence[str]
) -> dict[str, dict[str, list[float]]]:
    contenders = {name: make(name) for name in names}
    results: dict[str, dict[str, list[float]]] = {}
    for case in cases:
        n = case.size(quick)

        def prepare(name: str, _round: int, case: Case = case, n: int = n) -> None:
            reset(admin, name, fill=n if case.kind == "drain" else 0)

        measures = {
            name: (lambda _r, c=contenders[name], case=case, n=n: measure(case, c, n))
            for name in names
        }
        print(f"  {case.title}: {rounds} rounds of {n} messages …", flush=True)
        results[case.key] = common.interleave(rounds, measures, before_each=prepare)
    for name in names:
        reset(admin, name)
    return results


# -- WAL written per message (--unlogged) ------------------------------------------------------

WAL_LSN = "SELECT pg_current_wal_insert_lsn()"
WAL_DIFF = "SELECT pg_wal_lsn_diff(%s, %s)"


def wal_per_message(
    admin: Any, names: Sequence[str], rounds: int, quick: bool
) -> dict[str, dict[str, float]]:
    """WAL bytes each contender writes per message sent and per message read and deleted
    (single calls), median of ``rounds``: independent of the machine's load, unlike time.
    The WAL position is the cluster's, so whatever else writes meanwhile counts too."""
    n = 20 if quick else 200
    contenders = {name: make(name) for name in names}
    samples: dict[str, dict[str, list[float]]] = {
        name: {"send": [], "read_delete": []} for name in names
    }
    for _ in range(rounds):
        for name, contender in contenders.items():
            reset(admin, name)
            start = admin.execute(WAL_LSN).fetchone()[0]
            for _ in range(n):
                contender.send(BODY)
            sent = admin.execute(WAL_LSN).fetchone()[0]
            if drain(contender, 1) != n:
                raise RuntimeError(f"{contender.label} lost messages in the WAL check")
            done = admin.execute(WAL_LSN).fetchone()[0]
            for key, (a, b) in (("send", (sent, start)), ("read_delete", (done, sent))):
                samples[name][key].append(float(admin.execute(WAL_DIFF, [a, b]).fetchone()[0]) / n)
    for name in names:
        reset(admin, name)
    return {
        name: {key: common.median(values) for key, values in by_key.items()}
        for name, by_key in samples.items()
    }


# -- backlog: read latency with 1,000,000 messages waiting vs 10,000 --------------------------


def backlog(admin: Any, rounds: int, quick: bool) -> dict[str, Any]:
    """Median latency of pgq.read(qty=1) on a deep queue and a shallow one, interleaved.

    Each timed read is followed by an untimed delete, as a consumer does, so every read finds
    the head of a queue that is being worked.
    """
    import pgq_django as pgq

    sizes = {"small": 500, "big": 20_000} if quick else {"small": 10_000, "big": 1_000_000}
    reads = 30 if quick else 300
    queues = {k: f"bench_core_backlog_{k}" for k in sizes}
    body = json.dumps(BODY)
    for key, queue in queues.items():
        pgq.drop_queue(queue)
        pgq.create_queue(queue)
        print(f"  backlog: filling {sizes[key]:,} messages …", flush=True)
        for start in range(0, sizes[key], 250_000):
            chunk = min(250_000, sizes[key] - start)
            admin.execute(PGQ_FILL, {"queue": queue, "body": body, "n": chunk})
    admin.execute("VACUUM (ANALYZE) pgq_message")

    def latency(queue: str) -> float:
        samples = []
        for _ in range(reads):
            start = common.clock()
            got = pgq.read(queue, qty=1)
            samples.append(common.clock() - start)
            pgq.delete(queue, got[0].msg_id)
        return common.median(samples) * 1000

    try:
        values = common.interleave(
            rounds, {key: (lambda _r, q=queue: latency(q)) for key, queue in queues.items()}
        )
    finally:
        print("  backlog: dropping the backlog queues …", flush=True)
        for queue in queues.values():
            pgq.drop_queue(queue)
        admin.execute("VACUUM pgq_message")
    small, big = common.median(values["small"]), common.median(values["big"])
    return {
        "sizes": sizes,
        "reads_per_round": reads,
        "rounds_ms": values,
        "small_ms": small,
        "big_ms": big,
        "ratio": big / small,
    }


# -- wake-up latency of read_with_poll ----------------------------------------------------------


def _poller(kind: str, queue: str, conn: Any, samples: int) -> None:
    """Child process: wait in read_with_poll, report when it returned, ``samples`` times."""
    if kind == "pgq":
        import pgq_django as pgq

        def wait() -> int:
            got = pgq.read_with_poll(queue, qty=1, max_poll_seconds=5)
            pgq.delete(queue, got[0].msg_id)
            return len(got)

    else:
        pg = common.connect()

        def wait() -> int:
            rows = pg.execute(
                "SELECT * FROM pgmq.read_with_poll(%s, 30, 1, 5, 100)", [queue]
            ).fetchall()
            pg.execute("SELECT pgmq.delete(%s, %s::bigint)", [queue, rows[0][0]])
            return len(rows)

    for _ in range(samples):
        conn.send("ready")
        got = wait()
        conn.send((got, common.clock()))


def wakeups(admin: Any, quick: bool) -> dict[str, Any]:
    """Commit → return latency of a waiting read_with_poll, pgq_django and PGMQ."""
    import pgq_django as pgq

    samples = 6 if quick else 40
    out: dict[str, Any] = {}
    for kind in ("pgq", "pgmq"):
        queue = f"bench_core_wakeup_{kind}"
        if kind == "pgq":
            pgq.drop_queue(queue)
            pgq.create_queue(queue)
            sender: Contender = Pgq(queue)
        else:
            admin.execute("SELECT pgmq.create(%s)", [queue])
            admin.execute("SELECT pgmq.purge_queue(%s)", [queue])
            sender = Pgmq(queue)
        common.close_django_connections()
        ctx = multiprocessing.get_context("fork")
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_poller, args=(kind, queue, child, samples + 1))
        proc.start()
        latencies = []
        try:
            for i in range(samples + 1):
                if not parent.poll(30):
                    raise RuntimeError("the read_with_poll process did not start")
                parent.recv()
                time.sleep(0.05)  # let it reach its wait
                sender.send(BODY)
                committed = common.clock()
                if not parent.poll(30):
                    raise RuntimeError("read_with_poll did not return the message")
                got, returned = parent.recv()
                if got != 1:
                    raise RuntimeError(f"read_with_poll returned {got} messages")
                if i:  # the first one warms the connections up
                    latencies.append((returned - committed) * 1000)
        finally:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
        if kind == "pgq":
            pgq.drop_queue(queue)
        else:
            admin.execute("SELECT pgmq.drop_queue(%s)", [queue])
        out[kind] = {
            "samples_ms": latencies,
            "p50_ms": common.percentile(latencies, 50),
            "p95_ms": common.percentile(latencies, 95),
        }
    return out


# -- report ------------------------------------------------------------------------------------


def ratio(values: dict[str, list[float]], a: str, b: str) -> float | None:
    """Median over rounds of a/b, each round's pair measured back to back.

    A round's two numbers share the machine's state of that moment, so their quotient is
    steadier than the quotient of two medians taken across rounds.
    """
    if a not in values or b not in values:
        return None
    return common.median(x / y for x, y in zip(values[a], values[b], strict=True))


def report_unlogged(
    results: dict[str, dict[str, list[float]]], wal: dict[str, dict[str, float]]
) -> dict[str, Any]:
    """The --unlogged tables: each system's non-durable queue against its durable one, and
    pgq_django's non-durable queue against PGMQ's unlogged one; WAL bytes per message."""
    rows = []
    summary: dict[str, Any] = {}
    pairs = {
        "pgq_unlogged_vs_pgq": ("pgq_unlogged", "pgq"),
        "pgmq_unlogged_vs_pgmq": ("pgmq_unlogged", "pgmq"),
        "pgq_unlogged_vs_pgmq_unlogged": ("pgq_unlogged", "pgmq_unlogged"),
        "pgq_vs_pgmq": ("pgq", "pgmq"),
    }
    for case in CASES:
        if case.key not in results:
            continue
        med = {name: common.median(v) for name, v in results[case.key].items()}
        ratios = {key: ratio(results[case.key], a, b) for key, (a, b) in pairs.items()}
        summary[case.key] = {"median_msgs_per_s": med, **ratios}
        rows.append(
            [case.title]
            + [common.fmt(med.get(name)) for name in UNLOGGED_CONTENDERS]
            + [common.fmt(r) for r in ratios.values()]
        )
    common.print_table(
        "Durable vs unlogged, messages/s (median of rounds); ratios = median of per-round ratios",
        [
            "case",
            "pgq durable",
            "pgq unlogged",
            "PGMQ",
            "PGMQ unlogged",
            "pgq unl./pgq",
            "PGMQ unl./PGMQ",
            "pgq unl./PGMQ unl.",
            "pgq/PGMQ",
        ],
        rows,
    )
    common.print_table(
        "WAL bytes per message (single calls, median of rounds)",
        ["operation", *(ALL_CONTENDERS[name].label for name in wal)],
        [
            [key.replace("_", "+"), *(common.fmt(wal[name][key]) for name in wal)]
            for key in ("send", "read_delete")
        ],
    )
    summary["wal_bytes_per_message"] = wal
    return summary


def report_variants(results: dict[str, dict[str, list[float]]]) -> dict[str, Any]:
    """The --variants table: each variant against pgq_django's defaults and PGMQ."""
    rows = []
    summary: dict[str, Any] = {}
    variants = [n for n in VARIANT_CONTENDERS if n not in ("pgq", "pgmq")]
    for case in CASES:
        if case.key not in results:
            continue
        ratios = {"pgq_vs_pgmq": ratio(results[case.key], "pgq", "pgmq")}
        for name in variants:
            ratios[f"{name}_vs_pgq"] = ratio(results[case.key], name, "pgq")
            ratios[f"{name}_vs_pgmq"] = ratio(results[case.key], name, "pgmq")
        summary[case.key] = ratios
        rows.append([case.title, *(common.fmt(r) for r in ratios.values())])
    headers = ["case", "pgq/PGMQ"]
    for name in variants:
        label = VARIANT_CONTENDERS[name].label.removeprefix("pgq ")
        headers += [f"{label} / pgq", f"{label} / PGMQ"]
    common.print_table(
        "Settings that trade speed: median of per-round ratios (1.00 = as fast as the other)",
        headers,
        rows,
    )
    return summary


def report(
    results: dict[str, dict[str, list[float]]],
    backlog_result: dict[str, Any] | None,
    wake: dict[str, Any] | None,
) -> dict[str, Any]:
    rows = []
    summary: dict[str, Any] = {}
    for case in CASES:
        if case.key not in results:
            continue
        med = {name: common.median(v) for name, v in results[case.key].items()}
        vs_hand = ratio(results[case.key], "pgq", "hand")
        vs_pgmq = ratio(results[case.key], "pgq", "pgmq")
        hand_ok = vs_hand is not None and vs_hand >= 0.8
        pgmq_ok = vs_pgmq is not None and vs_pgmq >= 1.0
        summary[case.key] = {
            "median_msgs_per_s": med,
            "pgq_vs_hand": vs_hand,
            "pgq_vs_pgmq": vs_pgmq,
            "hand_goal_met": hand_ok,
            "pgmq_goal_met": pgmq_ok,
        }
        rows.append(
            [
                case.title,
                common.fmt(med.get("pgq")),
                common.fmt(med.get("hand")),
                common.fmt(med.get("pgmq")),
                common.fmt(vs_hand),
                common.fmt(vs_pgmq),
                "yes" if hand_ok else "NO",
                "yes" if pgmq_ok else "NO",
            ]
        )
    if rows:
        common.print_table(
            "Throughput, messages/s (median of rounds); ratios = pgq_django / other, "
            "median of per-round ratios "
            "(goals: ≥ 0.80 vs hand SQL, ≥ 1.00 vs PGMQ)",
            [
                "case",
                "pgq_django",
                "hand SQL",
                "PGMQ",
                "pgq/hand",
                "pgq/PGMQ",
                "≥ 0.80 hand",
                "≥ 1.00 PGMQ",
            ],
            rows,
        )
    extra = []
    if backlog_result:
        b = backlog_result
        extra.append(
            [
                f"read latency, {b['sizes']['big']:,} vs {b['sizes']['small']:,} backlogged",
                f"{common.fmt(b['big_ms'], 3)} ms vs {common.fmt(b['small_ms'], 3)} ms",
                common.fmt(b["ratio"]),
                "≤ 1.50",
                "yes" if b["ratio"] <= 1.5 else "NO",
            ]
        )
    if wake:
        w = wake["pgq"]
        extra.append(
            [
                "read_with_poll wake-up p50 / p95 (pgq_django)",
                f"{common.fmt(w['p50_ms'], 2)} / {common.fmt(w['p95_ms'], 2)} ms",
                common.fmt(w["p50_ms"]),
                "p50 ≤ 10 ms",
                "yes" if w["p50_ms"] <= 10 else "NO",
            ]
        )
        p = wake["pgmq"]
        extra.append(
            [
                "read_with_poll wake-up p50 / p95 (PGMQ, 100 ms polling)",
                f"{common.fmt(p['p50_ms'], 2)} / {common.fmt(p['p95_ms'], 2)} ms",
                common.fmt(p["p50_ms"]),
                "(reference)",
                "-",
            ]
        )
    if extra:
        common.print_table(
            "Latency (pgq_django)",
            ["check", "measured", "ratio / value", "goal", "goal met"],
            extra,
        )
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    args = common.arguments(__doc__.splitlines()[0], argv, extra=_extra_arguments)
    rounds = args.rounds or (3 if args.quick else 7)
    only = set(args.only or [])
    common.setup()
    admin = common.connect()
    pgmq_version = install_pgmq(admin)
    names = list(
        UNLOGGED_CONTENDERS
        if args.unlogged
        else VARIANT_CONTENDERS
        if args.variants
        else CONTENDERS
    )
    create_queues(admin, names)
    print(f"bench.core: {rounds} rounds per case; PGMQ: {pgmq_version}", flush=True)
    cases = [c for c in CASES if not only or c.key in only]
    backlog_result = wake = None
    wal: dict[str, dict[str, float]] = {}
    try:
        results = run_cases(cases, rounds, args.quick, admin, names)
        if args.unlogged:
            print("  WAL bytes per message …", flush=True)
            wal = wal_per_message(admin, names, rounds, args.quick)
        elif args.variants:
            pass
        else:
            backlog_result = (
                backlog(admin, rounds, args.quick) if not only or "backlog" in only else None
            )
            wake = wakeups(admin, args.quick) if not only or "wakeup" in only else None
    finally:
        drop_queues(admin, names)
    if args.unlogged:
        summary = report_unlogged(results, wal)
    elif args.variants:
        summary = report_variants(results)
    else:
        summary = report(results, backlog_result, wake)
    kind = "core-unlogged" if args.unlogged else "core-variants" if args.variants else "core"
    path = common.write_results(
        f"{kind}-quick" if args.quick else kind,
        {
            "rounds": rounds,
            "quick": args.quick,
            "pgmq": pgmq_version,
            "sizes": {c.key: c.size(args.quick) for c in cases},
            "throughput_rounds": results,
            "summary": summary,
            "backlog": backlog_result,
            "wakeup": wake,
        },
    )
    print(f"\nresults: {path}")
    return 0


def _extra_arguments(parser: Any) -> None:
    keys = [c.key for c in CASES] + ["backlog", "wakeup"]
    parser.add_argument("--only", action="append", choices=keys, help="run only these parts")
    parser.add_argument(
        "--unlogged",
        action="store_true",
        help="durable vs non-durable queues of pgq_django and PGMQ (throughput cases only)",
    )
    parser.add_argument(
        "--variants",
        action="store_true",
        help="pgq_django with FAST_PATHS off and with BACKGROUND_SERVICES off, against its"
        " defaults and PGMQ (throughput cases only)",
    )


if __name__ == "__main__":
    sys.exit(main())
