"""A hundred boto3 clients long-polling one uvicorn process served by pgq_django.asgi.

Each waiting ReceiveMessage is a coroutine registered with the process's one LISTEN
connection: it holds no thread and no database connection while it waits. The test samples
the server's threads (``/proc/<pid>/task``) and PostgreSQL backends (``pg_stat_activity`` by
the server's own ``application_name``) from before the clients start until the last one is
answered. While all hundred wait, the server's connections drop to its LISTEN connection
alone (the test settings keep no connection between requests, CONN_MAX_AGE=0), and its
threads never exceed a few more than ``PGQ["ASGI_THREADS"]``; Django's own ASGI handler
would hold a thread per waiting client. Then one batch send wakes them all, and every message
is delivered exactly once. No timing is asserted. It runs against a server of each kind:
the endpoint through Django's request cycle, and through the lean ASGI path.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psutil
import pytest
import requests
from django.db import connection

import pgq_django as pgq
from pgq_django.conf import settings as pgq_settings
from tests.conftest import wait_until
from tests.http_server import start_uvicorn, stop

pytestmark = pytest.mark.slow

CLIENTS = 100
# SQS's longest wait, so that no poll ends on its own while the test looks at the waiting
# server (an ending request would let go of its thread's connection and blur the check).
WAIT_SECONDS = 20
APP_NAME = "pgq-test-sqs-longpoll"
# Besides the ASGI pool: the event loop's thread, the notify hub's reading thread and what
# the standard library may keep (asyncio's default executor).
EXTRA_THREADS = 6


@pytest.fixture(params=["django", "lean"])
def longpoll_server(request: Any, transactional_db: Any) -> Iterator[tuple[int, str]]:
    """A server of its own, so its threads and backends are its alone to count."""
    lean = "1" if request.param == "lean" else "0"
    proc, base, sock = start_uvicorn(PGAPPNAME=APP_NAME, PGQ_TEST_SQS_LEAN=lean)
    try:
        yield proc.pid, base
    finally:
        stop(proc, sock)
        deadline = time.monotonic() + 30
        while not POOLED and _backends(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


# Behind a pooler (.ci/test-pgbouncer) server backends are shared by every client and keep
# the last one's application_name: the server's own connections are its sockets to the pooler.
POOLED = bool(os.environ.get("DIRECT_DATABASE_URL"))


def _backends(pid: int) -> int:
    """The server's database connections (its LISTEN one goes past any pooler, uncounted)."""
    if POOLED:
        port = int(connection.settings_dict["PORT"])
        return sum(
            1
            for c in psutil.Process(pid).net_connections(kind="inet")
            if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED
        )
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
            " AND datname = current_database()",
            [APP_NAME],
        )
        return int(cursor.fetchone()[0])


class Sampler(threading.Thread):
    """Samples the server's thread and backend counts until stopped; keeps the maxima."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.max_threads = 0
        self.max_backends = 0
        self.samples = 0
        self.halt = threading.Event()

    def run(self) -> None:
        try:
            while not self.halt.is_set():
                self.max_threads = max(self.max_threads, _threads(self.pid))
                self.max_backends = max(self.max_backends, _backends(self.pid))
                self.samples += 1
                self.halt.wait(0.02)
        finally:
            connection.close()


def test_a_hundred_long_polls_hold_no_thread_nor_connection_and_each_message_comes_once(
    longpoll_server, make_user, new_name
):
    import boto3
    from botocore.config import Config

    from pgq_django.models import AccessKey

    pid, base = longpoll_server
    user = make_user()
    key, secret = AccessKey.objects.create_key(user)
    sqs = boto3.client(
        "sqs",
        endpoint_url=base + "/sqs/",
        region_name="eu-west-1",
        aws_access_key_id=key.key_id,
        aws_secret_access_key=secret,
        config=Config(
            retries={"total_max_attempts": 1},
            read_timeout=60,
            max_pool_connections=CLIENTS + 10,
        ),
    )
    url = sqs.create_queue(QueueName=new_name())["QueueUrl"]
    queue = url.rsplit("/", 1)[1]
    empty_polls = [0] * CLIENTS

    finished = threading.Event()

    def consume(n: int) -> dict[str, Any] | None:
        """One client: long-poll until a message comes (a poll can end empty on a slow
        machine before the send; it then polls again, as an SQS consumer does)."""
        while not finished.is_set():
            got = sqs.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=1,
                WaitTimeSeconds=WAIT_SECONDS,
                AttributeNames=["ApproximateReceiveCount"],
            ).get("Messages", [])
            if got:
                assert len(got) == 1
                return dict(got[0])
            empty_polls[n] += 1
        return None  # the test failed and gave up on this client

    def waiters() -> int:
        return int(requests.get(base + "/_test/waiters", timeout=30).json()["waiters"])

    baseline_threads = _threads(pid)
    sampler = Sampler(pid)
    sampler.start()
    clients = ThreadPoolExecutor(max_workers=CLIENTS)
    try:
        polls = [clients.submit(consume, n) for n in range(CLIENTS)]
        deadline = time.monotonic() + 120
        while waiters() < CLIENTS:
            assert time.monotonic() < deadline, f"only {waiters()} of {CLIENTS} waiting"
            assert not any(p.done() for p in polls), [p.exception() for p in polls if p.done()]
            time.sleep(0.05)
        # Nobody holds a connection while waiting: only the LISTEN one stays (backends of
        # connections just closed take a moment to exit, hence the wait).
        wait_until(lambda: _backends(pid) <= 1, what="the waiting requests' connections to close")
        waiting_threads, waiting_polls = _threads(pid), waiters()
        sent = pgq.send_batch(queue, [f"m{i}" for i in range(CLIENTS)])
        received = [p.result(timeout=120) for p in polls]
    finally:
        finished.set()  # a failed test must not leave clients polling: each stops after
        clients.shutdown()  # its current poll
        sampler.halt.set()
        sampler.join()

    report = (
        f"threads: {baseline_threads} idle, {waiting_threads} with {waiting_polls} waiting, "
        f"max {sampler.max_threads}; backends max {sampler.max_backends} "
        f"({sampler.samples} samples)"
    )
    assert waiting_polls >= CLIENTS, report
    assert sampler.samples > 0
    assert sampler.max_threads <= pgq_settings.ASGI_THREADS + EXTRA_THREADS, report
    # Each pool thread's connection, the LISTEN one, and (CONN_MAX_AGE=0 closes a connection
    # at every request's end) up to as many again whose backends are still exiting; never
    # one per client.
    assert sampler.max_backends <= 2 * pgq_settings.ASGI_THREADS + 1, report

    assert all(m is not None for m in received)
    ids = [int(m["MessageId"]) for m in received]
    assert sorted(ids) == sorted(sent)  # every message, each to exactly one client
    assert sorted(m["Body"] for m in received) == sorted(f"m{i}" for i in range(CLIENTS))
    assert {m["Attributes"]["ApproximateReceiveCount"] for m in received} == {"1"}
    for start in range(0, CLIENTS, 10):
        chunk = received[start : start + 10]
        done = sqs.delete_message_batch(
            QueueUrl=url,
            Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(chunk)
            ],
        )
        assert len(done["Successful"]) == len(chunk) and not done.get("Failed")
    assert pgq.read(queue, vt=0, qty=10) == []
    print(report, f"empty polls: {sum(empty_polls)}", sep="; ")
