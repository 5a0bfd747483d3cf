"""Sending, leasing and acknowledging messages: the functions users call most.

Each function validates its arguments, runs one statement of the message manager and turns
"the statement found no queue" into QueueNotFound (or QueuePaused / MessageTooLarge).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import timedelta
from typing import Any, TypedDict, Unpack

from ..conf import settings
from ..exceptions import InvalidArgument, MessageTooLarge, QueueFull, QueueNotFound, QueuePaused
from ..managers import MessageRef
from ..models import Message, Receipt
from . import validation as v
from .recovery import has_dedup_id, recovers


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


class SendOptions(TypedDict, total=False):
    """The keyword options of :func:`send`, :func:`send_batch` and ``publish``."""

    headers: dict[str, Any] | None
    attributes: dict[str, Any] | None
    label: str | None
    priority: int
    delay: float | timedelta | None
    group: str | None
    dedup_id: str | None
    expires_in: float | timedelta | None
    max_retries: int | None
    retry_delay: float | timedelta | None


SEND_OPTIONS = frozenset(SendOptions.__annotations__)


def _send_options(options: dict[str, Any]) -> dict[str, Any]:
    """Checked send options. An unknown name is a clear error, not a TypeError."""
    unknown = sorted(set(options) - SEND_OPTIONS)
    if unknown:
        raise InvalidArgument(
            f"{', '.join(map(repr, unknown))} is not a send option; the options are "
            f"{', '.join(sorted(SEND_OPTIONS))}.",
            field=unknown[0],
        )
    get = options.get
    return {
        "headers": v.mapping(get("headers"), "headers"),
        "attributes": v.mapping(get("attributes"), "attributes"),
        "label": v.text(get("label"), "label"),
        "priority": v.integer(
            get("priority", 0), "priority", minimum=-(2**31), maximum=v.INT32_MAX
        ),
        "delay": v.seconds(get("delay"), "delay", allow_none=True),
        "group": v.text(get("group"), "group", max_length=128),
        "dedup_id": v.text(get("dedup_id"), "dedup_id", max_length=128),
        "expires_in": v.seconds(get("expires_in"), "expires_in", allow_none=True, minimum=0.001),
        "max_retries": v.integer(get("max_retries"), "max_retries", allow_none=True),
        "retry_delay": v.seconds(get("retry_delay"), "retry_delay", allow_none=True),
    }


@recovers(has_dedup_id)
def send(queue: Any, message: Any, *, wait: Any = None, **options: Unpack[SendOptions]) -> int:
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
    """
    return send_batch(queue, [message], wait=wait, **options)[0]


@recovers(has_dedup_id)
def send_batch(
    queue: Any, messages: Iterable[Any], *, wait: Any = None, **options: Unpack[SendOptions]
) -> list[int]:
    """Put several messages on a queue in one round trip; ids come back in input order.

    Takes :func:`send`'s options, applied to every message. A batch holds at most
    ``PGQ["SEND_BATCH_MAX_MESSAGES"]`` messages and ``PGQ["SEND_BATCH_MAX_BYTES"]`` bytes of
    bodies (MessageTooLarge), so a huge batch is refused before it reaches PostgreSQL. With
    ``max_length`` the whole batch must fit, or none of it is sent. Header keys starting
    with ``pgq_`` are reserved for the server and refused.
    """
    v.unreserved_headers(options.get("headers"))
    return _send_batch(queue, messages, wait=wait, **options)


def _send_batch(
    queue: Any, messages: Iterable[Any], *, wait: Any = None, **options: Any
) -> list[int]:
    """:func:`send_batch` for the API's own records (replays): reserved headers allowed."""
    name = v.name(queue)
    opts = _send_options(dict(options))
    deadline = _wait_deadline(wait)
    raw = options.get("headers")
    if isinstance(messages, str | bytes | dict) or not isinstance(messages, Iterable):
        raise InvalidArgument("messages must be a list of message bodies.")
    bodies = _bodies(messages, raw)
    if not bodies:
        return []
    size = max(len(b.encode()) for b in bodies)
    if opts["dedup_id"] is not None and len(bodies) != 1:
        raise InvalidArgument(
            "dedup_id applies to one message; send them one by one.", field="dedup_id"
        )
    pause = 0.02
    while True:
        try:
            return _insert(name, bodies, size, opts)
        except QueueFull:
            remaining = -1.0 if deadline is None else deadline - time.monotonic()
            if remaining <= 0:
                raise
            time.sleep(min(pause, remaining))
            pause = min(pause * 2, 0.5)


def _insert(name: str, bodies: list[str], size: int, opts: dict[str, Any]) -> list[int]:
    if opts["dedup_id"] is not None:
        from .delivery import send_deduplicated

        return [send_deduplicated(name, bodies[0], size=size, **opts)]
    queue_id, ids, full = _manager().send_bodies(name, bodies, size=size, **opts)
    if queue_id is None:
        raise _missing(name, size=size)
    if full:
        raise _queue_full(name, len(bodies))
    return list(ids)


def _bodies(messages: Iterable[Any], headers: Any) -> list[str]:
    """Encoded bodies, refusing a batch too long or too large before anything is sent."""
    most, budget = settings.SEND_BATCH_MAX_MESSAGES, settings.SEND_BATCH_MAX_BYTES
    bodies: list[str] = []
    total = 0
    for message in messages:
        if len(bodies) == most:
            raise InvalidArgument(
                f"A batch holds at most {most} messages (PGQ['SEND_BATCH_MAX_MESSAGES']); "
                "split it.",
                field="messages",
            )
        body = v.body(message, headers)
        total += len(body)  # characters: a lower bound of the bytes, checked exactly below
        if total > budget and (total := sum(len(b.encode()) for b in (*bodies, body))) > budget:
            raise MessageTooLarge(
                f"The batch's bodies are more than {budget} bytes together "
                "(PGQ['SEND_BATCH_MAX_BYTES']); split it.",
                size=total,
            )
        bodies.append(body)
    return bodies


def _wait_deadline(wait: Any) -> float | None:
    """When a send waiting for room under max_length gives up (None: it does not wait)."""
    if wait is None:
        return None
    seconds = v.seconds(wait, "wait")
    if seconds > settings.MAX_WAIT_SECONDS:
        raise InvalidArgument(
            f"wait must be at most {settings.MAX_WAIT_SECONDS} seconds (PGQ['MAX_WAIT_SECONDS']).",
            field="wait",
        )
    _refuse_inside_atomic("wait")
    return time.monotonic() + seconds


def _refuse_inside_atomic(what: str) -> None:
    """Waiting inside transaction.atomic() would hold the caller's transaction open."""
    from django.db import connections

    if not connections[settings.DATABASE].in_atomic_block:
        return
    raise InvalidArgument(
        f"{what} cannot be used inside transaction.atomic(): waiting would hold the "
        "transaction (and its locks) open; wait outside it, or don't wait.",
        field=what,
    )


def _queue_full(name: str, count: int) -> QueueFull:
    """The error for a send that found no room for ``count`` messages under max_length."""
    limit = _manager().queue_state(name)
    return QueueFull(
        f"Queue {name!r} has no room for {count} more message{'s' if count != 1 else ''} "
        f"under its max_length; consume some, or send with wait=seconds.",
        queue=name,
        max_length=limit[5] if limit else None,
    )


@recovers()
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
    if wait > settings.MAX_WAIT_SECONDS:
        raise InvalidArgument(
            f"max_poll_seconds must be at most {settings.MAX_WAIT_SECONDS} "
            "(PGQ['MAX_WAIT_SECONDS']); poll again for longer waits.",
            field="max_poll_seconds",
        )
    interval = v.integer(poll_interval_ms, "poll_interval_ms", minimum=1, maximum=60_000) / 1000
    return name, time.monotonic() + wait, interval


@recovers()
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

    The wait is at most ``PGQ["MAX_WAIT_SECONDS"]`` (20 by default, like SQS long polls) and
    is refused inside ``transaction.atomic()``, where it would hold the caller's transaction
    open; a wait of 0 is a plain read and is allowed anywhere.

    The wait listens for the NOTIFY a committed send makes, so it returns within
    milliseconds of a message becoming visible; ``poll_interval_ms`` is only the fallback
    re-check for messages that become visible without a notification (delays, expiring
    leases).
    """
    from ..notify import interest

    name, deadline, interval = _poll_window(queue, max_poll_seconds, poll_interval_ms)
    if deadline > time.monotonic():
        _refuse_inside_atomic("read_with_poll")
    with interest(name) as wakeups:
        while True:
            found = read(name, vt=vt, qty=qty, filters=filters)
            remaining = deadline - time.monotonic()
            if found or remaining <= 0:
                return found
            wakeups.wait(min(interval, remaining))


async def aread_with_poll(
    queue: Any,
    *,
    vt: Any = None,
    qty: int = 1,
    max_poll_seconds: Any = 5,
    poll_interval_ms: int = 100,
    filters: Any = None,
) -> list[Message]:
    """Async twin of :func:`read_with_poll` that waits on the event loop, not in a thread.

    The wait shares the process's one LISTEN connection (:mod:`pgq_django.notify`), so any
    number of concurrent waiters costs one database backend while they wait.
    """
    from asgiref.sync import sync_to_async

    from ..notify import ainterest

    name, deadline, interval = _poll_window(queue, max_poll_seconds, poll_interval_ms)
    lease = sync_to_async(read, thread_sensitive=True)
    async with ainterest(name) as wakeups:
        while True:
            found = await lease(name, vt=vt, qty=qty, filters=filters)
            remaining = deadline - time.monotonic()
            if found or remaining <= 0:
                return found
            await wakeups.await_wakeup(min(interval, remaining))


@recovers()
def pop(queue: Any, qty: int = 1) -> list[Message]:
    """Take up to ``qty`` visible messages off the queue at once (read and delete)."""
    name = v.name(queue)
    messages, state = _manager().pop(name, qty=v.quantity(qty))
    _raise_if_unreadable(name, messages, state)
    return _named(messages, name)


@recovers()
def read_by_id(queue: Any, msg_id: int) -> Message | None:
    """One message of the queue by id, leased or not, without leasing it."""
    name = v.name(queue)
    queue_id, message = _manager().read_by_id(name, _ref(msg_id)[0])
    if queue_id is None:
        raise _missing(name)
    return _named([message], name)[0] if message else None


def _ref(value: Any) -> MessageRef:
    """A msg_id, a Receipt, a Message or a receipt string as (msg_id, read_ct or None)."""
    if isinstance(value, str) and ":" in value:
        value = Receipt.parse(value)
    if isinstance(value, Receipt | Message):
        return (
            v.integer(value.msg_id, "msg_id", minimum=1, maximum=v.BIGINT_MAX),
            v.integer(value.read_ct, "read_ct", minimum=0, maximum=v.INT32_MAX),
        )
    if isinstance(value, str) and value.isascii() and value.isdigit():
        value = int(value)
    return (v.integer(value, "msg_id", minimum=1, maximum=v.BIGINT_MAX), None)


def _refs(values: Any) -> tuple[bool, list[MessageRef]]:
    """(single?, refs) for one reference or an iterable of them."""
    single = isinstance(values, int | str | Receipt | Message)
    refs = [_ref(x) for x in ([values] if single else v.msg_ids(values))]
    return single, refs


@recovers()
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


@recovers()
def archive(queue: Any, msg_ids: Any) -> bool | list[int]:
    """Move messages to the archive with outcome ``archived`` (PGMQ archive)."""
    name = v.name(queue)
    single, refs = _refs(msg_ids)
    queue_id, moved = _manager().archive(name, refs)
    if queue_id is None:
        raise _missing(name)
    return bool(moved) if single else list(moved)


@recovers()
def set_vt(queue: Any, msg_id: Any, vt: Any) -> Message | None:
    """Make a message visible ``vt`` seconds from now (extend a lease, or end it with 0)."""
    name = v.name(queue)
    queue_id, message = _manager().set_vt(name, _ref(msg_id), v.seconds(vt, "vt"))
    if queue_id is None:
        raise _missing(name)
    return _named([message], name)[0] if message else None


@recovers()
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


@recovers()
def expire_messages(queue: Any = None) -> int:
    """Archive as ``expired`` every message past its retention or expires_in."""
    queue_id = None
    if queue is not None:
        from .queues import get_queue

        queue_id = get_queue(queue).pk
    return _manager().expire(queue_id)
