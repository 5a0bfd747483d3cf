"""SendMessage and SendMessageBatch (the ``write`` right on the queue).

A message is checked completely before anything is sent: body characters and size (body
plus attributes, against the queue's MaximumMessageSize), attributes, delay, and the FIFO
rules (MessageGroupId required; MessageDeduplicationId required unless the queue
deduplicates by content, which then uses the SHA-256 of the body; a DelaySeconds other
than 0 refused). On a queue with DeduplicationScope=messageGroup the id is claimed within
its group (:func:`group_dedup_id`). A duplicate within five minutes is accepted and
answers the first message's id, as SQS does.

A batch is refused as a whole, as SQS refuses it, when its entries together exceed 1 MiB
or, on a FIFO queue, an entry lacks its MessageGroupId or deduplication id; any other
mistake fails its own entry.

A batch sends each run of consecutive entries with the same options (attributes, delay,
group, no deduplication id) as one batch (``pgq.send_batch``'s path): one round trip for
the common batch of plain messages.

Each message records its sender's access key id (and an ``AWSTraceHeader``) in reserved
``pgq_sqs_*`` headers, which no user send can write: a receive's ``SenderId`` is always
this endpoint's record.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

import pgq_django as pgq

from .. import telemetry
from ..api.recovery import has_dedup_id, recovers
from ..api.sending import send_one, send_trusted
from ..telemetry.carriers import SQS_TRACE_HEADER, xray_to_traceparent
from . import message_attributes as ma
from .batches import batch_entries
from .digests import md5_of_attributes, md5_of_body
from .errors import BATCH_TOO_LONG, SqsError, from_pgq_error, invalid, missing
from .params import Call
from .queues import get_queue

MAX_DELAY = 900
MAX_BATCH_BYTES = 1024 * 1024
_FIFO_ID_RE = re.compile(r"[\x21-\x7e]{1,128}")
NO_DEDUP_ID = (
    "The queue should either have ContentBasedDeduplication enabled or "
    "MessageDeduplicationId provided explicitly"
)

# Message headers where the SQS endpoint keeps what it alone knows about a message. They
# are in the reserved ``pgq_`` namespace, which every user send surface (Python, REST,
# publish through an exchange) refuses, so a receive's SenderId and AWSTraceHeader are what
# this endpoint recorded, never what a sender wrote.
SENDER_HEADER = "pgq_sqs_sender_id"
TRACE_HEADER = SQS_TRACE_HEADER

# pgq.send and pgq.send_batch without their reserved-header check (the endpoint writes its
# own records, and takes no headers from the request), with the same recovery from a lost
# connection as the public functions.
_send = recovers(has_dedup_id)(send_one)
_send_batch = recovers(has_dedup_id)(send_trusted)


@dataclass
class Outgoing:
    """One checked message, ready to send."""

    entry_id: str | None
    body: str
    attributes: dict[str, dict[str, str]]
    system: dict[str, dict[str, str]]
    delay: int | None
    group: str | None
    dedup_id: str | None
    size: int
    options: dict[str, Any] = field(default_factory=dict)

    def answer(self, msg_id: int, *, fifo: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"MessageId": str(msg_id), "MD5OfMessageBody": md5_of_body(self.body)}
        if self.entry_id is not None:
            out["Id"] = self.entry_id
        digest = md5_of_attributes(self.attributes)
        if digest is not None:
            out["MD5OfMessageAttributes"] = digest
        system = md5_of_attributes(self.system)
        if system is not None:
            out["MD5OfMessageSystemAttributes"] = system
        if fifo:
            out["SequenceNumber"] = sequence_number(msg_id)
        return out


def sequence_number(msg_id: int) -> str:
    """FIFO SequenceNumber: the msg_id, which grows with every send, zero-padded as SQS's."""
    return str(msg_id).zfill(20)


def group_dedup_id(group: str, dedup_id: str) -> str:
    """The dedup_id a FIFO queue with DeduplicationScope=messageGroup claims: the group and
    the id, apart by a space (which neither may hold), so the same id in two groups is two
    messages and a repeat in one group is a duplicate."""
    return f"{group} {dedup_id}"


def sqs_dedup_id(group: str | None, dedup_id: str | None) -> str | None:
    """The MessageDeduplicationId a sender gave, from a message's stored dedup_id."""
    if dedup_id is not None and group is not None and dedup_id.startswith(group + " "):
        return dedup_id[len(group) + 1 :]
    return dedup_id


def _not_for_this_queue_type(parameter: str, value: object) -> SqsError:
    return invalid(
        f"Value {value} for parameter {parameter} is invalid. Reason: The request include "
        "parameter that is not valid for this queue type."
    )


def _fifo_id(source: dict[str, Any], name: str) -> str | None:
    value = source.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not _FIFO_ID_RE.fullmatch(value):
        raise invalid(
            f"Value {value!r} for parameter {name} is invalid. Reason: 1-128 alphanumeric or "
            "punctuation characters."
        )
    return value


def prepare(
    queue: Any,
    source: dict[str, Any],
    caller_key: str,
    entry_id: str | None = None,
    *,
    trace_header: str | None = None,
) -> Outgoing:
    """Check one SendMessage request, or one batch entry (``entry_id``), against ``queue``.

    ``trace_header`` is the request's ``X-Amzn-Trace-Id``: kept as the message's
    ``AWSTraceHeader`` unless the message sets that system attribute itself (SQS lets the
    attribute win), and only when it is a well-formed X-Ray header."""
    body = source.get("MessageBody")
    if body is None or body == "":
        raise missing("MessageBody")
    if not isinstance(body, str):
        raise invalid("Value for parameter MessageBody is invalid. Reason: a string.")
    ma.check_text(body, "the message body")
    attributes = ma.parse_attributes(source.get("MessageAttributes"))
    system = ma.parse_attributes(source.get("MessageSystemAttributes"), system=True)
    size = len(body.encode("utf-8")) + ma.attributes_size(attributes)
    if size > queue.max_message_size:
        raise invalid(
            "One or more parameters are invalid. Reason: Message must be shorter than "
            f"{queue.max_message_size} bytes."
        )
    delay = source.get("DelaySeconds")
    if delay is not None and (
        isinstance(delay, bool) or not isinstance(delay, int) or not 0 <= delay <= MAX_DELAY
    ):
        raise invalid(
            f"Value {delay!r} for parameter DelaySeconds is invalid. Reason: must be between 0 "
            f"and {MAX_DELAY}."
        )
    group = _fifo_id(source, "MessageGroupId")
    dedup_id = _fifo_id(source, "MessageDeduplicationId")
    if queue.fifo:
        if delay:  # SQS accepts an explicit 0 and refuses only a delay
            raise _not_for_this_queue_type("DelaySeconds", delay)
        delay = None
        if group is None:
            raise missing("MessageGroupId")
        if dedup_id is None:
            if not queue.content_based_deduplication:
                raise invalid(NO_DEDUP_ID)
            dedup_id = hashlib.sha256(body.encode("utf-8")).hexdigest()
        if queue.deduplication_scope == "messageGroup":
            dedup_id = group_dedup_id(group, dedup_id)
    elif dedup_id is not None:
        raise _not_for_this_queue_type("MessageDeduplicationId", dedup_id)
    headers = {SENDER_HEADER: caller_key}
    if "AWSTraceHeader" in system:
        headers[TRACE_HEADER] = system["AWSTraceHeader"]["StringValue"]
    elif xray_to_traceparent(trace_header) is not None:
        headers[TRACE_HEADER] = str(trace_header)
    return Outgoing(
        entry_id=entry_id,
        body=body,
        attributes=attributes,
        system=system,
        delay=delay,
        group=group,
        dedup_id=dedup_id,
        size=size,
        options={
            "headers": headers,
            "attributes": ma.to_stored(attributes),
            "delay": delay,
            "group": group,
        },
    )


def send_message(call: Call) -> dict[str, Any]:
    queue = get_queue(call, "write")
    out = prepare(queue, call.params, call.caller.key_id, trace_header=call.trace_header)
    with _in_context(out):
        msg_id = _send(queue.name, out.body, dedup_id=out.dedup_id, **out.options)
    return out.answer(msg_id, fifo=queue.fifo)


def _in_context(out: Outgoing) -> Any:
    """The trace context a message's send is made in: its ``traceparent`` message attribute
    (other SDKs' instrumentations write one), else its X-Ray header (boto3's)."""
    return telemetry.continuing(
        out.options["attributes"].get("traceparent"), xray=out.options["headers"].get(TRACE_HEADER)
    )


def _runs(items: list[Outgoing]) -> list[list[Outgoing]]:
    """Consecutive messages that one send_batch call can carry (same options, no dedup)."""
    runs: list[list[Outgoing]] = []
    last: Outgoing | None = None
    for item in items:
        # Options hold only strings, ints and None (and dicts of them), so comparing them
        # as values is what comparing their JSON was, without encoding each entry's.
        if (
            last is not None
            and item.dedup_id is None
            and last.dedup_id is None
            and item.options == last.options
        ):
            runs[-1].append(item)
        else:
            runs.append([item])
        last = item
    return runs


def _entry_size(entry: dict[str, Any]) -> int:
    """What an entry counts toward the 1 MiB a batch may carry, read leniently (the
    entry's own checks come later): its body's bytes plus its attributes' names, types and
    values."""
    body = entry.get("MessageBody")
    size = len(body.encode("utf-8", "surrogatepass")) if isinstance(body, str) else 0
    attributes = entry.get("MessageAttributes")
    if isinstance(attributes, dict):
        for name, value in attributes.items():
            size += len(str(name).encode("utf-8", "surrogatepass"))
            if isinstance(value, dict):
                size += sum(
                    len(item.encode("utf-8", "surrogatepass"))
                    for key in ("DataType", "StringValue", "BinaryValue")
                    if isinstance(item := value.get(key), str)
                )
    return size


def _check_batch(queue: Any, entries: list[dict[str, Any]]) -> None:
    """The checks SQS makes of a batch as a whole, refusing the request (nothing is sent):
    the entries' total size, and on a FIFO queue each entry's group and deduplication id."""
    total = sum(_entry_size(entry) for entry in entries)
    if total > MAX_BATCH_BYTES:
        raise SqsError(
            BATCH_TOO_LONG,
            f"Batch requests cannot be longer than {MAX_BATCH_BYTES} bytes. You have sent "
            f"{total} bytes.",
        )
    if not queue.fifo:
        return
    for entry in entries:
        if entry.get("MessageGroupId") is None:
            raise invalid("The request must contain the parameter MessageGroupId.")
        if entry.get("MessageDeduplicationId") is None and not queue.content_based_deduplication:
            raise invalid(NO_DEDUP_ID)


def send_message_batch(call: Call) -> dict[str, Any]:
    entries = batch_entries(call)
    queue = get_queue(call, "write")
    _check_batch(queue, entries)
    ready: list[Outgoing] = []
    failed: list[dict[str, Any]] = []
    for entry in entries:
        try:
            ready.append(
                prepare(
                    queue,
                    entry,
                    call.caller.key_id,
                    entry_id=entry["Id"],
                    trace_header=call.trace_header,
                )
            )
        except SqsError as exc:
            failed.append(exc.as_batch_entry(entry["Id"]))
    sent: dict[str, dict[str, Any]] = {}
    for run in _runs(ready):
        try:
            first = run[0]
            with _in_context(first):
                if first.dedup_id is not None:
                    ids = [_send(queue.name, first.body, dedup_id=first.dedup_id, **first.options)]
                else:
                    ids = _send_batch(queue.name, [item.body for item in run], **first.options)
        except pgq.PgqError as exc:
            error = from_pgq_error(exc)
            failed.extend(error.as_batch_entry(str(item.entry_id)) for item in run)
            continue
        for item, msg_id in zip(run, ids, strict=True):
            sent[str(item.entry_id)] = item.answer(msg_id, fifo=queue.fifo)
    order = [str(e["Id"]) for e in entries]
    return {
        "Successful": [sent[i] for i in order if i in sent],
        "Failed": sorted(failed, key=lambda f: order.index(f["Id"])),
    }
