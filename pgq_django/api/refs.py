"""What the API modules share: message references, and why a statement matched nothing.

A statement that names a queue answers "no queue" as an empty result; :func:`queue_missing`
looks the queue up once more to say why (missing, paused, or the body too large), and
:func:`queue_full` explains a send refused under ``max_length``. Message references
(ids, receipts, leased messages) become the ``(msg_id, read_ct or None)`` pairs the
statements take, the read_ct fencing out a consumer whose lease was taken over.
"""

from __future__ import annotations

from .. import validation as v
from ..exceptions import MessageTooLarge, PgqError, QueueFull, QueueNotFound, QueuePaused
from ..models import Message, Receipt
from ..receipts import not_a_message_reference
from ..store.managers import MessageManager
from ..types import MessageRef, MessageRefs

#: A message as the statements take it: (msg_id, read_ct of the lease, or None for any).
Fence = tuple[int, int | None]


def message_manager() -> MessageManager:
    """The Message manager on the queue database (``PGQ["DATABASE"]``).

    ``Message.objects`` itself: its statement methods already run on ``PGQ["DATABASE"]``
    unless bound elsewhere (:class:`~pgq_django.store.managers.base.SqlManager`), so no per-call
    ``db_manager()`` copy is needed on the hot path.
    """
    return Message.objects


def message_ref(value: MessageRef) -> Fence:
    """A msg_id, a Receipt, a Message or a receipt string as (msg_id, read_ct or None)."""
    if type(value) is Receipt:
        # The common case (acks by receipt), checked without the general validators.
        msg_id, read_ct = value
        if (
            type(msg_id) is int
            and type(read_ct) is int
            and 0 < msg_id <= v.BIGINT_MAX
            and 0 <= read_ct <= v.INT32_MAX
        ):
            return msg_id, read_ct
    if isinstance(value, str) and ":" in value:
        value = Receipt.parse(value)
    if isinstance(value, Receipt | Message):
        return (
            v.integer(value.msg_id, "msg_id", minimum=1, maximum=v.BIGINT_MAX),
            v.integer(value.read_ct, "read_ct", minimum=0, maximum=v.INT32_MAX),
        )
    if isinstance(value, str):
        if not (value.isascii() and value.isdigit()):
            raise not_a_message_reference(value)
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise not_a_message_reference(value)
    return (v.integer(value, "msg_id", minimum=1, maximum=v.BIGINT_MAX), None)


def message_refs(values: MessageRefs) -> tuple[bool, list[Fence]]:
    """(single?, fences) for one reference or an iterable of them."""
    if isinstance(values, int | str | Receipt | Message):
        return True, [message_ref(values)]
    return False, [message_ref(x) for x in v.msg_ids(values)]


def queue_missing(queue: str, *, size: int | None = None) -> PgqError:
    """The error that explains why a statement matched no queue."""
    state = message_manager().queue_state(queue)
    if state is None:
        return QueueNotFound.for_name(queue)
    paused, max_size = state[1], state[2]
    if size is not None and size > max_size:
        return MessageTooLarge(
            f"The message is {size} bytes; queue {queue!r} accepts at most {max_size}.",
            queue=queue,
            size=size,
            max_message_size=max_size,
        )
    if paused:
        return QueuePaused.for_name(queue)
    return QueueNotFound.for_name(queue)


def queue_full(name: str, count: int) -> QueueFull:
    """The error for a send that found no room for ``count`` messages under max_length."""
    limit = message_manager().queue_state(name)
    return QueueFull(
        f"Queue {name!r} has no room for {count} more message{'s' if count != 1 else ''} "
        f"under its max_length; consume some, or send with wait=seconds.",
        queue=name,
        max_length=limit[5] if limit else None,
    )
