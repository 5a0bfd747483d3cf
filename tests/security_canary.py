"""A module whose import is itself the attack: importing it creates the file PGQ_CANARY names.

No test imports it; tests/acceptance/test_security.py names it in forged messages and checks
that neither the worker nor get_result imported it.
"""

from __future__ import annotations

import os
from pathlib import Path

if os.environ.get("PGQ_CANARY"):
    Path(os.environ["PGQ_CANARY"]).touch()


def touch(path: str) -> None:
    Path(path).touch()
