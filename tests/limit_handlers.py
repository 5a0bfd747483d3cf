"""Handlers the limit and schedule tests run in real worker processes.

Each records when it started and finished, in ``test_timed`` inside the handler's
transaction (so a row is a handling that committed with its ack); the tests read the
rows to measure a rate, or the most handlings that overlapped.
"""

from __future__ import annotations

import os
import time
from typing import Any

from django.db import connection

import pgq_django as pgq

TIMED_DDL = """
CREATE TABLE IF NOT EXISTS test_timed (
    queue text NOT NULL, msg_id bigint NOT NULL, started float8 NOT NULL,
    finished float8 NOT NULL, pid int NOT NULL
)
"""

RATE_QUEUE = "limit_rate"
CONCURRENCY_QUEUE = "limit_concurrency"


def _timed(message: Any) -> None:
    started = time.time()
    body = message.message if isinstance(message.message, dict) else {}
    if body.get("sleep"):
        time.sleep(body["sleep"])  # stands for slow work
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO test_timed (queue, msg_id, started, finished, pid) "
            "VALUES (%s, %s, %s, %s, %s)",
            [message.queue_name, message.msg_id, started, time.time(), os.getpid()],
        )


@pgq.handler(RATE_QUEUE, batch=1)
def rate_limited(message: Any) -> None:
    _timed(message)


@pgq.handler(CONCURRENCY_QUEUE, batch=1)
def concurrency_limited(message: Any) -> None:
    _timed(message)
