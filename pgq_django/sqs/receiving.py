"""ReceiveMessage (the ``read`` right on the queue), with long polling.

:func:`start` checks the request, looks the queue up and tries one read; when that finds
nothing and the request may wait (WaitTimeSeconds, or the queue's
ReceiveMessageWaitTimeSeconds), the async view waits with ``pgq.aread_with_poll``, which
wakes on the NOTIFY of a committed send, on the event loop. :func:`finish` turns the leased
messages into SQS's answer.

Dead-letter queues: on a queue with a RedrivePolicy, a message received more than
maxReceiveCount times is not returned but moved to the dead-letter queue (``pgq.nack`` of
that delivery, which dead-letters once read_ct passes max_retries), as SQS moves it on the
receive that exceeds the count.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.utils import timezone

import pgq_django as pgq

from . import message_attributes as ma
from .digests import md5_of_attributes, md5_of_body
from .params import Call
from .queues import get_queue
from .sending import SENDER_HEADER, TRACE_HEADER, sequence_number

MAX_MESSAGES = 10
MAX_WAIT = 20
MAX_VISIBILITY_TIMEOUT = 12 * 3600
# While a long poll waits, NOTIFY wakes it; this re-check only catches messages that become
# visible without one (a delay or a lease running out).
POLL_INTERVAL_MS = 1000

SYSTEM_ATTRIBUTES = frozenset(
    {
        "SenderId",
        "SentTimestamp",
        "ApproximateReceiveCount",
        "ApproximateFirstReceiveTimestamp",
        "SequenceNumber",
        "MessageDeduplicationId",
        "MessageGroupId",
        "AWSTraceHeader",
        "DeadLetterQueueSourceArn",
    }
)


@dataclass
class Receive:
    """A checked ReceiveMessage: what to lease and how to answer."""

    call: Call
    queue: Any
    qty: int
    vt: int | None
    wait: float
    system_names: set[str]
    attribute_names: list[str]
    messages: list[Any] = field(default_factory=list)
    paused: bool = False
    received_at: datetime = field(default_factory=timezone.now)

    def read(self) -> None:
        self.received_at = timezone.now()
        try:
            self.messages = pgq.read(self.queue.name, vt=self.vt, qty=self.qty)
        except pgq.QueuePaused:
            self.paused = True

    @property
    def must_wait(self) -> bool:
        return not self.messages and self.wait > 0

    async def wait_for_messages(self) -> None:
        """Long poll: wait on the event loop (no thread is held) until a message comes."""
        if self.paused:
            await asyncio.sleep(self.wait)
            return
        try:
            self.messages = await pgq.aread_with_poll(
                self.queue.name,
                vt=self.vt,
                qty=self.qty,
                max_poll_seconds=self.wait,
                poll_interval_ms=POLL_INTERVAL_MS,
            )
        except pgq.QueuePaused:
            self.messages = []
        self.received_at = timezone.now()


def start(call: Call) -> Receive:
    """Check the request and try one read (in Django's database thread)."""
    queue = get_queue(call, "read")
    wait = call.integer("WaitTimeSeconds", 0, MAX_WAIT)
    names = set(call.strings("AttributeNames")) | set(call.strings("MessageSystemAttributeNames"))
    call.string("ReceiveRequestAttemptId", max_length=128)
    plan = Receive(
        call=call,
        queue=queue,
        qty=call.integer("MaxNumberOfMessages", 1, MAX_MESSAGES) or 1,
        vt=call.integer("VisibilityTimeout", 0, MAX_VISIBILITY_TIMEOUT),
        wait=float(queue.receive_wait_time if wait is None else wait),
        system_names=set(SYSTEM_ATTRIBUTES) if "All" in names else names & SYSTEM_ATTRIBUTES,
        attribute_names=call.strings("MessageAttributeNames"),
    )
    plan.read()
    return plan


def _dead_letter_spent(plan: Receive) -> list[Any]:
    """Move messages received more than maxReceiveCount times to the dead-letter queue;
    answer the others."""
    queue = plan.queue
    if queue.dead_letter_queue_id is None:
        return plan.messages
    keep = []
    for message in plan.messages:
        limit = message.max_retries if message.max_retries is not None else queue.max_retries
        if message.read_ct > limit:
            pgq.nack(
                queue.name,
                message.receipt,
                error=f"received more than maxReceiveCount ({limit}) times",
            )
        else:
            keep.append(message)
    return keep


def _millis(moment: Any) -> str:
    return str(int(moment.timestamp() * 1000))


def _system_attributes(plan: Receive, message: Any) -> dict[str, str]:
    headers = message.headers if isinstance(message.headers, dict) else {}
    sent = _millis(message.enqueued_at)
    found: dict[str, str | None] = {
        "SenderId": headers.get(SENDER_HEADER),
        "SentTimestamp": sent,
        "ApproximateReceiveCount": str(message.read_ct),
        # pgq_django does not record when a message was first received: this receive's time
        # for the first receive, the send time (a lower bound) for later ones.
        "ApproximateFirstReceiveTimestamp": (
            _millis(plan.received_at) if message.read_ct == 1 else sent
        ),
        "MessageGroupId": message.group_id,
        "MessageDeduplicationId": message.dedup_id,
        "SequenceNumber": sequence_number(message.msg_id) if plan.queue.fifo else None,
        "AWSTraceHeader": headers.get(TRACE_HEADER),
    }
    dead = headers.get("pgq_dead_letter")
    if isinstance(dead, dict) and isinstance(dead.get("original_queue"), str):
        found["DeadLetterQueueSourceArn"] = plan.call.queue_arn(dead["original_queue"])
    return {k: str(v) for k, v in found.items() if k in plan.system_names and v is not None}


def finish(plan: Receive) -> dict[str, Any]:
    """SQS's answer for the leased messages (in Django's database thread)."""
    out = []
    for message in _dead_letter_spent(plan):
        body = ma.body_text(message.message)
        item: dict[str, Any] = {
            "MessageId": str(message.msg_id),
            "ReceiptHandle": str(message.receipt),
            "MD5OfBody": md5_of_body(body),
            "Body": body,
        }
        system = _system_attributes(plan, message)
        if system:
            item["Attributes"] = system
        attributes = ma.from_stored(message.attributes, plan.attribute_names)
        if attributes:
            item["MessageAttributes"] = attributes
            item["MD5OfMessageAttributes"] = md5_of_attributes(attributes)
        out.append(item)
    return {"Messages": out} if out else {}
