"""Acknowledging messages: DeleteMessage(+Batch), ChangeMessageVisibility(+Batch).

A ReceiptHandle is the pgq receipt ``"<msg_id>:<read_ct>"`` of one delivery, so it fences
out a consumer whose lease ran out and whose message was received again since:

* DeleteMessage with such a stale handle succeeds but deletes nothing (what SQS documents:
  "you must provide the most recently received receipt handle … otherwise, the request
  succeeds, but the message will not be deleted"); the newest handle deletes it.
* ChangeMessageVisibility with a stale handle, or for a message already deleted, answers
  InvalidParameterValue, "The receipt handle has expired", as SQS does.
* A handle that is not a receipt at all answers ReceiptHandleIsInvalid.

All need the ``read`` right on the queue.
"""

from __future__ import annotations

import re
from typing import Any

import pgq_django as pgq

from .batches import batch_entries
from .errors import SqsError, from_pgq_error, invalid
from .params import Call
from .queues import get_queue

MAX_VISIBILITY_TIMEOUT = 12 * 3600
_RECEIPT_RE = re.compile(r"([1-9][0-9]{0,18}):([1-9][0-9]{0,9})")


def _receipt(handle: Any) -> pgq.Receipt:
    found = _RECEIPT_RE.fullmatch(handle) if isinstance(handle, str) else None
    if found is None or int(found[1]) >= 2**63 or int(found[2]) >= 2**31:
        raise SqsError(
            "ReceiptHandleIsInvalid",
            f'The input receipt handle "{handle}" is not a valid receipt handle.',
        )
    return pgq.Receipt(int(found[1]), int(found[2]))


def _expired(handle: str) -> SqsError:
    """SQS's answer to a well-formed handle of a delivery that is over (the message was
    deleted or received again since)."""
    return invalid(
        f"Value {handle} for parameter ReceiptHandle is invalid. Reason: The receipt handle "
        "has expired."
    )


def _visibility(value: Any, name: str = "VisibilityTimeout") -> int:
    if value is None:
        raise SqsError("MissingParameter", f"The request must contain the parameter {name}.")
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(f"Value {value!r} for parameter {name} is invalid. Reason: an integer.")
    if not 0 <= value <= MAX_VISIBILITY_TIMEOUT:
        raise invalid(
            f"Value {value} for parameter {name} is invalid. Reason: must be between 0 and "
            f"{MAX_VISIBILITY_TIMEOUT}."
        )
    return value


def delete_message(call: Call) -> dict[str, Any]:
    queue = get_queue(call, "read")
    receipt = _receipt(call.string("ReceiptHandle", required=True))
    pgq.delete(queue.name, receipt)
    return {}


def delete_message_batch(call: Call) -> dict[str, Any]:
    entries = batch_entries(call)
    queue = get_queue(call, "read")
    receipts, ok, failed = [], [], []
    for entry in entries:
        try:
            receipts.append(_receipt(entry.get("ReceiptHandle")))
            ok.append({"Id": entry["Id"]})
        except SqsError as exc:
            failed.append(exc.as_batch_entry(entry["Id"]))
    if receipts:
        pgq.delete(queue.name, receipts)
    return {"Successful": ok, "Failed": failed}


def change_message_visibility(call: Call) -> dict[str, Any]:
    queue = get_queue(call, "read")
    handle = call.string("ReceiptHandle", required=True)
    receipt = _receipt(handle)
    seconds = _visibility(call.params.get("VisibilityTimeout"))
    if pgq.set_vt(queue.name, receipt, seconds) is None:
        raise _expired(handle)
    return {}


def change_message_visibility_batch(call: Call) -> dict[str, Any]:
    entries = batch_entries(call)
    queue = get_queue(call, "read")
    ok, failed = [], []
    for entry in entries:
        try:
            receipt = _receipt(entry.get("ReceiptHandle"))
            seconds = _visibility(entry.get("VisibilityTimeout"))
            try:
                changed = pgq.set_vt(queue.name, receipt, seconds)
            except pgq.PgqError as exc:
                raise from_pgq_error(exc) from None
            if changed is None:
                raise _expired(entry["ReceiptHandle"])
            ok.append({"Id": entry["Id"]})
        except SqsError as exc:
            failed.append(exc.as_batch_entry(entry["Id"]))
    return {"Successful": ok, "Failed": failed}
