"""Sending, leasing and acknowledging messages: the functions users call most.

Each function validates its arguments, runs one statement of the message manager and turns
"the statement found no queue" into QueueNotFound (or QueuePaused / MessageTooLarge).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from ..conf import settings
from ..exceptions import InvalidArgument, MessageTooLarge, QueueNotFound, QueuePaused
from ..managers import MessageRef
from ..models import Message, Receipt
from . import validation as v


def _manager() -> Any:
    return Message.objects.db_manager(settings.DATABASE)


def _missing(queue: str, *, size: int | None = None) -> Exception:
    """The error that explains why a statement matched no queue."""
    state = _manager().queue_state(queue)
    if state is None:
        return QueueNotFound(f"Queue {queue!r} does not exist.", queue=queue)
    paused, max_size = state[1], state[2]
    if size is not None and size > max_size:
        return MessageTooLarge(
            f"The message is {size} bytes; queue {queue!r} accepts at most {max_size}.",
            queue=queue,
            size=size,
            max_message_size=max_size,
        )
    if paused:
        return QueuePaused(f"Queue {queue!r} is paused.", queue=queue)
    return QueueNotFound(f"Queue {queue!r} does not exist.", queue=queue)


# The options send, send_batch and publish accept, checked (shared with the Spark sink).
_send_options = v.send_options


def send(queue: Any, message: Any, **options: Any) -> int:
    """Put one message on a queue; returns its msg_id.

    Inside ``transaction.atomic()`` on the queue database the message becomes visible only
    when the caller's transaction commits, and disappears if it rolls back.
    """
    return send_batch(queue, [message], **options)[0]


def send_batch(queue: Any, messages: Iterable[Any], **options: Any) -> list[int]:
    """Put several messages on a queue in one round trip; ids come back in input order."""
    name = v.name(queue)
    opts = _send_options(**options)
    raw = options.get("headers")
    if isinstance(messages, str | bytes | dict) or not isinstance(messages, Iterable):
        raise InvalidArgument("messages must be a list of message bodies.")
    bodies = [v.body(m, raw) for m in messages]
    if not bodies:
        return []
    size = max(len(b.encode()) for b in bodies)
    if opts["dedup_id"] is not None:
        if len(bodies) != 1:
            raise InvalidArgument(
                "dedup_id applies to one message; send them one by one.", field="dedup_id"
            )
        from .delivery import send_deduplicated

        return [send_deduplicated(name, bodies[0], size=size, **opts)]
    queue_id, ids = _manager().send_bodies(name, bodies, size=size, **opts)
    if queue_id is None:
        raise _missing(name, size=size)
    return list(ids)


def read(queue: Any, *, vt: Any = None, qty: int = 1, filters: Any = None) -> list[Message]:
    """Lease up to ``qty`` visible messages, best priority first, then oldest.

    Each is hidden for ``vt`` seconds (the queue's visibility timeout by default) and its
    read_ct grows by one; delete or archive it before then, or it is delivered again.
    """
    name = v.name(queue)
    messages, state = _manager().lease(
        name,
        qty=v.quantity(qty),
        vt=v.seconds(vt, "vt", allow_none=True),
        filters=v.filters(filters),
    )
    _raise_if_unreadable(name, messages, state)
    return _named(messages, name)


def _raise_if_unreadable(name: str, messages: list[Message], state: Any) -> None:
    """An empty lease from a missing or paused queue is an error, not an empty queue."""
    if not messages and (state is None or state[1]):
        raise _missing(name)


def _named(messages: list[Message], name: str) -> list[Message]:
    for m in messages:
        m.queue_name = name
    return messages


def _poll_window(
    queue: Any, max_poll_seconds: Any, poll_interval_ms: Any
) -> tuple[str, float, float]:
    """The checked queue name, the monotonic deadline and the fallback interval in seconds."""
    name = v.name(queue)
    wait = v.seconds(max_poll_seconds, "max_poll_seconds")
    interval = v.integer(poll_interval_ms, "poll_interval_ms", minimum=1, maximum=60_000) / 1000
    return name, time.monotonic() + wait, interval


def read_with_poll(
    queue: Any,
    *,
    vt: Any = None,
    qty: int = 1,
    max_poll_seconds: Any = 5,
    poll_interval_ms: int = 100,
    filters: Any = None,
) -> list[Message]:
    """Like :func:`read`, but wait up to ``max_poll_seconds`` for a message to arrive.

    The wait listens for the NOTIFY a committed send makes, so it returns within
    milliseconds of a message becoming visible; ``poll_interval_ms`` is only the fallback
    re-check for messages that become visible without a notification (delays, expiring
    leases).
    """
    from ..notify import listener

    name, deadline, interval = _poll_window(queue, max_poll_seconds, poll_interval_ms)
    with listener() as wakeups:
        while True:
            found = read(name, vt=vt, qty=qty, filters=filters)
            remaining = deadline - time.monotonic()
            if found or remaining <= 0:
                return found
            wakeups.wait_for(name, timeout=min(interval, remaining))


async def aread_with_poll(
    queue: Any,
    *,
    vt: Any = None,
    qty: int = 1,
    max_poll_seconds: Any = 5,
    poll_interval_ms: int = 100,
    filters: Any = None,
) -> list[Message]:
    """Async twin of :func:`read_with_poll` that waits on the event loop, not in a thread."""
    from asgiref.sync import sync_to_async

    from ..notify import AsyncListener

    name, deadline, interval = _poll_window(queue, max_poll_seconds, poll_interval_ms)
    lease = sync_to_async(read, thread_sensitive=True)
    wakeups = await AsyncListener.connect()
    try:
        while True:
            found = await lease(name, vt=vt, qty=qty, filters=filters)
            remaining = deadline - time.monotonic()
            if found or remaining <= 0:
                return found
            await wakeups.wait_for(name, timeout=min(interval, remaining))
    finally:
        await wakeups.close()


def pop(queue: Any, qty: int = 1) -> list[Message]:
    """Take up to ``qty`` visible messages off the queue at once (read and delete)."""
    name = v.name(queue)
    messages, state = _manager().pop(name, qty=v.quantity(qty))
    _raise_if_unreadable(name, messages, state)
    return _named(messages, name)


def read_by_id(queue: Any, msg_id: int) -> Message | None:
    """One message of the queue by id, leased or not, without leasing it."""
    name = v.name(queue)
    queue_id, message = _manager().read_by_id(name, _ref(msg_id)[0])
    if queue_id is None:
        raise _missing(name)
    return _named([message], name)[0] if message else None


def _ref(value: Any) -> MessageRef:
    """A msg_id, a Receipt, a Message or a receipt string as (msg_id, read_ct or None)."""
    if isinstance(value, Message):
        return (value.msg_id, value.read_ct)
    if isinstance(value, Receipt):
        return (value.msg_id, value.read_ct)
    if isinstance(value, str) and ":" in value:
        r = Receipt.parse(value)
        return (r.msg_id, r.read_ct)
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    return (v.integer(value, "msg_id", minimum=1, maximum=2**63 - 1), None)


def _refs(values: Any) -> tuple[bool, list[MessageRef]]:
    """(single?, refs) for one reference or an iterable of them."""
    single = isinstance(values, int | str | Receipt | Message)
    refs = [_ref(x) for x in ([values] if single else v.msg_ids(values))]
    return single, refs


def delete(queue: Any, msg_ids: Any) -> bool | list[int]:
    """Acknowledge: remove messages (archive them as ``acked`` with archive_on_ack).

    One id or receipt answers True/False; a list answers the ids that were deleted. Unknown
    ids, and receipts of a lease that was re-leased since, are skipped.
    """
    name = v.name(queue)
    single, refs = _refs(msg_ids)
    queue_id, deleted = _manager().ack(name, refs)
    if queue_id is None:
        raise _missing(name)
    return bool(deleted) if single else list(deleted)


def archive(queue: Any, msg_ids: Any) -> bool | list[int]:
    """Move messages to the archive with outcome ``archived`` (PGMQ archive)."""
    name = v.name(queue)
    single, refs = _refs(msg_ids)
    queue_id, moved = _manager().archive(name, refs)
    if queue_id is None:
        raise _missing(name)
    return bool(moved) if single else list(moved)


def set_vt(queue: Any, msg_id: Any, vt: Any) -> Message | None:
    """Make a message visible ``vt`` seconds from now (extend a lease, or end it with 0)."""
    name = v.name(queue)
    queue_id, message = _manager().set_vt(name, _ref(msg_id), v.seconds(vt, "vt"))
    if queue_id is None:
        raise _missing(name)
    return _named([message], name)[0] if message else None


def nack(queue: Any, msg_id: Any, *, delay: Any = None, error: str | None = None) -> bool:
    """Report a failed delivery: the message comes back after ``delay`` seconds.

    Without ``delay`` the queue's retry delay grows with its backoff. Once the message has
    been delivered more than max_retries times it goes to the dead-letter queue, or to the
    archive as ``dead`` when the queue has none. Returns False for an unknown message.
    """
    name = v.name(queue)
    queue_id, outcome = _manager().nack(
        name,
        _ref(msg_id),
        delay=v.seconds(delay, "delay", allow_none=True),
        error=v.text(error, "error", max_length=100_000),
    )
    if queue_id is None:
        raise _missing(name)
    return outcome is not None


def expire_messages(queue: Any = None) -> int:
    """Archive as ``expired`` every message past its retention or expires_in."""
    queue_id = None
    if queue is not None:
        from .queues import get_queue

        queue_id = get_queue(queue).pk
    return _manager().expire(queue_id)
