"""A handler for tests/acceptance/test_security.py's worker processes: it succeeds, then
returns a value PostgreSQL cannot store. Each run appends a line to ``runs_file`` (outside
the transaction), so a test can count how often the work was done."""

from __future__ import annotations

from typing import Any

UNSTORABLE = {
    "nan": float("nan"),
    "infinity": [float("inf")],
    "nul": "a\x00b",
    "nul key": {"k\x00": 1},
    "surrogate": "\ud800",
    "object": object(),
}


def returns_unstorable(message: Any) -> Any:
    body = message.message
    with open(body["runs_file"], "a") as f:
        f.write(f"{message.read_ct}\n")
    return UNSTORABLE[body["returns"]]
