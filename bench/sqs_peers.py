"""The SQS endpoint vs moto's server, the SQS emulator most teams test with: one boto3
workload against both, side by side, with queues kept shallow and deep; and the same work
through the Query protocol of older SDKs.

Contenders, each a real server process on a loopback port, alternated round by round
(:func:`bench.common.interleave`):

- ``moto server``: ``python -m moto.server`` (``moto[server]``, the bench extra; or the
  interpreter ``PGQ_BENCH_MOTO_PYTHON`` names), in memory.
- ``pgq_django, JSON``: the endpoint through pgq_django.asgi's lean path
  (bench/sqs_server.py), durable on PostgreSQL, driven by the same boto3 calls.
- ``pgq_django, Query``: the same server driven by botocore 1.31.0, which speaks the Query
  protocol to SQS, from ``.venv-query`` (``make query-client``): bench/sqs_query_load.py
  runs the calls there and reports the seconds they took (its start-up is not counted).

Cases: ``SendMessage`` (single sends), ``SendMessageBatch(10)`` and
``ReceiveMessage(10)+DeleteMessageBatch``. Depths: ``shallow`` (a send round starts on an
empty queue and leaves at most 50 messages; a receive round starts with what it takes) and
``deep`` (300 more messages wait in the queue before every round). Each contender has a
queue of its own, refilled before each of its rounds, untimed.

The table prints messages per second and each contender's throughput over moto's (the
median of the per-round ratios), against the goals: at least twice moto's throughput on
batch sends and on receive plus delete, at least as much on single sends.
Run: ``python -m bench.sqs_peers`` (``--quick``, ``--rounds N``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from . import common
from .sqs import BATCH, BODY, _client, _start_server

MOTO = "moto server"
JSON = "pgq_django, JSON"
QUERY = "pgq_django, Query"
SINGLE_CASE = "SendMessage"
SEND_CASE = f"SendMessageBatch({BATCH})"
RECEIVE_CASE = f"ReceiveMessage({BATCH})+DeleteMessageBatch"
DEEP = 300
# The goals, in throughput over moto's: durable against in-memory, batches at least twice
# as fast, single sends at least as fast.
GOALS = {SINGLE_CASE: 1.0, SEND_CASE: 2.0, RECEIVE_CASE: 2.0}
SHALLOW_MESSAGES = 50
QUERY_PYTHON = common.ROOT / ".venv-query" / "bin" / "python"
QUERY_LOAD = Path(__file__).with_name("sqs_query_load.py")


def _moto_python() -> str | None:
    named = os.environ.get("PGQ_BENCH_MOTO_PYTHON")
    if named:
        return named
    return sys.executable if importlib.util.find_spec("moto") is not None else None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _start_moto(python: str) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    process = subprocess.Popen(
        [python, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return process, f"http://127.0.0.1:{port}"
        except OSError:
            if process.poll() is not None:
                break
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"moto's server did not start on port {port}")


def _boto3_round(sqs: Any, url: str, case: str, n: int) -> float:
    """Seconds for ``n`` calls of ``case`` through boto3 (a receive deletes what it got)."""
    entries = [{"Id": str(i), "MessageBody": BODY} for i in range(BATCH)]

    def run() -> None:
        for _ in range(n):
            if case == SINGLE_CASE:
                sqs.send_message(QueueUrl=url, MessageBody=BODY)
            elif case == SEND_CASE:
                sqs.send_message_batch(QueueUrl=url, Entries=entries)
            else:
                got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=BATCH)
                handles = [
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                    for i, m in enumerate(got.get("Messages", []))
                ]
                if handles:
                    sqs.delete_message_batch(QueueUrl=url, Entries=handles)

    return common.timed(run)


def _query_round(job: dict[str, Any], case: str, n: int) -> float:
    """Seconds botocore 1.31.0 (Query protocol) took for ``n`` calls of ``case``."""
    done = subprocess.run(
        [str(QUERY_PYTHON), str(QUERY_LOAD)],
        input=json.dumps({**job, "case": case, "n": n}),
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return float(done.stdout.strip())


def main(argv: Sequence[str] | None = None) -> int:
    args = common.arguments(__doc__.splitlines()[0], argv)
    rounds = args.rounds or (3 if args.quick else 7)
    calls = {SINGLE_CASE: 10 if args.quick else SHALLOW_MESSAGES, SEND_CASE: 2, RECEIVE_CASE: 2}
    if not args.quick:
        calls[SEND_CASE] = calls[RECEIVE_CASE] = SHALLOW_MESSAGES // BATCH
    moto_python = _moto_python()
    if moto_python is None:
        print("bench.sqs_peers: moto is not installed (pip install -e '.[bench]'); skipped")
        return 0
    common.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model

    import pgq_django as pgq
    from pgq_django.models import AccessKey

    tag = uuid.uuid4().hex[:8]
    owner = get_user_model().objects.create_user(f"bench_sqs_peers_{tag}")
    key, secret = AccessKey.objects.create_key(owner)
    ours = pgq.create_queue(f"bench_sqs_peers_{tag}", owner=owner).name
    moto_process, moto_url = _start_moto(moto_python)
    server = None
    print(f"bench.sqs_peers: {rounds} rounds; calls per round {calls}", flush=True)
    try:
        server = _start_server(
            settings.SECRET_KEY,
            "bench.sqs_server:application",
            PGQ_BENCH_SQS_LEAN="1",
            PGAPPNAME=f"pgq-bench-sqs-peers-{tag}",
        )
        sqs = _client(server.url + "/sqs/", key.key_id, secret)
        our_url = sqs.get_queue_url(QueueName=ours)["QueueUrl"]
        moto = _client(moto_url, "testing", "testing")
        # moto allows one PurgeQueue a minute, as SQS does: each round gets a new queue.
        moto_queue = {"url": moto.create_queue(QueueName=f"bench_{tag}_0")["QueueUrl"]}
        query_job = None
        if QUERY_PYTHON.exists():
            query_job = {
                "endpoint": server.url + "/sqs/",
                "key": key.key_id,
                "secret": secret,
                "queue_url": our_url,
            }
        else:
            print(f"({QUERY_PYTHON} is missing: `make query-client`; the Query row is skipped)")

        def fill(name: str, count: int) -> None:
            if name == MOTO:
                moto.delete_queue(QueueUrl=moto_queue["url"])
                fresh = f"bench_{tag}_{uuid.uuid4().hex[:8]}"
                moto_queue["url"] = moto.create_queue(QueueName=fresh)["QueueUrl"]
                for start in range(0, count, BATCH):
                    entries = [
                        {"Id": str(i), "MessageBody": BODY}
                        for i in range(min(BATCH, count - start))
                    ]
                    moto.send_message_batch(QueueUrl=moto_queue["url"], Entries=entries)
            else:
                pgq.purge_queue(ours)
                for start in range(0, count, BATCH):
                    pgq.send_batch(ours, [BODY] * min(BATCH, count - start))

        seconds: dict[str, dict[str, list[float]]] = {}
        for depth in ("shallow", "deep"):
            for case, n in calls.items():
                waiting = DEEP if depth == "deep" else 0
                if case == RECEIVE_CASE:
                    waiting += n * BATCH

                def before(name: str, _round: int, waiting: int = waiting) -> None:
                    fill(name, waiting)

                contenders: dict[str, Callable[[int], float]] = {
                    MOTO: lambda _r, c=case, k=n: _boto3_round(moto, moto_queue["url"], c, k),
                    JSON: lambda _r, c=case, k=n: _boto3_round(sqs, our_url, c, k),
                }
                if query_job is not None:
                    job = query_job
                    contenders[QUERY] = lambda _r, c=case, k=n, j=job: _query_round(j, c, k)
                seconds[f"{case}, {depth}"] = common.interleave(
                    rounds, contenders, before_each=before
                )
    finally:
        if server is not None:
            server.stop(timeout=30)
        moto_process.terminate()
        moto_process.wait(timeout=30)
        pgq.drop_queue(ours)
        owner.delete()

    rows, ratios = [], {}
    for label, values in seconds.items():
        case = label.split(", ")[0]
        messages = calls[case] * (1 if case == SINGLE_CASE else BATCH)
        for name, taken in values.items():
            ratio = common.median(m / t for m, t in zip(values[MOTO], taken, strict=True))
            ratios[f"{label} {name}"] = ratio
            rate = messages / common.median(taken)
            goal = GOALS[case]
            met = ("yes" if ratio >= goal else "no") if name != MOTO else ""
            rows.append([label, name, common.fmt(rate, 0), common.fmt(ratio), f"{goal:g}x", met])
    common.print_table(
        f"SQS endpoint vs moto's server, same boto3 workload: messages per second and "
        f"throughput over moto's (median of {rounds} rounds)",
        ["case, depth", "contender", "msg/s", "x moto", "goal", "met"],
        rows,
    )
    path = common.write_results(
        "sqs-peers-quick" if args.quick else "sqs-peers",
        {"rounds": rounds, "calls": calls, "seconds": seconds, "ratios": ratios},
    )
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
