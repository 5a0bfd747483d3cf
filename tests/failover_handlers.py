"""The handler and the sender of the failover test (tests/acceptance/test_failover.py), run in
real processes on a multi-host ``DATABASE_URL`` whose primary the test kills.

Both write what happened to files of the test's working directory, one line per event, so
the test can tell afterwards what each process saw and when (wall-clock seconds: the test,
the processes and PostgreSQL share one machine's clock).
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pgq_django as pgq

QUEUE = "failover_work"


def _append(path: Path, line: str) -> None:
    """One line per write, appended: threads' lines never interleave (O_APPEND)."""
    with path.open("a") as out:
        out.write(line + "\n")


@pgq.handler(QUEUE)
def work(message: Any) -> dict[str, Any]:
    """Record each handled message in ``handled`` (msg_id, wall clock). The message carrying
    ``hold`` writes its delivery count and lease end to ``runs`` and ``started``, then
    returns only once ``go`` exists: the test creates it after it has killed the primary,
    so that handler finishes while its acknowledgement cannot commit."""
    body = message.message if isinstance(message.message, dict) else {}
    workdir = Path(body["workdir"])
    if body.get("hold"):
        lease_ends = message.vt.timestamp() if message.vt is not None else 0.0
        _append(workdir / "runs", f"{message.read_ct} {time.time():.3f} {lease_ends:.3f}")
        (workdir / "started").write_text("started")
        deadline = time.monotonic() + 300
        while not (workdir / "go").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    _append(workdir / "handled", f"{message.msg_id} {time.time():.3f}")
    return {"ok": True}


def send_until_stopped(workdir: str) -> None:
    """Send one held message, then send as fast as one thread can until ``stop`` exists.

    Every send carries a key of its own (``dedup_id``): a send that fails with
    ``ConnectionLost`` or ``DatabaseUnavailable`` is sent again with the same key until it
    returns, as the documentation tells an application to do. Each send that returned is
    written to ``sent`` (key, msg_id, wall clock); the summary is printed as JSON at the end.
    """
    path = Path(workdir)
    held = pgq.send(QUEUE, {"hold": True, "workdir": workdir})
    failures = {"lost": 0, "unavailable": 0}
    retried_keys = 0
    other: list[str] = []
    n = 0
    while not (path / "stop").exists():
        key = uuid.uuid4().hex
        if _send_until_it_returns(path, key, {"n": n, "workdir": workdir}, failures, other):
            retried_keys += 1
        n += 1
    print(
        json.dumps({"held": held, "sends": n, "retried_keys": retried_keys, **failures,
                    "other": other})
    )  # fmt: skip


def _send_until_it_returns(
    path: Path, key: str, body: dict[str, Any], failures: dict[str, int], other: list[str]
) -> bool:
    """Send ``body`` under ``key`` until a send returns; whether it had to be sent again."""
    deadline = time.monotonic() + 120
    again = False
    while time.monotonic() < deadline:
        try:
            msg_id = pgq.send(QUEUE, body, dedup_id=key)
        except pgq.DatabaseUnavailable:
            failures["unavailable"] += 1
        except pgq.ConnectionLost:
            failures["lost"] += 1
        except Exception as exc:  # reported to the test, which expects none
            other.append(repr(exc))
        else:
            _append(path / "sent", f"{key} {msg_id} {time.time():.3f}")
            return again
        again = True
        time.sleep(0.05)
    other.append(f"gave up on {key}")
    return again
