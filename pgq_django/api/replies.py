"""Request and reply: a handler's return value sent back to whoever asked.

``pgq.send(queue, message, reply_to="replies")`` marks the message with the reserved header
``pgq_reply_to``; the worker that handles it sends the handler's return value to that queue,
in the transaction of its ack, with ``headers["pgq_correlation_id"]`` = the request's msg_id.
Only the API writes ``pgq_*`` headers (every send refuses them from a sender), so what a
sender writes can never choose where a reply goes; a transport acting for a user (REST)
checks that the user may write to the reply queue before it asks.

``pgq.request(queue, message, timeout=…)`` is the round trip: it sends the request and waits
for its reply on the reply queue with the process's LISTEN wake-up (one
:class:`~pgq_django.api.waiting.MessageWait`, no polling loop), takes the reply and answers
its body. On timeout it cancels the request and raises RequestTimeout; the request expires
when the timeout does, and so does a reply sent after it, so a late reply is never delivered
(the expiry duty archives it as ``expired``) and a later caller, waiting for its own
correlation id, never sees it.
"""

from __future__ import annotations

import contextlib
from datetime import datetime
from functools import partial
from typing import Any, Unpack

from asgiref.sync import sync_to_async
from django.utils import timezone

from .. import validation as v
from ..conf import settings
from ..exceptions import InvalidArgument, QueueAlreadyExists, QueueNotFound, RequestTimeout
from ..models import Message, Outcome
from ..types import Duration, QueueRef
from .delivery import cancel, result
from .messages import archive, delete, read
from .queues import create_queue, get_queue
from .recovery import recovers
from .refs import message_manager, message_ref
from .sending import SendOptions, refuse_inside_atomic, send_trusted
from .waiting import MessageWait
from .workflows import CORRELATION_ID, REPLY_TO, REQUEST, send_after

#: Longest ``timeout`` of :func:`request`.
MAX_REQUEST_TIMEOUT = 24 * 3600.0


def reply_queue(reply_to: QueueRef | None) -> str:
    """The queue replies come back on: ``reply_to``, or ``PGQ["REPLY_QUEUE"]`` (made on
    first use)."""
    if reply_to is not None:
        return get_queue(reply_to).name
    name = v.name(settings.REPLY_QUEUE)
    try:
        return get_queue(name).name
    except QueueNotFound:
        with contextlib.suppress(QueueAlreadyExists):  # another process made it meanwhile
            create_queue(name)
        return name


def send_reply(message: Message, value: Any) -> int | None:
    """Send a handler's return value to the request's reply queue, if it asked for one.

    The worker calls this before the ack, in the same transaction when the handler runs in
    one, so the reply exists exactly when the request is acknowledged. A reply to a
    ``pgq.request`` expires with its request: sent after the requester gave up, it is never
    delivered.
    """
    headers = message.headers or {}
    target = headers.get(REPLY_TO)
    if not target:
        return None
    name = str(target)
    options: dict[str, Any] = {"headers": {CORRELATION_ID: message.msg_id}}
    left = None
    if headers.get(REQUEST) and isinstance(message.expires_at, datetime):
        left = (message.expires_at - timezone.now()).total_seconds()
        options["expires_in"] = max(left, 0.001)
    reply = send_trusted(name, [value], **options)[0]
    if left is not None and left <= 0:
        # The requester has given up: the reply goes straight to the archive, expired,
        # where it can be read by id but is never delivered.
        message_manager().archive(name, [message_ref(reply)], outcome=Outcome.EXPIRED)
    return reply


def _correlated(replies: str, msg_id: int) -> Any:
    """The lease of the reply to ``msg_id`` (found by its correlation header)."""
    return partial(read, replies, qty=1, filters={"headers": {CORRELATION_ID: msg_id}})


def _start(
    queue: QueueRef, message: Any, timeout: Any, reply_to: Any, options: dict[str, Any]
) -> tuple[str, str, int, float]:
    """Check the arguments and send the request; returns (queue, reply queue, msg_id, timeout)."""
    refuse_inside_atomic("request")
    name = v.name(queue)
    seconds = v.seconds(timeout, "timeout", minimum=0.001)
    if seconds > MAX_REQUEST_TIMEOUT:
        raise InvalidArgument(
            f"timeout must be at most {MAX_REQUEST_TIMEOUT:.0f} seconds.", field="timeout"
        )
    v.unreserved_headers(options.get("headers"))
    replies = reply_queue(reply_to)
    options["headers"] = {**(options.get("headers") or {}), REQUEST: True}
    options["expires_in"] = seconds
    msg_id = send_after(name, message, after=None, reply_to=replies, options=options)
    return name, replies, msg_id, seconds


def _answer(name: str, replies: str, msg_id: int, found: list[Message]) -> Any:
    if not found:
        why = _why_unanswered(name, msg_id)
        _give_up(name, replies, msg_id)
        raise RequestTimeout(
            f"No reply to message {msg_id} on {replies!r} in time: {why} "
            "The request was cancelled.",
            msg_id=msg_id,
            queue=name,
        )
    reply = found[0]
    delete(replies, reply.receipt)
    return reply.message


def _why_unanswered(name: str, msg_id: int) -> str:
    """What the request's own row says about the silence: never leased almost always means
    no worker serves the queue (there is no record of which workers run where, so the
    request's read count is the evidence), leased means a handler took it and did not
    answer in time."""
    state = result(msg_id)
    attempts = state.attempts if state is not None else 0
    if attempts == 0:
        return (
            f"no consumer leased it from {name!r} meanwhile. Is a worker serving that queue "
            f"(manage.py pgq_worker --queue {name}), with a handler registered for it?"
        )
    times = "time" if attempts == 1 else "times"
    return f"it was leased {attempts} {times} from {name!r} but no reply was sent."


def _give_up(name: str, replies: str, msg_id: int) -> None:
    """Leave nothing behind: cancel the request (archived now, or when its handler ends)
    and archive a reply that arrived at the last moment."""
    cancel(name, msg_id)
    late = _correlated(replies, msg_id)()
    if late:
        archive(replies, [m.receipt for m in late])


def _wait(replies: str, msg_id: int, seconds: float) -> MessageWait[Message]:
    # The reply's send wakes the wait; the poll interval is only the fallback for a missed
    # notification, so it is the whole timeout: no re-check loop.
    return MessageWait(
        replies, _correlated(replies, msg_id), seconds=seconds, poll_interval=seconds, limit=1
    )


@recovers(False)
def request(
    queue: QueueRef,
    message: Any,
    *,
    timeout: Duration,
    reply_to: QueueRef | None = None,
    **options: Unpack[SendOptions],
) -> Any:
    """Send ``message`` to ``queue`` and wait for its handler's reply; returns the reply's body.

    The reply comes back on ``reply_to`` (default ``PGQ["REPLY_QUEUE"]``, made on first
    use). After ``timeout`` seconds without one the request is cancelled and
    :class:`~pgq_django.RequestTimeout` is raised; a reply sent later expires unread. Not
    inside ``transaction.atomic()``: the request must commit before a worker can see it.
    Takes :func:`pgq_django.send`'s options (``expires_in`` is the timeout).
    """
    name, replies, msg_id, seconds = _start(queue, message, timeout, reply_to, dict(options))
    found = _wait(replies, msg_id, seconds).consume()
    return _answer(name, replies, msg_id, found)


async def arequest(
    queue: QueueRef,
    message: Any,
    *,
    timeout: Duration,
    reply_to: QueueRef | None = None,
    **options: Unpack[SendOptions],
) -> Any:
    """Async twin of :func:`request` that waits on the event loop, not in a thread."""
    start = sync_to_async(_start, thread_sensitive=True)
    name, replies, msg_id, seconds = await start(queue, message, timeout, reply_to, dict(options))
    found = await _wait(replies, msg_id, seconds).aconsume()
    answer = sync_to_async(_answer, thread_sensitive=True)
    return await answer(name, replies, msg_id, found)
