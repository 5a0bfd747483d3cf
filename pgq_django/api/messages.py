"""Sending, leasing and acknowledging messages: the functions users call most.

Each function validates its arguments, runs one statement of the message manager and turns
"the statement found no queue" into QueueNotFound (or QueuePaused / MessageTooLarge).
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from typing import Any, Unpack

from .. import telemetry
from .. import validation as v
from ..conf import settings
from ..exceptions import InvalidArgument
from ..models import Message
from ..types import Duration, MessageRef, MessageRefs, QueueRef
from .delivery import release_leases
from .recovery import has_dedup_id, recovers
from .refs import message_manager, message_ref, message_refs, queue_missing
from .sending import SendOptions, refuse_inside_atomic, send_one, send_trusted
from .waiting import MessageWait
from .workflows import send_after


@recovers(has_dedup_id)
def send(
    queue: QueueRef,
    message: Any,
    *,
    wait: Duration | None = None,
    after: Iterable[int] | None = None,
    reply_to: QueueRef | None = None,
    **options: Unpack[SendOptions],
) -> int:
    """Put one message on a queue; returns its msg_id.

    Inside ``transaction.atomic()`` on the queue database the message becomes visible only
    when the caller's transaction commits, and disappears if it rolls back.

    The options (all keyword-only, see :class:`SendOptions`): ``headers``, ``attributes``,
    ``label``, ``priority`` (lower is sooner), ``delay``, ``group`` (FIFO message group),
    ``dedup_id`` (a repeat within 5 minutes returns the first msg_id), ``expires_in``,
    ``max_retries`` and ``retry_delay``. An unknown option raises InvalidArgument.

    A queue with ``max_length`` that holds that many messages raises QueueFull; with
    ``wait=seconds`` the send instead retries until there is room or the time is up (at
    most ``PGQ["MAX_WAIT_SECONDS"]``; not inside ``transaction.atomic()``, which the wait
    would hold open).

    ``after=[msg_id, …]`` holds the message invisible until every message named is
    acknowledged, and dead-letters it (or archives it as ``dead``) with the reason if one
    of them ends dead, expired or cancelled; they may be in other queues and must exist
    already (see docs/workflows.md). ``reply_to="queue"`` asks the worker to send the
    handler's return value there, with ``headers["pgq_correlation_id"]`` = this msg_id.
    """
    v.unreserved_headers(options.get("headers"))
    if after is None and reply_to is None:
        return send_one(queue, message, wait=wait, **options)
    if wait is not None:
        raise InvalidArgument("wait cannot be combined with after or reply_to.", field="wait")
    return send_after(queue, message, after=after, reply_to=reply_to, options=dict(options))


@recovers(has_dedup_id)
def send_batch(
    queue: QueueRef,
    messages: Iterable[Any],
    *,
    wait: Duration | None = None,
    **options: Unpack[SendOptions],
) -> list[int]:
    """Put several messages on a queue in one round trip; ids come back in input order.

    Takes :func:`send`'s options, applied to every message. A batch holds at most
    ``PGQ["SEND_BATCH_MAX_MESSAGES"]`` messages and ``PGQ["SEND_BATCH_MAX_BYTES"]`` bytes of
    bodies (MessageTooLarge), so a huge batch is refused before it reaches PostgreSQL. With
    ``max_length`` the whole batch must fit, or none of it is sent. Header keys starting
    with ``pgq_`` are reserved for the server and refused.
    """
    v.unreserved_headers(options.get("headers"))
    return send_trusted(queue, messages, wait=wait, **options)


@telemetry.traced_receive
@recovers()
def read(
    queue: QueueRef, *, vt: Duration | None = None, qty: int = 1, filters: Any = None
) -> list[Message]:
    """Lease up to ``qty`` visible messages, best priority first, then oldest.

    Each is hidden for ``vt`` seconds (the queue's visibility timeout by default) and its
    read_ct grows by one; delete or archive it before then, or it is delivered again.
    """
    name = v.name(queue)
    messages, state = message_manager().lease(
        name,
        qty=v.quantity(qty),
        vt=v.seconds(vt, "vt", allow_none=True),
        filters=v.filters(filters),
    )
    _raise_if_unreadable(name, messages, state)
    return messages  # named by the manager (queue_name answers without a query)


def _raise_if_unreadable(name: str, messages: list[Message], state: Any) -> None:
    """An empty lease from a missing or paused queue is an error, not an empty queue."""
    if not messages and (state is None or state[1]):
        raise queue_missing(name)


def _poll_window(
    queue: Any, max_poll_seconds: Any, poll_interval_ms: Any
) -> tuple[str, float, float]:
    """The checked queue name, the wait and the fallback interval, in seconds."""
    name = v.name(queue)
    wait = v.seconds(max_poll_seconds, "max_poll_seconds")
    if wait > settings.MAX_WAIT_SECONDS:
        raise InvalidArgument(
            f"max_poll_seconds must be at most {settings.MAX_WAIT_SECONDS} "
            "(PGQ['MAX_WAIT_SECONDS']); poll again for longer waits.",
            field="max_poll_seconds",
        )
    interval = v.integer(poll_interval_ms, "poll_interval_ms", minimum=1, maximum=60_000) / 1000
    return name, wait, interval


@recovers()
def read_with_poll(
    queue: QueueRef,
    *,
    vt: Duration | None = None,
    qty: int = 1,
    max_poll_seconds: Duration = 5,
    poll_interval_ms: int = 100,
    filters: Any = None,
) -> list[Message]:
    """Like :func:`read`, but wait up to ``max_poll_seconds`` for a message to arrive.

    The wait is at most ``PGQ["MAX_WAIT_SECONDS"]`` (20 by default, like SQS long polls) and
    is refused inside ``transaction.atomic()``, where it would hold the caller's transaction
    open; a wait of 0 is a plain read and is allowed anywhere.

    The wait listens for the NOTIFY a committed send makes, so it returns within
    milliseconds of a message becoming visible; ``poll_interval_ms`` is only the fallback
    re-check for messages that become visible without a notification (delays, expiring
    leases). It is a :class:`~pgq_django.api.waiting.MessageWait`, as every long poll is.
    """
    name, wait, interval = _poll_window(queue, max_poll_seconds, poll_interval_ms)
    if wait > 0:
        refuse_inside_atomic("read_with_poll")
    return _poll(name, vt, qty, filters, wait, interval).consume()


def _poll(
    name: str, vt: Any, qty: int, filters: Any, wait: float, interval: float
) -> MessageWait[Message]:
    """The wait of :func:`read_with_poll` and its twin: leases with :func:`read`."""
    limit = v.quantity(qty)
    lease = partial(read, name, vt=vt, qty=limit, filters=filters)
    return MessageWait(
        name,
        lease,
        seconds=wait,
        poll_interval=interval,
        limit=limit,
        give_back=partial(release_leases, name),
    )


async def aread_with_poll(
    queue: QueueRef,
    *,
    vt: Duration | None = None,
    qty: int = 1,
    max_poll_seconds: Duration = 5,
    poll_interval_ms: int = 100,
    filters: Any = None,
) -> list[Message]:
    """Async twin of :func:`read_with_poll` that waits on the event loop, not in a thread.

    The wait shares the process's one LISTEN connection (:mod:`pgq_django.store.notify`), so any
    number of concurrent waiters costs one database backend while they wait.
    """
    name, wait, interval = _poll_window(queue, max_poll_seconds, poll_interval_ms)
    return await _poll(name, vt, qty, filters, wait, interval).aconsume()


@telemetry.traced_receive
@recovers()
def pop(queue: QueueRef, qty: int = 1) -> list[Message]:
    """Take up to ``qty`` visible messages off the queue at once (read and delete)."""
    name = v.name(queue)
    messages, state = message_manager().pop(name, qty=v.quantity(qty))
    _raise_if_unreadable(name, messages, state)
    return messages  # named by the manager, as read's


@recovers()
def read_by_id(queue: QueueRef, msg_id: MessageRef) -> Message | None:
    """One message of the queue by id, leased or not, without leasing it."""
    name = v.name(queue)
    message: Message | None  # named by the manager
    queue_id, message = message_manager().read_by_id(name, message_ref(msg_id)[0])
    if queue_id is None:
        raise queue_missing(name)
    return message


@telemetry.traced_settle("ack")
@recovers()
def delete(queue: QueueRef, msg_ids: MessageRefs) -> bool | list[int]:
    """Acknowledge: remove messages (archive them as ``acked`` with archive_on_ack).

    One id or receipt answers True/False; a list answers the ids that were deleted. Unknown
    ids, and receipts of a lease that was re-leased since, are skipped.
    """
    name = v.name(queue)
    single, refs = message_refs(msg_ids)
    queue_id, deleted = message_manager().ack(name, refs)
    if queue_id is None:
        raise queue_missing(name)
    return bool(deleted) if single else list(deleted)


@telemetry.traced_settle("archive")
@recovers()
def archive(queue: QueueRef, msg_ids: MessageRefs) -> bool | list[int]:
    """Move messages to the archive with outcome ``archived`` (PGMQ archive)."""
    name = v.name(queue)
    single, refs = message_refs(msg_ids)
    queue_id, moved = message_manager().archive(name, refs)
    if queue_id is None:
        raise queue_missing(name)
    return bool(moved) if single else list(moved)


@recovers()
def set_vt(queue: QueueRef, msg_id: MessageRef, vt: Duration) -> Message | None:
    """Make a message visible ``vt`` seconds from now (extend a lease, or end it with 0)."""
    name = v.name(queue)
    message: Message | None  # named by the manager
    queue_id, message = message_manager().set_vt(name, message_ref(msg_id), v.seconds(vt, "vt"))
    if queue_id is None:
        raise queue_missing(name)
    return message


@telemetry.traced_settle("nack")
@recovers()
def nack(
    queue: QueueRef, msg_id: MessageRef, *, delay: Duration | None = None, error: str | None = None
) -> bool:
    """Report a failed delivery: the message comes back after ``delay`` seconds.

    Without ``delay`` the queue's retry delay grows with its backoff. Once the message has
    been delivered more than max_retries times it goes to the dead-letter queue, or to the
    archive as ``dead`` when the queue has none. Returns False for an unknown message.
    """
    name = v.name(queue)
    queue_id, outcome = message_manager().nack(
        name,
        message_ref(msg_id),
        delay=v.seconds(delay, "delay", allow_none=True),
        error=v.text(error, "error", max_length=100_000),
    )
    if queue_id is None:
        raise queue_missing(name)
    telemetry.settled_as(outcome)
    return outcome is not None


@recovers()
def expire_messages(queue: QueueRef | None = None) -> int:
    """Archive as ``expired`` every message past its retention or expires_in."""
    queue_id = None
    if queue is not None:
        from .queues import get_queue

        queue_id = get_queue(queue).pk
    return message_manager().expire(queue_id)
