"""A queue callback module that says who imported it, and can refuse to be imported.

Each process that imports it appends its pid to the file ``PGQ_IMPORT_CANARY`` names; with
``PGQ_IMPORT_CANARY_FAILS`` set, the import then raises, as a callback module with a broken
import-time dependency would. tests/acceptance/test_worker_processes.py uses it to check
that a worker serving other queues never imports it.
"""

from __future__ import annotations

import os
from typing import Any

if os.environ.get("PGQ_IMPORT_CANARY"):
    with open(os.environ["PGQ_IMPORT_CANARY"], "a") as log:
        log.write(f"{os.getpid()}\n")
if os.environ.get("PGQ_IMPORT_CANARY_FAILS"):
    raise RuntimeError("import_canary cannot be imported in this process")


def handle(message: Any) -> str:
    return "handled by the canary"
