"""How the message browser shows a failed message's errors: short, collapsed, relative paths.

A handler's error is stored as its whole traceback (in the archive's ``error`` column, and in
the ``last_error`` of a dead-lettered message's ``pgq_dead_letter`` header and of each
``pgq_redriven`` entry). Shown as is, a few of them push the page past a screen and print the
server's directory layout. The browser shows each as its last line with the traceback folded
under it, and with the install prefixes (site-packages, the standard library, the project's
``BASE_DIR``) cut from file paths. The stored text is not changed: only its display.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

# Up to and including site-packages/dist-packages, else the standard library's lib/pythonX.Y/,
# whichever machine the traceback came from (site-packages itself lies under lib/pythonX.Y/).
_INSTALL_PREFIXES = (
    re.compile(r'(File ")[^"\n]*/(?:site|dist)-packages/'),
    re.compile(r'(File ")[^"\n]*?/lib/python\d+\.\d+/(?:lib-dynload/)?'),
)
_FILE_PATH = re.compile(r'File "([^"\n]+)"')


@dataclass(frozen=True)
class ShownError:
    """One stored error as the browser shows it."""

    where: str  # "error", "pgq_dead_letter", "pgq_redriven[0]", ...
    summary: str  # the last line: "ValueError: poison message 7"
    traceback: str  # the whole text, paths made relative


def relative_paths(text: str) -> str:
    """``text`` with install prefixes and the project directory cut from ``File "…"`` paths."""
    for prefix in _INSTALL_PREFIXES:
        text = prefix.sub(r"\1", text)
    base = getattr(settings, "BASE_DIR", None)
    if base:
        root = str(Path(base).resolve()).rstrip("/") + "/"
        text = _FILE_PATH.sub(
            lambda m: 'File "' + m[1].removeprefix(root) + '"',
            text,
        )
    return text


def summary(text: str) -> str:
    """The last non-empty line of an error text: the exception and its message."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def _shown(where: str, text: Any) -> ShownError | None:
    if not isinstance(text, str) or not text.strip():
        return None
    return ShownError(where, summary(text), relative_paths(text))


def split_errors(message: Any) -> tuple[dict[str, Any], list[ShownError]]:
    """A message's headers with each stored traceback cut to its summary, and the errors.

    Works for live and archived messages (``error`` exists only on the latter).
    """
    headers = copy.deepcopy(message.headers) if isinstance(message.headers, dict) else {}
    errors: list[ShownError] = []
    found = _shown("error", getattr(message, "error", None))
    if found:
        errors.append(found)
    dead = headers.get("pgq_dead_letter")
    if isinstance(dead, dict):
        found = _shown("pgq_dead_letter", dead.get("last_error"))
        if found:
            errors.append(found)
            dead["last_error"] = found.summary
    redriven = headers.get("pgq_redriven")
    if isinstance(redriven, list):
        for i, entry in enumerate(redriven):
            if isinstance(entry, dict):
                found = _shown(f"pgq_redriven[{i}]", entry.get("last_error"))
                if found:
                    errors.append(found)
                    entry["last_error"] = found.summary
    return headers, errors
