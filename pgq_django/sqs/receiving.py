"""ReceiveMessage (the ``read`` right on the queue), with long polling.

:func:`start` checks the request, looks the queue up and tries one read; when that finds
nothing and the request may wait (WaitTimeSeconds, or the queue's
ReceiveMessageWaitTimeSeconds), the async view waits with :meth:`Receive.wait_for_messages`,
a :class:`pgq_django.api.waiting.MessageWait` that wakes on the NOTIFY of a committed send,
on the event loop, holding no thread and no database connection. :func:`finish` turns the
leased messages into SQS's answer.

Dead-letter queues: on a queue with a RedrivePolicy, a message received more than
maxReceiveCount times is not returned but moved to the dead-letter queue (``pgq.nack`` of
that delivery, which dead-letters once read_ct passes max_retries), as SQS moves it on the
receive that exceeds the count.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any

from django.db import close_old_connections
from django.utils import timezone

import pgq_django as pgq

from ..api.waiting import MessageWait, until_disconnected
from ..telemetry import carriers
from . import message_attributes as ma
from .digests import md5_of_attributes, md5_of_body
from .errors import invalid
from .params import Call
from .queues import get_queue
from .sending import SENDER_HEADER, sequence_number, sqs_dedup_id

MAX_MESSAGES = 10
MAX_WAIT = 20
MAX_VISIBILITY_TIMEOUT = 12 * 3600
# While a long poll waits, NOTIFY wakes it; this re-check (seconds) only catches messages that
# become visible without one (a delay or a lease running out).
POLL_INTERVAL = 1.0

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
        try:
            self.messages = self.lease()
        except pgq.QueuePaused:
            self.paused = True

    def lease(self) -> list[Any]:
        """One lease for this receive (a paused queue raises QueuePaused)."""
        self.received_at = timezone.now()
        return pgq.read(self.queue.name, vt=self.vt, qty=self.qty)

    @property
    def must_wait(self) -> bool:
        return not self.messages and self.wait > 0

    async def wait_for_messages(
        self, disconnected: Callable[[], Awaitable[Any]] | None = None
    ) -> None:
        """Long poll, on the event loop, until a message comes or the wait is over.

        As ``pgq.aread_with_poll``, a :class:`~pgq_django.api.waiting.MessageWait`:
        registered with the process's LISTEN connection before it looks, so a send that
        commits meanwhile wakes it; re-checking every POLL_INTERVAL for messages that become
        visible without a notification. Unlike it, every look that finds nothing lets go of
        its database connection as Django does when a request ends
        (``close_old_connections``), so however it is served a waiting request holds
        neither a thread nor a connection (under pgq_django.asgi a kept connection is its
        pool thread's, serving other requests meanwhile). A queue paused before or during
        the wait looks empty: the wait ends with no messages, at the deadline when it was
        paused from the start. ``disconnected`` ends the wait when the client goes away
        (:class:`~pgq_django.api.waiting.ClientGone`).
        """
        if self.paused:
            pause = asyncio.sleep(self.wait)
            await (pause if disconnected is None else until_disconnected(pause, disconnected))
            return
        waiting = MessageWait(
            self.queue.name,
            self.lease,
            seconds=self.wait,
            poll_interval=POLL_INTERVAL,
            limit=self.qty,
            release=close_old_connections,
            give_back=partial(pgq.release_leases, self.queue.name),
        )
        try:
            self.messages = await waiting.aconsume(disconnected)
        except pgq.QueuePaused:
            self.paused = True


def _bounded(call: Call, name: str, low: int, high: int, rule: str) -> int | None:
    """A whole-number parameter of ReceiveMessage; a number out of range is refused in SQS's
    words ("Value 11 for parameter MaxNumberOfMessages is invalid. Reason: Must be between
    1 and 10, if provided.")."""
    value = call.params.get(name)
    if isinstance(value, int) and not isinstance(value, bool) and not low <= value <= high:
        raise invalid(
            f"Value {value} for parameter {name} is invalid. Reason: {rule}, if provided."
        )
    found: int | None = call.integer(name, low, high)
    return found


def start(call: Call) -> Receive:
    """Check the request and try one read (in Django's database thread)."""
    queue = get_queue(call, "read")
    wait = _bounded(call, "WaitTimeSeconds", 0, MAX_WAIT, f"Must be >= 0 and <= {MAX_WAIT}")
    names = set(call.strings("AttributeNames")) | set(call.strings("MessageSystemAttributeNames"))
    call.string("ReceiveRequestAttemptId", max_length=128)
    plan = Receive(
        call=call,
        queue=queue,
        qty=_bounded(
            call, "MaxNumberOfMessages", 1, MAX_MESSAGES, f"Must be between 1 and {MAX_MESSAGES}"
        )
        or 1,
        vt=_bounded(
            call,
            "VisibilityTimeout",
            0,
            MAX_VISIBILITY_TIMEOUT,
            f"Must be >= 0 and <= {MAX_VISIBILITY_TIMEOUT}",
        ),
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
        "MessageDeduplicationId": sqs_dedup_id(message.group_id, message.dedup_id),
        "SequenceNumber": sequence_number(message.msg_id) if plan.queue.fifo else None,
        "AWSTraceHeader": carriers.xray_header(headers),
    }
    dead = headers.get("pgq_dead_letter")
    if isinstance(dead, dict) and isinstance(dead.get("original_queue"), str):
        found["DeadLetterQueueSourceArn"] = plan.call.queue_arn(dead["original_queue"])
    return {
        k: ma.deliverable(str(v))
        for k, v in found.items()
        if k in plan.system_names and v is not None
    }


def finish(plan: Receive) -> dict[str, Any]:
    """SQS's answer for the leased messages (in Django's database thread)."""
    out = []
    # Most receives ask for no attributes: then none is looked at, per message or at all.
    system_names = plan.system_names
    attribute_names = plan.attribute_names
    for message in _dead_letter_spent(plan):
        body = ma.body_text(message.message)
        item: dict[str, Any] = {
            "MessageId": str(message.msg_id),
            "ReceiptHandle": str(message.receipt),
            "MD5OfBody": md5_of_body(body),
            "Body": body,
        }
        if system_names:
            system = _system_attributes(plan, message)
            if system:
                item["Attributes"] = system
        if attribute_names:
            attributes = ma.from_stored(message.attributes, attribute_names)
            if attributes:
                item["MessageAttributes"] = attributes
                item["MD5OfMessageAttributes"] = md5_of_attributes(attributes)
        out.append(item)
    return {"Messages": out} if out else {}
