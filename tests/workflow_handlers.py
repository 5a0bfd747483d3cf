"""Handlers the workflow tests run in real worker processes (set as queues' callbacks).

``step`` records each run in ``test_workflow_steps`` inside the handler's transaction, with
the time of the statement, so a committed row says when a step ran, once. ``echo`` answers
its body (the reply of a request), after sleeping ``sleep`` seconds when the body asks.
"""

from __future__ import annotations

import os
import time
from typing import Any

from django.db import connection

import pgq_django as pgq

STEPS_DDL = """
CREATE TABLE IF NOT EXISTS test_workflow_steps (
    msg_id bigint NOT NULL, name text, pid int NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""


def step(message: Any) -> dict[str, Any]:
    body = message.message if isinstance(message.message, dict) else {}
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO test_workflow_steps (msg_id, name, pid) VALUES (%s, %s, %s)",
            [message.msg_id, body.get("name"), os.getpid()],
        )
    if body.get("fail"):
        raise pgq.RejectMessage(f"step {body.get('name')} cannot succeed")
    return {"step": body.get("name")}


def echo(message: Any) -> dict[str, Any]:
    body = message.message if isinstance(message.message, dict) else {}
    if body.get("sleep"):
        time.sleep(body["sleep"])  # stands for slow work
    return {"echo": body, "pid": os.getpid()}
