"""Queue attributes: SQS names and string values to and from pgq_django queue settings.

================================  ==========================================================
SQS attribute                     pgq_django queue
================================  ==========================================================
VisibilityTimeout                 visibility_timeout
DelaySeconds                      delivery_delay
MessageRetentionPeriod            retention
MaximumMessageSize                max_message_size
ReceiveMessageWaitTimeSeconds     receive_wait_time
RedrivePolicy                     dead_letter_queue + max_retries (= maxReceiveCount)
FifoQueue                         fifo (set at creation only)
ContentBasedDeduplication         content_based_deduplication (FIFO only)
DeduplicationScope                deduplication_scope (FIFO only: queue | messageGroup)
FifoThroughputLimit               fifo_throughput_limit (FIFO only: perQueue |
                                  perMessageGroupId; kept and answered, no quota)
ApproximateNumberOfMessages*      pgq.metrics(): waiting, in flight, delayed
CreatedTimestamp, LastModified…   created_at, updated_at
QueueArn                          arn:aws:sqs:<signing region>:<SQS_ACCOUNT_ID>:<name>
================================  ==========================================================

A queue without a RedrivePolicy redelivers a message for as long as it is kept, as SQS does;
pgq_django records that as ``max_retries = UNLIMITED_RECEIVES``.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pgq_django as pgq

from .. import access
from .errors import SqsError
from .params import Call, queue_name_from_arn

UNLIMITED_RECEIVES = 1_000_000
MAX_RECEIVE_COUNT = 1000

# What CreateQueue gives a queue when the request does not say (SQS's defaults).
CREATE_DEFAULTS: dict[str, Any] = {
    "visibility_timeout": 30,
    "delivery_delay": 0,
    "retention": 4 * 24 * 3600,
    "max_message_size": 1024 * 1024,
    "receive_wait_time": 0,
    "max_retries": UNLIMITED_RECEIVES,
}

# Whole-number attributes: SQS name -> (queue field, lowest, highest).
NUMBERS: dict[str, tuple[str, int, int]] = {
    "DelaySeconds": ("delivery_delay", 0, 900),
    "MaximumMessageSize": ("max_message_size", 1024, 1024 * 1024),
    "MessageRetentionPeriod": ("retention", 60, 14 * 24 * 3600),
    "ReceiveMessageWaitTimeSeconds": ("receive_wait_time", 0, 20),
    "VisibilityTimeout": ("visibility_timeout", 0, 12 * 3600),
}
# FIFO-only choices: SQS name -> (queue field, allowed values).
FIFO_CHOICES: dict[str, tuple[str, tuple[str, ...]]] = {
    "DeduplicationScope": ("deduplication_scope", ("messageGroup", "queue")),
    "FifoThroughputLimit": ("fifo_throughput_limit", ("perQueue", "perMessageGroupId")),
}
SETTABLE = frozenset({*NUMBERS, "RedrivePolicy", "ContentBasedDeduplication", *FIFO_CHOICES})
CREATE_ONLY = frozenset({"FifoQueue"})
COUNTS = frozenset(
    {
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
    }
)
READ_ONLY = COUNTS | {"CreatedTimestamp", "LastModifiedTimestamp", "QueueArn"}
READABLE = SETTABLE | CREATE_ONLY | READ_ONLY

_WHOLE_NUMBER = re.compile(r"[0-9]{1,10}")  # ASCII digits only, as SQS reads them


def _bad_value(name: str, value: str, reason: str) -> SqsError:
    return SqsError(
        "InvalidAttributeValue", f"Invalid value for the parameter {name}. Reason: {reason}"
    )


def _boolean(name: str, value: str) -> bool:
    if value.lower() not in ("true", "false"):
        raise _bad_value(name, value, "must be true or false.")
    return value.lower() == "true"


def _redrive(call: Call, value: str, *, fifo: bool) -> dict[str, Any]:
    """RedrivePolicy JSON -> dead_letter_queue and max_retries; "" removes the policy."""
    if value == "":
        return {"dead_letter_queue": None, "max_retries": UNLIMITED_RECEIVES}
    try:
        policy = json.loads(value)
    except (ValueError, RecursionError):  # RecursionError: arrays nested thousands deep
        policy = None
    if not isinstance(policy, dict) or not {"deadLetterTargetArn", "maxReceiveCount"} <= set(
        policy
    ):
        raise _bad_value(
            "RedrivePolicy", value, "a JSON object with deadLetterTargetArn and maxReceiveCount."
        )
    count = policy["maxReceiveCount"]
    if isinstance(count, str) and _WHOLE_NUMBER.fullmatch(count):
        count = int(count)
    if isinstance(count, bool) or not isinstance(count, int):
        count = -1
    if not 1 <= count <= MAX_RECEIVE_COUNT:
        raise _bad_value(
            "RedrivePolicy", value, f"maxReceiveCount must be between 1 and {MAX_RECEIVE_COUNT}."
        )
    name = queue_name_from_arn(policy["deadLetterTargetArn"], "RedrivePolicy", call.account)
    try:
        dlq = pgq.get_queue(name)
    except pgq.QueueNotFound:
        dlq = None
    # A queue the caller has no right on is answered as a missing one, before anything
    # about it (its type) is said.
    if dlq is None or not (
        access.may(call.user, "write", dlq)
        or access.visible_queues(call.user).filter(pk=dlq.pk).exists()
    ):
        raise _bad_value("RedrivePolicy", value, "Dead letter target does not exist.")
    if dlq.fifo != fifo:
        raise _bad_value(
            "RedrivePolicy",
            value,
            "The dead-letter queue of a FIFO queue must be a FIFO queue, and of a standard "
            "queue a standard queue.",
        )
    access.require(call.user, "write", dlq)
    return {"dead_letter_queue": dlq, "max_retries": count}


def queue_changes(
    call: Call, attributes: dict[str, str], *, fifo: bool, creating: bool
) -> dict[str, Any]:
    """Queue settings for SQS attributes; every attribute is checked before any is used."""
    changes: dict[str, Any] = {}
    for name, value in attributes.items():
        if name in NUMBERS:
            field, low, high = NUMBERS[name]
            if not _WHOLE_NUMBER.fullmatch(value) or not low <= int(value) <= high:
                raise _bad_value(name, value, f"must be an integer between {low} and {high}.")
            changes[field] = int(value)
        elif name == "RedrivePolicy":
            changes.update(_redrive(call, value, fifo=fifo))
        elif name == "ContentBasedDeduplication":
            if not fifo:
                raise _bad_value(name, value, "only FIFO queues deduplicate by content.")
            changes["content_based_deduplication"] = _boolean(name, value)
        elif name in FIFO_CHOICES:
            if not fifo:  # SQS knows these attributes only on FIFO queues
                raise SqsError("InvalidAttributeName", f"Unknown Attribute {name}.")
            field, allowed = FIFO_CHOICES[name]
            if value not in allowed:
                raise _bad_value(name, value, f"must be one of {', '.join(allowed)}.")
            changes[field] = value
        elif name == "FifoQueue" and creating:
            if _boolean(name, value) != fifo:
                raise _bad_value(
                    name, value, "a FIFO queue's name ends in .fifo, and only a FIFO queue's."
                )
        elif name in CREATE_ONLY or name in READ_ONLY:
            raise SqsError("InvalidAttributeName", f"The attribute {name} cannot be changed.")
        else:
            raise SqsError("InvalidAttributeName", f"Unknown Attribute {name}.")
    return changes


def check_high_throughput(queue: Any, changes: dict[str, Any]) -> None:
    """SQS's rule for a FIFO queue's two high-throughput attributes together: a throughput
    limit per message group needs deduplication per message group (``queue`` is None for
    a queue being created, which starts from SQS's defaults)."""
    scope = changes.get(
        "deduplication_scope", queue.deduplication_scope if queue is not None else "queue"
    )
    limit = changes.get(
        "fifo_throughput_limit",
        queue.fifo_throughput_limit if queue is not None else "perQueue",
    )
    if limit == "perMessageGroupId" and scope != "messageGroup":
        raise _bad_value(
            "FifoThroughputLimit",
            limit,
            "The perMessageGroupId value is allowed only when the value for "
            "DeduplicationScope is messageGroup.",
        )


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def describe(call: Call, queue: Any, names: list[str]) -> dict[str, str]:
    """The requested attributes of ``queue`` as SQS answers them (``All`` for every one)."""
    wanted = set(READABLE) if "All" in names else set(names)
    unknown = wanted - READABLE
    if unknown:
        raise SqsError("InvalidAttributeName", f"Unknown Attribute {sorted(unknown)[0]}.")
    out: dict[str, str] = {}
    for name, (field, _low, _high) in NUMBERS.items():
        if name in wanted:
            out[name] = _number(getattr(queue, field))
    if "RedrivePolicy" in wanted and queue.dead_letter_queue_id is not None:
        out["RedrivePolicy"] = json.dumps(
            {
                "deadLetterTargetArn": call.queue_arn(queue.dead_letter_queue.name),
                "maxReceiveCount": queue.max_retries,
            },
            separators=(",", ":"),
        )
    if queue.fifo:
        if "FifoQueue" in wanted:
            out["FifoQueue"] = "true"
        if "ContentBasedDeduplication" in wanted:
            out["ContentBasedDeduplication"] = str(queue.content_based_deduplication).lower()
        for name, (field, _allowed) in FIFO_CHOICES.items():
            if name in wanted:
                out[name] = getattr(queue, field)
    if wanted & COUNTS:
        metrics = pgq.metrics(queue.name)
        waiting = metrics.queue_length - metrics.in_flight - metrics.delayed
        counts = {
            "ApproximateNumberOfMessages": max(waiting, 0),
            "ApproximateNumberOfMessagesNotVisible": metrics.in_flight,
            "ApproximateNumberOfMessagesDelayed": metrics.delayed,
        }
        out.update({k: str(v) for k, v in counts.items() if k in wanted})
    if "CreatedTimestamp" in wanted:
        out["CreatedTimestamp"] = str(int(queue.created_at.timestamp()))
    if "LastModifiedTimestamp" in wanted:
        out["LastModifiedTimestamp"] = str(int(queue.updated_at.timestamp()))
    if "QueueArn" in wanted:
        out["QueueArn"] = call.queue_arn(queue.name)
    return out


def matches(call: Call, queue: Any, attributes: dict[str, str]) -> bool:
    """Whether an existing queue already has the attributes a CreateQueue asks for (SQS
    then answers the existing queue's URL instead of QueueNameExists)."""
    try:
        wanted = queue_changes(call, attributes, fifo=queue.fifo, creating=True)
    except (SqsError, pgq.PgqError):
        return False
    for field, value in wanted.items():
        current = getattr(queue, field)
        if field == "dead_letter_queue":
            if (value.pk if value else None) != queue.dead_letter_queue_id:
                return False
        elif current != value:
            return False
    return True
