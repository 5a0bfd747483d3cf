"""The rules every SQS batch request shares: 1-10 entries with distinct, well-formed ids.

A request that breaks them is refused as a whole (nothing is done); otherwise each entry
succeeds or fails on its own and the answer lists both (``Successful`` / ``Failed``). The
errors are worded as SQS words them (an empty batch names the action's entry type,
``SendMessageBatchRequestEntry``), since clients match on the text.
"""

from __future__ import annotations

import re
from typing import Any

from .errors import (
    EMPTY_BATCH,
    IDS_NOT_DISTINCT,
    INVALID_BATCH_ENTRY_ID,
    TOO_MANY_ENTRIES,
    SqsError,
)
from .params import Call

MAX_ENTRIES = 10
_ENTRY_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,80}")


def batch_entries(call: Call) -> list[dict[str, Any]]:
    entries = call.entries("Entries")
    if not entries:
        raise SqsError(
            EMPTY_BATCH, f"There should be at least one {call.action}RequestEntry in the request."
        )
    if len(entries) > MAX_ENTRIES:
        raise SqsError(
            TOO_MANY_ENTRIES,
            f"Maximum number of entries per request are {MAX_ENTRIES}. You have sent "
            f"{len(entries)}.",
        )
    seen: set[str] = set()
    for entry in entries:
        entry_id = entry.get("Id")
        if not isinstance(entry_id, str) or not _ENTRY_ID_RE.fullmatch(entry_id):
            raise SqsError(
                INVALID_BATCH_ENTRY_ID,
                "A batch entry id can only contain alphanumeric characters, hyphens and "
                "underscores. It can be at most 80 letters long.",
            )
        if entry_id in seen:
            raise SqsError(IDS_NOT_DISTINCT, f"Id {entry_id} repeated.")
        seen.add(entry_id)
    return entries
