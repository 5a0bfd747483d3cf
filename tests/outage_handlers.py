"""Handlers and a sender for the outage test (tests/acceptance/test_outage.py), which runs
them in real processes against a PostgreSQL server of its own that it stops and starts."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pgq_django as pgq

QUEUE = "outage_work"


@pgq.handler(QUEUE)
def work(message: Any) -> dict[str, Any]:
    """Most messages return at once. One carrying ``wait_for`` says it started (writes
    ``started``) and returns only once that file exists: the test creates it after it has
    stopped the server, so this handler finishes while its acknowledgement cannot commit.
    Each run of it appends its delivery count to ``runs``."""
    body = message.message if isinstance(message.message, dict) else {}
    if body.get("wait_for"):
        with open(body["runs"], "a") as runs:
            runs.write(f"{message.read_ct}\n")
        Path(body["started"]).write_text("started")
        go = Path(body["wait_for"])
        deadline = time.monotonic() + 300
        while not go.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    return {"ok": True}


def send_until_stopped(workdir: str) -> None:
    """Send the held message first, then one message every 20 ms until ``stop`` exists in
    ``workdir``, as an application's thread would; keep the count of sends that worked in
    ``sent``, and print what happened as JSON at the end.

    A failed send is retried at the next turn, as a caller that catches the error would do.
    """
    path = Path(workdir)
    held = pgq.send(
        QUEUE,
        {
            "wait_for": str(path / "go"),
            "started": str(path / "started"),
            "runs": str(path / "runs"),
        },
    )
    sent: list[int] = []
    unavailable = lost = 0
    other: list[str] = []
    n = 0
    while not (path / "stop").exists():
        try:
            sent.append(pgq.send(QUEUE, {"n": n}))
            n += 1
            (path / "sent.tmp").write_text(str(len(sent)))
            (path / "sent.tmp").replace(path / "sent")
        except pgq.DatabaseUnavailable:
            unavailable += 1
        except pgq.ConnectionLost:
            lost += 1
        except Exception as exc:  # reported to the test, which expects none
            other.append(repr(exc))
        time.sleep(0.02)
    print(
        json.dumps(
            {"held": held, "sent": sent, "unavailable": unavailable, "lost": lost, "other": other}
        )
    )
