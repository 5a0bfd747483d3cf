"""Handlers the worker tests run in real worker processes.

``record`` is set as a queue's callback; what it does is driven by the message body, and
every run inserts one row into ``test_effects`` inside the handler's transaction, so a
committed row is a side effect that happened exactly once per row.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from django.db import connection

import pgq_django as pgq

EFFECTS_DDL = """
CREATE TABLE IF NOT EXISTS test_effects (
    queue text NOT NULL, msg_id bigint NOT NULL, attempt int NOT NULL, pid int NOT NULL
)
"""


def record(message: Any) -> dict[str, Any]:
    body = message.message if isinstance(message.message, dict) else {}
    if body.get("attempts_file"):
        # Outside the transaction on purpose: survives the rollback of a failed attempt.
        with open(body["attempts_file"], "a") as f:
            f.write(f"{message.read_ct}\n")
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO test_effects (queue, msg_id, attempt, pid) VALUES (%s, %s, %s, %s)",
            [message.queue_name, message.msg_id, message.read_ct, os.getpid()],
        )
    if body.get("marker"):
        Path(body["marker"]).write_text(str(os.getpid()))
    sleep = body.get("sleep", 0)
    if body.get("sleep_first") and message.read_ct == 1:
        sleep = body["sleep_first"]
    if sleep:
        time.sleep(sleep)
    if body.get("fail"):
        raise ValueError(f"poison message {message.msg_id}")
    if body.get("exit"):
        raise SystemExit(3)  # what sys.exit() in a handler does
    if body.get("interrupt"):
        raise KeyboardInterrupt
    return {"handled_by": os.getpid()}


@pgq.handler("worker_decorated_async")
async def record_async(message: Any) -> str:
    from asgiref.sync import sync_to_async

    await sync_to_async(record)(message)
    return "async-ok"
