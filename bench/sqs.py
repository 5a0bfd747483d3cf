"""The SQS endpoint through boto3 vs the Python API, on the same queue, side by side.

Two cases, each run by both contenders and interleaved round by round:

- ``SendMessageBatch(10)``: boto3 ``send_message_batch`` with 10 entries, against
  ``pgq.send_batch(queue, 10 bodies)``.
- ``ReceiveMessage(10)+DeleteMessageBatch``: boto3 ``receive_message(MaxNumberOfMessages=10)``
  then ``delete_message_batch`` of what came back, against ``pgq.read(queue, qty=10)`` then
  ``pgq.delete(queue, receipts)``, on a prefilled queue.

The boto3 side is the whole trip a client pays for: signing (SigV4), HTTP over loopback to a
uvicorn serving the endpoint (bench/sqs_server.py, in its own process), authentication,
grants, JSON both ways and the MD5 digests. The table prints messages per second and how many
times longer the SQS trip takes (the median of the per-round ratios; the goal is within 3x).
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

if TYPE_CHECKING:
    from pgq_django.testing import LiveServer

BATCH = 10
BODY = json.dumps({"event": "order.created", "order_id": 12345, "note": "x" * 64})
GOAL = 3.0


def _start_server(secret_key: str) -> LiveServer:
    """uvicorn serving bench.sqs_server on a loopback port, on the benchmark's database."""
    from psycopg.conninfo import make_conninfo

    from pgq_django.notify import connection_params
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
    )
    return start_asgi_server(
        "bench.sqs_server:application", env=env, cwd=common.ROOT, ready_path="/sqs/"
    )


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


def _contenders(
    sqs: Any, queue: str, queue_url: str, n: int
) -> dict[str, dict[str, Callable[[int], float]]]:
    import pgq_django as pgq

    entries = [{"Id": str(i), "MessageBody": BODY} for i in range(BATCH)]
    bodies = [BODY] * BATCH

    def sqs_send(_: int) -> float:
        return common.timed(
            lambda: [sqs.send_message_batch(QueueUrl=queue_url, Entries=entries) for _ in range(n)]
        )

    def api_send(_: int) -> float:
        return common.timed(lambda: [pgq.send_batch(queue, bodies) for _ in range(n)])

    def sqs_receive(_: int) -> float:
        def run() -> None:
            for _ in range(n):
                got = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=BATCH)
                handles = [
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                    for i, m in enumerate(got["Messages"])
                ]
                sqs.delete_message_batch(QueueUrl=queue_url, Entries=handles)

        return common.timed(run)

    def api_receive(_: int) -> float:
        def run() -> None:
            for _ in range(n):
                messages = pgq.read(queue, qty=BATCH)
                pgq.delete(queue, [m.receipt for m in messages])

        return common.timed(run)

    return {
        f"SendMessageBatch({BATCH})": {"boto3 via SQS": sqs_send, "Python API": api_send},
        f"ReceiveMessage({BATCH})+DeleteMessageBatch": {
            "boto3 via SQS": sqs_receive,
            "Python API": api_receive,
        },
    }


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
    server = _start_server(settings.SECRET_KEY)
    url = server.url + "/sqs/"
    print(f"bench.sqs: {rounds} rounds x {per_round} calls of {BATCH} messages", flush=True)
    try:
        sqs = _client(url, key.key_id, secret)
        queue_url = sqs.get_queue_url(QueueName=queue)["QueueUrl"]
        cases = _contenders(sqs, queue, queue_url, per_round)

        def refill(_name: str, _round: int) -> None:
            pgq.purge_queue(queue)
            for _ in range(per_round):
                pgq.send_batch(queue, [BODY] * BATCH)

        seconds = {
            f"SendMessageBatch({BATCH})": common.interleave(
                rounds, cases[f"SendMessageBatch({BATCH})"]
            ),
            f"ReceiveMessage({BATCH})+DeleteMessageBatch": common.interleave(
                rounds, cases[f"ReceiveMessage({BATCH})+DeleteMessageBatch"], before_each=refill
            ),
        }
    finally:
        server.stop(timeout=30)
        pgq.drop_queue(queue)
        owner.delete()
    rows, ratios = [], {}
    for case, values in seconds.items():
        rate = {name: per_round * BATCH / common.median(v) for name, v in values.items()}
        # Each round measured both back to back: the median of their quotients is steadier
        # than the quotient of two medians (bench/core.py does the same).
        ratio = common.median(
            sqs / api
            for sqs, api in zip(values["boto3 via SQS"], values["Python API"], strict=True)
        )
        ratios[case] = ratio
        rows.append(
            [
                case,
                common.fmt(rate["Python API"], 0),
                common.fmt(rate["boto3 via SQS"], 0),
                common.fmt(ratio),
                "yes" if ratio <= GOAL else "no",
            ]
        )
    common.print_table(
        f"SQS endpoint vs Python API: messages per second (median of {rounds} rounds)",
        [
            "case",
            "Python API msg/s",
            "boto3 via SQS msg/s",
            "SQS takes x longer",
            f"within {GOAL:g}x",
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
            "ratios": ratios,
        },
    )
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
