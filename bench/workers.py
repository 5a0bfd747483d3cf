"""Worker throughput and wake-up latency: pgq_django's worker vs pgqueuer and procrastinate.

Throughput: N messages with a no-op handler, drained by 1 and by 4 worker processes, for each
contender on the same database in the same run (interleaved rounds, median), reported as
messages per second and as the median per-round ratio to pgqueuer at its defaults and to
pgqueuer tuned for throughput as its performance guide recommends. pgq_django runs twice:
in its default mode (each message in a transaction with its ack) and in batch commit
(``--batch-size 100``: a leased batch in one transaction, one ack statement). Every round
checks that each message was handled exactly once (no id twice, none missing, none left
queued) and fails otherwise.

Latency: p50/p95 from a committed send to the handler starting, on an idle worker woken by
LISTEN/NOTIFY, and the same with notifications off (polling fallback).

Run with ``python -m bench.workers [--quick] [--rounds N] [--only NAME …] [--no-latency]``.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import random
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, NamedTuple

from bench import common

QUEUE = "bench_workers"
PROCESSES = (1, 4)


def _conninfo() -> str:
    import psycopg

    from pgq_django.store.notify import connection_params

    return psycopg.conninfo.make_conninfo(**connection_params())


def _noop(message: Any) -> None:
    return None


# -- pgq_django ----------------------------------------------------------------------------
#
# Every contender's fill answers what it enqueued (ids, or a count) and every consumer what
# it ran, so each round checks that each message was consumed exactly once (see _check).

BATCH_SIZE = 100


def pgq_fill(n: int) -> list[int]:
    import pgq_django as pgq

    pgq.purge_queue(QUEUE)
    ids: list[int] = []
    for start in range(0, n, 1000):
        ids += pgq.send_batch(QUEUE, [{"i": i} for i in range(start, min(n, start + 1000))])
    return ids


def _pgq_consumer(batch_size: int | None) -> Callable[[], list[int]]:
    from pgq_django.worker.loop import Worker
    from pgq_django.worker.registry import Handler

    seen: list[int] = []

    def record(message: Any) -> None:
        seen.append(message.msg_id)

    worker = Worker(
        handlers={QUEUE: Handler(QUEUE, record)}, once=True, lead=False, batch_size=batch_size
    )

    def drain() -> list[int]:
        while worker.work_once():
            pass
        return seen

    return drain


def pgq_consumer() -> Callable[[], list[int]]:
    """The default mode: one transaction per message, with its ack."""
    return _pgq_consumer(None)


def pgq_batch_consumer() -> Callable[[], list[int]]:
    """Batch commit: 100 messages a transaction, each handler in its own savepoint."""
    return _pgq_consumer(BATCH_SIZE)


def pgq_left() -> int:
    import pgq_django as pgq

    return pgq.metrics(QUEUE).queue_length


# -- pgqueuer ------------------------------------------------------------------------------
#
# Two pgqueuer contenders: its defaults (batch_size 10, every table logged, psycopg) and
# tuned for throughput as its performance guide recommends: batch_size 100, durability
# "balanced" (the job table stays logged, the log and statistics tables become unlogged),
# its autovacuum settings, and a direct asyncpg connection for the QueueManager. They share
# one installation, so each fill sets the tables up for the contender about to run (outside
# the timed part).


async def _pgqueuer_driver() -> Any:
    import psycopg
    from pgqueuer import PsycopgDriver

    conn = await psycopg.AsyncConnection.connect(_conninfo(), autocommit=True)
    return PsycopgDriver(conn)


async def _pgqueuer_asyncpg_driver() -> Any:
    """What pgqueuer's guide recommends a QueueManager runs on: a direct asyncpg connection."""
    import asyncpg
    from pgqueuer.adapters.drivers.asyncpg import AsyncpgDriver

    from pgq_django.store.notify import connection_params

    params = connection_params()
    conn = await asyncpg.connect(
        host=params.get("host"),
        port=params.get("port"),
        user=params.get("user"),
        password=params.get("password"),
        database=params.get("dbname"),
    )
    return AsyncpgDriver(conn)


def pgqueuer_setup() -> None:
    async def go() -> None:
        from pgqueuer import Queries

        queries = Queries(await _pgqueuer_driver())
        if not await queries.has_table("pgqueuer"):
            await queries.install()

    asyncio.run(go())


def _pgqueuer_fill(n: int, *, tuned: bool) -> list[int]:
    async def go() -> list[int]:
        from pgqueuer import Queries
        from pgqueuer.adapters.persistence.qb import QueryBuilderEnvironment
        from pgqueuer.domain.settings import DBSettings, Durability

        durability = Durability.balanced if tuned else Durability.durable
        env = QueryBuilderEnvironment(settings=DBSettings(durability=durability))
        queries = Queries(await _pgqueuer_driver(), qbe=env)
        await queries.clear_queue()
        await queries.clear_queue_log()
        await queries.alter_durability()
        if tuned:
            await queries.optimize_autovacuum()
        else:
            await queries.optimize_autovacuum_rollback()
        ids: list[int] = []
        for start in range(0, n, 1000):
            size = min(n, start + 1000) - start
            ids += await queries.enqueue(["noop"] * size, [None] * size, [0] * size)
        return [int(i) for i in ids]

    return asyncio.run(go())


def pgqueuer_fill(n: int) -> list[int]:
    return _pgqueuer_fill(n, tuned=False)


def pgqueuer_tuned_fill(n: int) -> list[int]:
    return _pgqueuer_fill(n, tuned=True)


def _pgqueuer_consumer(batch_size: int, *, tuned: bool) -> Callable[[], list[int]]:
    def drain() -> list[int]:
        async def go() -> list[int]:
            from pgqueuer import Queries, QueueManager
            from pgqueuer.types import QueueExecutionMode

            driver = await (_pgqueuer_asyncpg_driver() if tuned else _pgqueuer_driver())
            qm = QueueManager(Queries(driver))
            seen: list[int] = []

            @qm.entrypoint("noop")
            async def noop(job: Any) -> None:
                seen.append(int(job.id))

            await qm.run(
                batch_size=batch_size,
                mode=QueueExecutionMode.drain,
                dequeue_timeout=timedelta(seconds=0.2),
            )
            return seen

        return asyncio.run(go())

    return drain


def pgqueuer_consumer() -> Callable[[], list[int]]:
    return _pgqueuer_consumer(10, tuned=False)


def pgqueuer_tuned_consumer() -> Callable[[], list[int]]:
    return _pgqueuer_consumer(BATCH_SIZE, tuned=True)


def pgqueuer_left() -> int:
    async def go() -> int:
        from pgqueuer import Queries

        queries = Queries(await _pgqueuer_driver())
        return sum(s.count for s in await queries.queue_size() if s.status == "queued")

    return asyncio.run(go())


# -- procrastinate -------------------------------------------------------------------------

_procrastinate_ran: list[int] = []


def _procrastinate_app() -> Any:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=_conninfo()))

    @app.task(name="noop", queue=QUEUE, pass_context=True)
    def noop(context: Any) -> None:
        _procrastinate_ran.append(int(context.job.id))

    return app


def procrastinate_setup() -> None:
    async def go() -> None:
        app = _procrastinate_app()
        async with app.open_async():
            exists = await app.connector.execute_query_one_async(
                "SELECT to_regclass('procrastinate_jobs') IS NOT NULL AS e"
            )
            if not exists["e"]:
                await app.schema_manager.apply_schema_async()

    asyncio.run(go())


def procrastinate_fill(n: int) -> list[int]:
    async def go() -> list[int]:
        app = _procrastinate_app()
        async with app.open_async():
            await app.connector.execute_query_async("DELETE FROM procrastinate_jobs")
            task = app.tasks["noop"]
            ids: list[int] = []
            for start in range(0, n, 1000):
                size = min(n, start + 1000) - start
                ids += await task.batch_defer_async(*[{} for _ in range(size)])
            return ids

    return asyncio.run(go())


def procrastinate_consumer() -> Callable[[], list[int]]:
    def drain() -> list[int]:
        async def go() -> list[int]:
            app = _procrastinate_app()
            async with app.open_async():
                await app.run_worker_async(
                    queues=[QUEUE], wait=False, concurrency=1, install_signal_handlers=False
                )
            return list(_procrastinate_ran)

        return asyncio.run(go())

    return drain


def procrastinate_left() -> int:
    async def go() -> int:
        app = _procrastinate_app()
        async with app.open_async():
            row = await app.connector.execute_query_one_async(
                "SELECT count(*) AS n FROM procrastinate_jobs WHERE status = 'todo'"
            )
            return int(row["n"])

    return asyncio.run(go())


class Contender(NamedTuple):
    fill: Callable[[int], list[int]]
    consumer: Callable[[], Callable[[], list[int]]]
    left: Callable[[], int]


CONTENDERS: dict[str, Contender] = {
    "pgq_django": Contender(pgq_fill, pgq_consumer, pgq_left),
    f"pgq_django batch {BATCH_SIZE}": Contender(pgq_fill, pgq_batch_consumer, pgq_left),
    "pgqueuer": Contender(pgqueuer_fill, pgqueuer_consumer, pgqueuer_left),
    f"pgqueuer tuned {BATCH_SIZE}": Contender(
        pgqueuer_tuned_fill, pgqueuer_tuned_consumer, pgqueuer_left
    ),
    "procrastinate": Contender(procrastinate_fill, procrastinate_consumer, procrastinate_left),
}
BASELINES = ("pgqueuer", f"pgqueuer tuned {BATCH_SIZE}")


def _check(name: str, sent: list[int], ran: list[list[int]], left: int) -> None:
    """Each message was handled exactly once: no id twice, none missing, none left queued."""
    handled = [i for got in ran for i in got]
    twice = len(handled) - len(set(handled))
    missing = set(sent) - set(handled)
    if twice or missing or left or len(handled) != len(sent):
        raise RuntimeError(
            f"{name}: {len(sent)} sent, {len(handled)} handled, {twice} twice, "
            f"{len(missing)} never, {left} still queued"
        )


def throughput(
    rounds: int, n: int, names: Sequence[str] = tuple(CONTENDERS)
) -> dict[str, dict[int, list[float]]]:
    """Messages per second per contender and process count, one value per round."""
    out: dict[str, dict[int, list[float]]] = {name: {} for name in names}
    for procs in PROCESSES:

        def measure(name: str, procs: int = procs) -> Callable[[int], float]:
            contender = CONTENDERS[name]

            def one(_round: int) -> float:
                sent = contender.fill(n)
                seconds, ran = common.run_processes(procs, contender.consumer)
                _check(name, sent, ran, contender.left())
                return n / seconds

            return one

        values = common.interleave(rounds, {name: measure(name) for name in names})
        for name, got in values.items():
            out[name][procs] = got
        print(
            f"  {procs} process(es): "
            + ", ".join(f"{k} {common.median(v):,.0f}/s" for k, v in values.items()),
            flush=True,
        )
    return out


# -- latency -------------------------------------------------------------------------------


def _latency_worker(listen: bool, poll: float, ready: Any, out: Any, stop: Any) -> None:
    from django.db import connections

    from pgq_django.worker.loop import Worker
    from pgq_django.worker.registry import Handler

    def handler(message: Any) -> None:
        out.put(common.clock())

    connections.close_all()
    worker = Worker(
        handlers={QUEUE: Handler(QUEUE, handler, batch=1)},
        listen=listen,
        poll_interval=poll,
        lead=False,
    )
    worker.start()
    if worker.notifier is not None:
        worker.notifier.ready.wait(10)
    ready.set()
    stop.wait()
    worker._shutdown()


def latency(samples: int, *, listen: bool, poll: float) -> list[float]:
    """Milliseconds from a send's commit to its handler starting, on an idle worker."""
    import pgq_django as pgq

    pgq.purge_queue(QUEUE)
    common.close_django_connections()
    ctx = multiprocessing.get_context("fork")
    ready, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=_latency_worker, args=(listen, poll, ready, out, stop))
    proc.start()
    values = []
    try:
        ready.wait(30)
        time.sleep(0.2)
        for _ in range(samples):
            time.sleep(random.uniform(0.03, 0.08) if listen else random.uniform(0, poll))
            pgq.send(QUEUE, {})
            committed = common.clock()
            started = out.get(timeout=max(10, poll * 3))
            values.append((started - committed) * 1000)
    finally:
        stop.set()
        proc.join(timeout=30)
        if proc.is_alive():
            proc.kill()
    return values


def _extra_arguments(parser: Any) -> None:
    parser.add_argument("--messages", type=int, default=None, help="messages per round")
    parser.add_argument(
        "--poll",
        type=float,
        default=1.0,
        help="poll interval of the polling-fallback latency run (s)",
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=list(CONTENDERS),
        help="measure only this contender (repeatable)",
    )
    parser.add_argument("--no-latency", action="store_true", help="skip the latency runs")


def main(argv: Sequence[str] | None = None) -> int:
    args = common.arguments(__doc__.splitlines()[0], argv, extra=_extra_arguments)
    rounds = args.rounds or 3
    n = args.messages or (1000 if args.quick else 5000)
    common.setup()
    import pgq_django as pgq

    if QUEUE not in {q.name for q in pgq.list_queues()}:
        pgq.create_queue(QUEUE)
    pgqueuer_setup()
    procrastinate_setup()
    names = args.only or list(CONTENDERS)
    print(
        f"bench.workers: {n} no-op messages, {rounds} rounds, processes {PROCESSES}, "
        f"contenders {', '.join(names)}",
        flush=True,
    )
    rates = throughput(rounds, n, names)
    rows = []
    summary: dict[str, Any] = {}
    bases = [b for b in BASELINES if b in names]
    for procs in PROCESSES:
        for name in names:
            rate = common.median(rates[name][procs])
            # Median of the per-round ratios: each round's contenders ran back to back.
            ratios = {
                base: common.median(
                    mine / theirs
                    for mine, theirs in zip(rates[name][procs], rates[base][procs], strict=True)
                )
                for base in bases
            }
            summary[f"{name}@{procs}"] = {
                "msgs_per_s": rate,
                **{f"vs {b}": r for b, r in ratios.items()},
            }
            rows.append([procs, name, common.fmt(rate), *(common.fmt(ratios[b]) for b in bases)])
    common.print_table(
        "Worker throughput, no-op handler (median msgs/s; median per-round ratio)",
        ["processes", "system", "msgs/s", *(f"x {b}" for b in bases)],
        rows,
    )
    if args.no_latency:
        common.write_results(
            "workers-quick" if args.quick else "workers",
            {"rounds": rounds, "messages": n, "throughput_rounds": rates, "summary": summary},
        )
        pgq.purge_queue(QUEUE)
        return 0
    samples = 30 if args.quick else 100
    notify_ms = latency(samples, listen=True, poll=args.poll)
    poll_ms = latency(max(10, samples // 5), listen=False, poll=args.poll)
    lat_rows = []
    for label, values in (("NOTIFY", notify_ms), (f"poll every {args.poll:g}s", poll_ms)):
        lat_rows.append(
            [
                label,
                len(values),
                common.fmt(common.percentile(values, 50)),
                common.fmt(common.percentile(values, 95)),
            ]
        )
    p50_ratio = common.percentile(poll_ms, 50) / common.percentile(notify_ms, 50)
    common.print_table(
        "pgq_django wake-up latency, send commit -> handler start (ms)",
        ["wake-up", "samples", "p50", "p95"],
        lat_rows,
    )
    print(f"\npolling p50 / NOTIFY p50 = {p50_ratio:,.1f}x")
    path = common.write_results(
        "workers-quick" if args.quick else "workers",
        {
            "rounds": rounds,
            "messages": n,
            "throughput_rounds": rates,
            "summary": summary,
            "latency_ms": {"notify": notify_ms, "poll": poll_ms, "poll_interval": args.poll},
        },
    )
    print(f"results: {path}")
    pgq.purge_queue(QUEUE)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
