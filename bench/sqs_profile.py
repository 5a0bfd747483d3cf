"""Where the SQS endpoint's server spends its CPU: the lean ASGI path, driven in process.

``bench.sqs`` measures whole trips (boto3, uvicorn, the endpoint, PostgreSQL) and reports
ratios; this module answers the question that follows — which part of the server's own
work costs what. It builds the same ASGI application as ``bench/sqs_server.py``
(``get_asgi_application(sqs_lean=True)``) in this process and calls it directly with
requests signed by botocore, so neither HTTP nor the client is in the figures:

- **server CPU per call**: this process's CPU time less what signing the requests and
  reading the answers cost;
- split into the **event-loop thread** (the ASGI side: headers, body, the hop, the answer)
  and the **database threads** (``pgq_django.asgi``'s executors: signature, lookup, action,
  Django's request signals);
- with ``--profile FILE``, cProfile statistics of both, timed in per-thread CPU time (so a
  thread waiting for PostgreSQL costs nothing), for ``python -m pstats FILE``.

Run: ``python -m bench.sqs_profile`` (both cases), ``--case receive --calls 2000 --profile
receive.prof``. Numbers move with the machine's load; compare two versions of the code by
running each in turn, several times.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from psycopg.conninfo import make_conninfo

from . import common

BATCH = 10
BODY = json.dumps({"event": "order.created", "order_id": 12345, "note": "x" * 64})
HOST = "127.0.0.1"
CONTENT_TYPE = "application/x-amz-json-1.0"


def _configure() -> Any:
    """The lean ASGI application of bench/sqs_server.py, on the benchmark database."""
    database = common._bench_database()
    names = {"NAME": "dbname", "HOST": "host", "PORT": "port", "USER": "user"}
    params = {key: database[name] for name, key in names.items() if database.get(name)}
    if database.get("PASSWORD"):
        params["password"] = database["PASSWORD"]
    params.update(database.get("OPTIONS", {}))
    os.environ["PGQ_BENCH_DSN"] = make_conninfo(**{k: str(v) for k, v in params.items()})
    os.environ.setdefault("PGQ_BENCH_SECRET_KEY", "bench-only-not-secret")
    os.environ["PGQ_BENCH_SQS_LEAN"] = "1"
    # The benchmark drives the application from its own event loop and fills the queue
    # from it too: Django's guard against synchronous calls there does not apply.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    from django.core.management import call_command

    from . import sqs_server

    call_command("migrate", verbosity=0, interactive=False)
    return sqs_server.application


class _Driver:
    """Signs requests as botocore does and calls the ASGI application with them."""

    def __init__(self, app: Any, key_id: str, secret: str) -> None:
        from botocore.auth import SigV4Auth
        from botocore.credentials import Credentials

        self.app = app
        self.signer = SigV4Auth(Credentials(key_id, secret), "sqs", "us-east-1")
        self.client_cpu = 0.0  # signing requests and reading answers: not the server's

    def _scope(self, action: str, body: bytes) -> dict[str, Any]:
        from botocore.awsrequest import AWSRequest

        request = AWSRequest(
            method="POST",
            url=f"http://{HOST}:8000/sqs/",
            data=body,
            headers={"Content-Type": CONTENT_TYPE, "X-Amz-Target": f"AmazonSQS.{action}"},
        )
        self.signer.add_auth(request)
        headers = [(b"host", f"{HOST}:8000".encode())]
        headers += [(k.lower().encode(), str(v).encode()) for k, v in request.headers.items()]
        headers.append((b"content-length", str(len(body)).encode()))
        return {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/sqs/",
            "raw_path": b"/sqs/",
            "query_string": b"",
            "root_path": "",
            "headers": headers,
            "server": (HOST, 8000),
            "client": (HOST, 50000),
        }

    async def call(self, action: str, params: dict[str, Any]) -> dict[str, Any]:
        started = time.process_time()
        body = json.dumps(params).encode()
        scope = self._scope(action, body)
        self.client_cpu += time.process_time() - started
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await self.app(scope, receive, send)
        started = time.process_time()
        answer: dict[str, Any] = json.loads(sent[1]["body"])
        self.client_cpu += time.process_time() - started
        if sent[0]["status"] != 200:
            raise RuntimeError(f"{action} answered {sent[0]['status']}: {answer}")
        return answer


def _case(driver: _Driver, case: str, queue_url: str) -> Callable[[], Any]:
    entries = [{"Id": str(i), "MessageBody": BODY} for i in range(BATCH)]

    async def send() -> None:
        await driver.call("SendMessageBatch", {"QueueUrl": queue_url, "Entries": entries})

    async def receive() -> None:
        got = await driver.call(
            "ReceiveMessage", {"QueueUrl": queue_url, "MaxNumberOfMessages": BATCH}
        )
        handles = [
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
            for i, m in enumerate(got["Messages"])
        ]
        await driver.call("DeleteMessageBatch", {"QueueUrl": queue_url, "Entries": handles})

    return send if case == "send" else receive


async def _measure(
    app: Any, driver: _Driver, case: str, queue_url: str, calls: int, profile: str | None
) -> dict[str, float]:
    loop = asyncio.get_running_loop()
    one = _case(driver, case, queue_url)
    for _ in range(100):  # warm up: prepared statements, remembered signing keys
        await one()
    profiles: list[cProfile.Profile] = []

    def start_profile() -> None:
        profiler = cProfile.Profile(time.thread_time)
        profiler.enable()
        profiles.append(profiler)

    if profile:
        for executor in app.executors:
            await loop.run_in_executor(executor, start_profile)
        start_profile()
    db_before = [await loop.run_in_executor(e, time.thread_time) for e in app.executors]
    driver.client_cpu = 0.0
    loop_before, process_before = time.thread_time(), time.process_time()
    for _ in range(calls):
        await one()
    process_cpu = time.process_time() - process_before - driver.client_cpu
    loop_cpu = time.thread_time() - loop_before - driver.client_cpu
    db_after = [await loop.run_in_executor(e, time.thread_time) for e in app.executors]
    if profile:
        # One profiler per thread, each stopped in its own thread: the executors' first,
        # in order, then this one's (the last).
        profiles[-1].disable()
        for executor, profiler in zip(app.executors, profiles, strict=False):
            await loop.run_in_executor(executor, profiler.disable)
        stats = pstats.Stats(profiles[0])
        for profiler in profiles[1:]:
            stats.add(profiler)
        stats.dump_stats(profile)
    db_cpu = sum(after - before for after, before in zip(db_after, db_before, strict=True))
    return {
        "server": 1000 * process_cpu / calls,
        "loop": 1000 * loop_cpu / calls,
        "db": 1000 * db_cpu / calls,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=("send", "receive", "both"), default="both")
    parser.add_argument("--calls", type=int, default=1000, help="calls (pairs) per case")
    parser.add_argument("--profile", help="write cProfile statistics here (one case only)")
    args = parser.parse_args(argv)
    cases = ("send", "receive") if args.case == "both" else (args.case,)
    if args.profile and len(cases) > 1:
        parser.error("--profile needs one --case")
    app = _configure()
    from django.contrib.auth import get_user_model

    import pgq_django as pgq
    from pgq_django.models import AccessKey

    tag = uuid.uuid4().hex[:8]
    owner = get_user_model().objects.create_user(f"bench_sqs_profile_{tag}")
    key, secret = AccessKey.objects.create_key(owner)
    queue = pgq.create_queue(f"bench_sqs_profile_{tag}", owner=owner).name
    queue_url = f"http://{HOST}:8000/sqs/000000000000/{queue}"
    driver = _Driver(app, key.key_id, secret)
    rows = []
    try:
        for case in cases:
            if case == "receive":
                for _ in range(args.calls + 100):
                    pgq.send_batch(queue, [BODY] * BATCH)
            found = asyncio.run(_measure(app, driver, case, queue_url, args.calls, args.profile))
            name = (
                f"SendMessageBatch({BATCH})"
                if case == "send"
                else (f"ReceiveMessage({BATCH})+DeleteMessageBatch")
            )
            rows.append(
                [
                    name,
                    common.fmt(found["server"], 3),
                    common.fmt(found["loop"], 3),
                    common.fmt(found["db"], 3),
                ]
            )
    finally:
        pgq.drop_queue(queue)
        owner.delete()
    common.print_table(
        f"SQS lean path, server CPU ms per call in process ({args.calls} calls)",
        ["case", "server CPU ms", "event loop ms", "database threads ms"],
        rows,
    )
    if args.profile:
        print(f"\nprofile: {args.profile} (python -m pstats {args.profile})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
