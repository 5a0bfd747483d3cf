"""Worker throughput and wake-up latency: pgq_django's worker vs pgqueuer and procrastinate.

Throughput: N messages with a no-op handler, drained by 1 and by 4 worker processes, for each
system on the same database in the same run (interleaved rounds, median), reported as
messages per second and as a ratio to pgqueuer. pgq_django's worker runs each message in a
transaction with its ack (its exactly-once-effects mode); pgqueuer and procrastinate run
their own default paths, each in drain mode.

Latency: p50/p95 from a committed send to the handler starting, on an idle worker woken by
LISTEN/NOTIFY, and the same with notifications off (polling fallback).

Run with ``python -m bench.workers [--quick] [--rounds N]``.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import random
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from bench import common

QUEUE = "bench_workers"
PROCESSES = (1, 4)


def _conninfo() -> str:
    import psycopg

    from pgq_django.notify import connection_params

    return psycopg.conninfo.make_conninfo(**connection_params())


def _noop(message: Any) -> None:
    return None


# -- pgq_django ----------------------------------------------------------------------------


def pgq_fill(n: int) -> None:
    import pgq_django as pgq

    pgq.purge_queue(QUEUE)
    for start in range(0, n, 1000):
        pgq.send_batch(QUEUE, [{"i": i} for i in range(start, min(n, start + 1000))])


def pgq_consumer() -> Callable[[], int]:
    from pgq_django.worker.loop import Worker
    from pgq_django.worker.registry import Handler

    worker = Worker(handlers={QUEUE: Handler(QUEUE, _noop)}, once=True, lead=False)

    def drain() -> int:
        runs = 0
        while worker.work_once():
            runs += 1
        return runs

    return drain


# -- pgqueuer ------------------------------------------------------------------------------


async def _pgqueuer_driver() -> Any:
    import psycopg
    from pgqueuer import PsycopgDriver

    conn = await psycopg.AsyncConnection.connect(_conninfo(), autocommit=True)
    return PsycopgDriver(conn)


def pgqueuer_setup() -> None:
    async def go() -> None:
        from pgqueuer import Queries

        queries = Queries(await _pgqueuer_driver())
        if not await queries.has_table("pgqueuer"):
            await queries.install()

    asyncio.run(go())


def pgqueuer_fill(n: int) -> None:
    async def go() -> None:
        from pgqueuer import Queries

        queries = Queries(await _pgqueuer_driver())
        await queries.clear_queue()
        for start in range(0, n, 1000):
            size = min(n, start + 1000) - start
            await queries.enqueue(["noop"] * size, [None] * size, [0] * size)

    asyncio.run(go())


def pgqueuer_consumer() -> Callable[[], int]:
    def drain() -> int:
        async def go() -> int:
            from pgqueuer import Queries, QueueManager
            from pgqueuer.types import QueueExecutionMode

            qm = QueueManager(Queries(await _pgqueuer_driver()))
            done = 0

            @qm.entrypoint("noop")
            async def noop(job: Any) -> None:
                nonlocal done
                done += 1

            await qm.run(
                batch_size=10, mode=QueueExecutionMode.drain, dequeue_timeout=timedelta(seconds=0.2)
            )
            return done

        return asyncio.run(go())

    return drain


# -- procrastinate -------------------------------------------------------------------------


def _procrastinate_app() -> Any:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=_conninfo()))

    @app.task(name="noop", queue=QUEUE)
    def noop() -> None:
        return None

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


def procrastinate_fill(n: int) -> None:
    async def go() -> None:
        app = _procrastinate_app()
        async with app.open_async():
            await app.connector.execute_query_async("DELETE FROM procrastinate_jobs")
            task = app.tasks["noop"]
            for start in range(0, n, 1000):
                size = min(n, start + 1000) - start
                await task.batch_defer_async(*[{} for _ in range(size)])

    asyncio.run(go())


def procrastinate_consumer() -> Callable[[], int]:
    def drain() -> int:
        async def go() -> int:
            app = _procrastinate_app()
            async with app.open_async():
                await app.run_worker_async(
                    queues=[QUEUE], wait=False, concurrency=1, install_signal_handlers=False
                )
            return 0

        return asyncio.run(go())

    return drain


CONTENDERS: dict[str, tuple[Callable[[int], None], Callable[[], Callable[[], int]]]] = {
    "pgq_django": (pgq_fill, pgq_consumer),
    "pgqueuer": (pgqueuer_fill, pgqueuer_consumer),
    "procrastinate": (procrastinate_fill, procrastinate_consumer),
}


def throughput(rounds: int, n: int) -> dict[str, dict[int, list[float]]]:
    """Messages per second per contender and process count, one value per round."""
    out: dict[str, dict[int, list[float]]] = {name: {} for name in CONTENDERS}
    for procs in PROCESSES:

        def measure(name: str, procs: int = procs) -> Callable[[int], float]:
            fill, consumer = CONTENDERS[name]

            def one(_round: int) -> float:
                fill(n)
                seconds, _ = common.run_processes(procs, consumer)
                return n / seconds

            return one

        values = common.interleave(rounds, {name: measure(name) for name in CONTENDERS})
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
    print(f"bench.workers: {n} no-op messages, {rounds} rounds, processes {PROCESSES}", flush=True)
    rates = throughput(rounds, n)
    rows = []
    summary: dict[str, Any] = {}
    for procs in PROCESSES:
        base = common.median(rates["pgqueuer"][procs])
        for name in CONTENDERS:
            rate = common.median(rates[name][procs])
            summary[f"{name}@{procs}"] = {"msgs_per_s": rate, "vs_pgqueuer": rate / base}
            rows.append([procs, name, common.fmt(rate), common.fmt(rate / base)])
    common.print_table(
        "Worker throughput, no-op handler (median msgs/s; ratio to pgqueuer)",
        ["processes", "system", "msgs/s", "x pgqueuer"],
        rows,
    )
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
