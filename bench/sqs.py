"""The SQS endpoint through boto3 vs the Python API, on the same queue, side by side.

Two cases, each run by every contender and interleaved round by round:

- ``SendMessageBatch(10)``: boto3 ``send_message_batch`` with 10 entries, against
  ``pgq.send_batch(queue, 10 bodies)``.
- ``ReceiveMessage(10)+DeleteMessageBatch``: boto3 ``receive_message(MaxNumberOfMessages=10)``
  then ``delete_message_batch`` of what came back, against ``pgq.read(queue, qty=10)`` then
  ``pgq.delete(queue, receipts)``, on a prefilled queue.

The boto3 contenders pay the whole trip a client pays: signing (SigV4), HTTP over loopback
to a uvicorn process, and the answer parsed and its MD5 digests checked. Three servers:

- ``boto3, lean ASGI``: the endpoint served through pgq_django.asgi's lean path
  (``get_asgi_application(sqs_lean=True)``, bench/sqs_server.py): authentication, grants,
  the action, JSON both ways, without Django's request cycle.
- ``boto3, Django view``: the same endpoint through Django's request cycle (no middleware).
- ``boto3, canned answers``: bench/sqs_canned.py, which answers every call with a fixed,
  valid answer and does nothing else: the floor, what the client and the HTTP server cost
  with no endpoint at all.

The table prints messages per second and how many times longer each takes than the Python
API (the median of the per-round ratios; the goal for the lean path is within 3x), and the
same ratio in CPU seconds (bench/cputime.py): this process, the server process and the
PostgreSQL backends serving each contender, which holds still when other work on the
machine makes the wall-clock ratio swing.
Run: ``python -m bench.sqs`` (``--quick`` for a smoke run, ``--rounds N``).
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from . import common
from .cputime import Meter

if TYPE_CHECKING:
    from pgq_django.testing import LiveServer

BATCH = 10
BODY = json.dumps({"event": "order.created", "order_id": 12345, "note": "x" * 64})
GOAL = 3.0


API = "Python API"
LEAN = "boto3, lean ASGI"
VIEW = "boto3, Django view"
CANNED = "boto3, canned answers"
SEND_CASE = f"SendMessageBatch({BATCH})"
RECEIVE_CASE = f"ReceiveMessage({BATCH})+DeleteMessageBatch"


def _backends(application_name: str) -> list[int]:
    """PostgreSQL backend pids of the connections named ``application_name``."""
    with common.connect() as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s", [application_name]
        ).fetchall()
    return [int(row[0]) for row in rows]


def _own_backend() -> list[int]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return [int(cursor.fetchone()[0])]


def _server_processes(server: LiveServer, app_name: str | None) -> Callable[[], list[int]]:
    """The server process and, for a server on the database, its PostgreSQL backends."""

    def pids() -> list[int]:
        return [server.process.pid, *(_backends(app_name) if app_name else [])]

    return pids


def _start_server(secret_key: str, app: str, **extra: str) -> LiveServer:
    """uvicorn serving ``app`` on a loopback port, on the benchmark's database."""
    from psycopg.conninfo import make_conninfo

    from pgq_django.store.notify import connection_params
    from pgq_django.testing import start_asgi_server

    params = {k: v for k, v in connection_params().items() if v is not None}
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DJANGO_SETTINGS_MODULE", "PGQ_USE_TEST_DB")
    }
    env.update(
        PGQ_BENCH_DSN=make_conninfo(**{k: str(v) for k, v in params.items()}),
        PGQ_BENCH_SECRET_KEY=secret_key,
        PYTHONPATH=str(common.ROOT),
        **extra,
    )
    return start_asgi_server(app, env=env, cwd=common.ROOT, ready_path="/sqs/")


def _client(url: str, key_id: str, secret: str) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "sqs",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id=key_id,
        aws_secret_access_key=secret,
        config=Config(retries={"total_max_attempts": 1}),
    )


def _boto3_calls(sqs: Any, queue_url: str, n: int) -> dict[str, Callable[[int], float]]:
    entries = [{"Id": str(i), "MessageBody": BODY} for i in range(BATCH)]

    def send(_: int) -> float:
        return common.timed(
            lambda: [sqs.send_message_batch(QueueUrl=queue_url, Entries=entries) for _ in range(n)]
        )

    def receive(_: int) -> float:
        def run() -> None:
            for _ in range(n):
                got = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=BATCH)
                handles = [
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                    for i, m in enumerate(got["Messages"])
                ]
                sqs.delete_message_batch(QueueUrl=queue_url, Entries=handles)

        return common.timed(run)

    return {SEND_CASE: send, RECEIVE_CASE: receive}


def _api_calls(queue: str, n: int) -> dict[str, Callable[[int], float]]:
    import pgq_django as pgq

    bodies = [BODY] * BATCH

    def send(_: int) -> float:
        return common.timed(lambda: [pgq.send_batch(queue, bodies) for _ in range(n)])

    def receive(_: int) -> float:
        def run() -> None:
            for _ in range(n):
                messages = pgq.read(queue, qty=BATCH)
                pgq.delete(queue, [m.receipt for m in messages])

        return common.timed(run)

    return {SEND_CASE: send, RECEIVE_CASE: receive}


def main(argv: Sequence[str] | None = None) -> int:
    args = common.arguments(__doc__.splitlines()[0], argv)
    rounds = args.rounds or (3 if args.quick else 7)
    per_round = 10 if args.quick else 200
    common.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model

    import pgq_django as pgq
    from pgq_django.models import AccessKey

    tag = uuid.uuid4().hex[:8]
    owner = get_user_model().objects.create_user(f"bench_sqs_{tag}")
    key, secret = AccessKey.objects.create_key(owner)
    queue = pgq.create_queue(f"bench_sqs_{tag}", owner=owner).name
    servers = {}
    print(f"bench.sqs: {rounds} rounds x {per_round} calls of {BATCH} messages", flush=True)
    try:
        app_names = {LEAN: f"pgq-bench-sqs-lean-{tag}", VIEW: f"pgq-bench-sqs-view-{tag}"}
        servers[LEAN] = _start_server(
            settings.SECRET_KEY,
            "bench.sqs_server:application",
            PGQ_BENCH_SQS_LEAN="1",
            PGAPPNAME=app_names[LEAN],
        )
        servers[VIEW] = _start_server(
            settings.SECRET_KEY,
            "bench.sqs_server:application",
            PGQ_BENCH_SQS_LEAN="0",
            PGAPPNAME=app_names[VIEW],
        )
        servers[CANNED] = _start_server(settings.SECRET_KEY, "bench.sqs_canned:application")
        contenders: dict[str, dict[str, Callable[[int], float]]] = {
            API: _api_calls(queue, per_round)
        }
        meters = {API: Meter(_own_backend)}
        for name, server in servers.items():
            meters[name] = Meter(_server_processes(server, app_names.get(name)))
            sqs = _client(server.url + "/sqs/", key.key_id, secret)
            if name == CANNED:  # any URL: the canned server does not look
                queue_url = f"{server.url}/sqs/000000000000/{queue}"
            else:
                queue_url = sqs.get_queue_url(QueueName=queue)["QueueUrl"]
            contenders[name] = _boto3_calls(sqs, queue_url, per_round)

        def refill(name: str, _round: int) -> None:
            if name == CANNED:
                return
            pgq.purge_queue(queue)
            for _ in range(per_round):
                pgq.send_batch(queue, [BODY] * BATCH)

        cpu: dict[str, dict[str, list[float]]] = {}

        def metered(case: str, name: str, work: Callable[[int], float]) -> Callable[[int], float]:
            def run(r: int) -> float:
                wall, spent = meters[name].measure(lambda: work(r))
                cpu.setdefault(case, {}).setdefault(name, []).append(spent)
                return wall

            return run

        seconds = {
            case: common.interleave(
                rounds,
                {name: metered(case, name, calls[case]) for name, calls in contenders.items()},
                before_each=refill if case == RECEIVE_CASE else None,
            )
            for case in (SEND_CASE, RECEIVE_CASE)
        }
    finally:
        for server in servers.values():
            server.stop(timeout=30)
        pgq.drop_queue(queue)
        owner.delete()
    rows, ratios, cpu_ratios = [], {}, {}

    def ratio(mine: list[float], theirs: list[float]) -> float:
        # Each round measured every contender back to back: the median of their quotients
        # is steadier than the quotient of two medians (as bench/core.py).
        return common.median(a / b for a, b in zip(mine, theirs, strict=True))

    for case, values in seconds.items():
        api = values[API]
        per_call = 1000 * common.median(cpu[case][API]) / per_round
        rows.append(
            [
                case,
                API,
                common.fmt(per_round * BATCH / common.median(api), 0),
                "1.00",
                common.fmt(per_call),
                "1.00",
                "",
            ]
        )
        for name in (LEAN, VIEW, CANNED):
            ratios[f"{case} {name}"] = wall = ratio(values[name], api)
            cpu_ratios[f"{case} {name}"] = spent = ratio(cpu[case][name], cpu[case][API])
            rows.append(
                [
                    case,
                    name,
                    common.fmt(per_round * BATCH / common.median(values[name]), 0),
                    common.fmt(wall),
                    common.fmt(1000 * common.median(cpu[case][name]) / per_round),
                    common.fmt(spent),
                    (f"{'yes' if wall <= GOAL else 'no'} / {'yes' if spent <= GOAL else 'no'}")
                    if name == LEAN
                    else "",
                ]
            )
    common.print_table(
        f"SQS endpoint vs Python API: messages per second and CPU ms per call "
        f"(median of {rounds} rounds)",
        [
            "case",
            "contender",
            "msg/s",
            "x Python API",
            "CPU ms/call",
            "CPU x Python API",
            f"lean within {GOAL:g}x (wall / CPU)",
        ],
        rows,
    )
    path = common.write_results(
        "sqs-quick" if args.quick else "sqs",
        {
            "rounds": rounds,
            "calls_per_round": per_round,
            "batch": BATCH,
            "seconds": seconds,
            "cpu_seconds": cpu,
            "ratios": ratios,
            "cpu_ratios": cpu_ratios,
        },
    )
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
