"""Cancellation, completion tracking, redrive and queue callbacks.

These sit beside :mod:`.messages`: each validates its arguments, calls one delivery method of
``Message.objects`` (:mod:`pgq_django.store.managers.delivery`), and turns "no such queue" into
QueueNotFound.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from .. import telemetry
from .. import validation as v
from ..conf import settings
from ..exceptions import InvalidArgument, QueueNotFound
from ..models import ArchivedMessage, Outcome
from ..types import MessageRef, MessageRefs, QueueRef
from .queues import alter_queue, get_queue
from .recovery import recovers
from .refs import message_manager, message_ref, message_refs, queue_missing
from .sending import send_trusted

# A NUL character in JSON text: ``\u0000`` not itself escaped (``\\u0000`` is text).
_ESCAPED_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")

# Outcomes a live message can have in a Result, beside the archive's outcomes.
PENDING = "pending"
LEASED = "leased"


@dataclass(frozen=True)
class Result:
    """Where a message is now, and how it ended if it has (``pgq.result``).

    ``outcome`` is ``pending`` or ``leased`` while the message is live, else the archive's
    outcome: ``acked`` (``result`` holds the handler's return value when the queue archives
    acknowledged messages), ``dead`` (``error`` holds the last error), ``expired``,
    ``cancelled`` or ``archived``.
    """

    msg_id: int
    queue_name: str
    outcome: str
    result: Any = None
    error: str | None = None
    attempts: int = 0
    enqueued_at: datetime | None = None
    finished_at: datetime | None = None
    headers: dict[str, Any] = field(default_factory=dict)
    message: Any = None
    cancel_requested: bool = False

    @property
    def finished(self) -> bool:
        return self.outcome not in (PENDING, LEASED)

    @property
    def succeeded(self) -> bool:
        return self.outcome == Outcome.ACKED

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@recovers()
def result(msg_id: MessageRef) -> Result | None:
    """The state of a message by id, live or archived; None if it left no trace.

    A message deleted by an ack on a queue without ``archive_on_ack`` leaves no trace, so
    queues whose outcomes matter (task queues) should archive on ack.
    """
    ident = message_ref(msg_id)[0]
    row = message_manager().result(ident)
    if row is None:
        return None
    return Result(
        msg_id=ident,
        queue_name=row.queue_name,
        outcome=row.outcome,
        result=row.result,
        error=row.error,
        attempts=row.read_ct,
        enqueued_at=row.enqueued_at,
        finished_at=row.finished_at,
        headers=row.headers or {},
        message=row.message,
        cancel_requested=row.cancel_requested,
    )


@recovers()
def cancel(queue: QueueRef, msg_id: MessageRef) -> bool:
    """Cancel a message: a pending one is archived as ``cancelled`` at once; a leased one is
    flagged ``cancel_requested`` (see :func:`cancel_requested`) and is archived as cancelled
    instead of being delivered again. False for an unknown message."""
    name = v.name(queue)
    queue_id, outcome = message_manager().cancel(name, message_ref(msg_id)[0])
    if queue_id is None:
        raise queue_missing(name)
    return outcome is not None


@recovers()
def cancel_requested(msg_id: MessageRef) -> bool:
    """Whether :func:`cancel` was called for a message a handler is working on.

    A long handler checks this between steps and stops early; it reads committed state, so it
    sees a cancel made while the handler's own transaction is open.
    """
    return message_manager().cancel_requested(message_ref(msg_id)[0])


@recovers(False)
def redrive(
    dead_letter_queue: QueueRef,
    *,
    to: QueueRef | None = None,
    limit: int | None = None,
    origins: Any = None,
) -> int:
    """Move messages from a dead-letter queue back to the queue they failed on (or to ``to``).

    Oldest first, at most ``limit``. Each gets a fresh start (read_ct 0, visible now, expiry
    renewed from the destination's retention); its dead-letter history moves to
    ``headers["pgq_redriven"]``. Where a message failed is recorded server-side when it is
    dead-lettered, never read from a header (a sender could write one). Messages whose
    original queue no longer exists, and messages sent to the dead-letter queue directly,
    stay put unless ``to`` is given. ``origins`` (queue names) moves only the messages that
    failed on one of those queues: a caller acting for a user passes the ones the user may
    write to (see :func:`dead_letter_origins`). Returns how many moved.
    """
    name = v.name(dead_letter_queue)
    dest = None if to is None else v.name(to)
    count = v.integer(limit, "limit", minimum=1, maximum=2**31 - 1, allow_none=True)
    only = None
    if origins is not None:
        if isinstance(origins, str) or not isinstance(origins, Iterable):
            raise InvalidArgument("origins must be a list of queue names.", field="origins")
        only = [v.name(o) for o in origins]
    if dest is not None:
        get_queue(dest)
    queue_id, moved = message_manager().redrive(name, to=dest, origins=only, limit=count)
    if queue_id is None:
        raise QueueNotFound.for_name(name)
    return moved


@recovers()
def dead_letter_origins(dead_letter_queue: QueueRef) -> dict[str, int]:
    """Where :func:`redrive` would send a dead-letter queue's messages: queue name -> count.

    Only queues that still exist are listed; messages without a recorded origin are not
    counted. Raises QueueNotFound for an unknown dead-letter queue.
    """

    queue = get_queue(dead_letter_queue)
    return message_manager().dead_letter_origins(queue.name)


@recovers(False)
def replay(queue: QueueRef, msg_ids: MessageRefs, *, to: QueueRef | None = None) -> list[int]:
    """Send copies of archived messages of ``queue`` to ``to`` (by default back to ``queue``).

    The archive keeps the originals. A copy has the original's body, attributes, label and
    priority, its headers without the reserved ``pgq_*`` keys, and
    ``headers["pgq_replayed_from"]`` = the original's msg_id. Ids not in the queue's archive
    are skipped. All copies are sent in one transaction; returns their new ids, in the
    originals' order.
    """
    from django.db import transaction

    if isinstance(msg_ids, int):
        msg_ids = [msg_ids]
    if isinstance(msg_ids, str | bytes) or not isinstance(msg_ids, Iterable):
        raise InvalidArgument("msg_ids must be a list of message ids.", field="msg_ids")
    ids = [v.integer(i, "msg_id", minimum=1, maximum=2**63 - 1) for i in msg_ids]
    source = get_queue(queue)
    dest = source if to is None else get_queue(to)
    db = settings.DATABASE
    rows = ArchivedMessage.objects.using(db).filter(queue_id=source.pk, msg_id__in=ids)
    sent: list[int] = []
    with transaction.atomic(using=db):
        for row in rows.order_by("msg_id"):
            headers = {
                k: val
                for k, val in (row.headers or {}).items()
                if not k.lower().startswith(v.RESERVED_HEADER_PREFIX)
            }
            headers["pgq_replayed_from"] = row.msg_id
            sent += send_trusted(
                dest.name,
                [row.message],
                headers=headers,
                attributes=row.attributes,
                label=row.label,
                priority=row.priority,
            )
    return sent


@recovers()
def register_callback(queue: QueueRef, callback: str) -> Any:
    """Set the dotted path of the function workers call for each message (pgpro).

    The path must import and name something callable (checked here, in this process). A
    handler registered with ``@pgq.handler`` for the same queue takes precedence.
    """

    path = v.text(callback, "callback", allow_none=False, max_length=255)
    if not path:
        raise InvalidArgument("callback must be the dotted path of a function.", field="callback")
    return alter_queue(queue, callback=path)


@recovers()
def unregister_callback(queue: QueueRef) -> Any:
    """Remove a queue's callback; its messages wait until a handler or callback appears."""

    return alter_queue(queue, callback="")


@telemetry.traced_settle("ack")
@recovers()
def complete(queue: QueueRef, msg_ids: MessageRefs, *, result: Any = None) -> bool | list[int]:
    """Acknowledge messages and record what their handler produced, in one statement.

    Like :func:`pgq_django.delete` (a receipt fences out a consumer whose lease was taken
    over; one reference answers True/False, a list answers the ids acknowledged), and on a
    queue with ``archive_on_ack`` each archived copy keeps ``result`` for :func:`result` and
    the tasks backend to read. A result PostgreSQL cannot store (not JSON, NaN or Infinity,
    a NUL character, a lone surrogate) raises InvalidArgument with
    ``details["field"] == "result"`` before anything changes.
    """
    name = v.name(queue)
    encoded = None if result is None else encode_result(result)
    single, refs = message_refs(msg_ids)
    queue_id, deleted = message_manager().ack(name, refs, result=encoded)
    if queue_id is None:
        raise queue_missing(name)
    return bool(deleted) if single else list(deleted)


def encode_result(result: Any) -> str:
    """The JSON text :func:`complete` stores for ``result``, or InvalidArgument (``field`` =
    ``result``) when jsonb cannot hold it; a batching caller groups equal results by it."""
    from django.core.serializers.json import DjangoJSONEncoder

    try:
        encoded = json.dumps(result, cls=DjangoJSONEncoder, allow_nan=False)
        # What jsonb refuses although JSON allows it: NUL and lone surrogates.
        json.dumps(result, cls=DjangoJSONEncoder, ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
        raise InvalidArgument(f"result cannot be stored as JSON: {exc}.", field="result") from None
    if _ESCAPED_NUL.search(encoded):
        raise InvalidArgument(
            "result cannot be stored as JSON: it holds a NUL character.", field="result"
        )
    return encoded


@recovers()
def release_leases(queue: QueueRef, msg_ids: MessageRefs) -> list[int]:
    """Hand leased messages back unstarted: visible now, the unused delivery not counted.

    Takes receipts (or leased Message objects); a receipt whose lease was already taken over
    is skipped. Returns the ids released.
    """
    name = v.name(queue)
    _single, refs = message_refs(msg_ids)
    if any(ct is None for _id, ct in refs):
        raise InvalidArgument("release_leases needs receipts or leased messages, not bare ids.")
    queue_id, released = message_manager().release_leases(name, refs)
    if queue_id is None:
        raise queue_missing(name)
    return list(released)


@recovers()
def archive_cancelled(queue: QueueRef, msg_id: MessageRef) -> bool:
    """Archive a leased message whose cancellation was requested, as ``cancelled``.

    The worker calls this instead of running the handler when it leases a message that was
    cancelled while it waited for a retry.
    """
    name = v.name(queue)
    queue_id, moved = message_manager().archive(
        name, [message_ref(msg_id)], outcome=Outcome.CANCELLED
    )
    if queue_id is None:
        raise queue_missing(name)
    return bool(moved)


@telemetry.traced_settle("dead_letter")
def reject(queue: QueueRef, msg_id: MessageRef, *, error: str) -> bool:
    """Fail a message for good: archived as ``dead`` with ``error``, never retried.

    Unlike :func:`pgq_django.nack` this skips the remaining retries and the dead-letter
    queue: it is for messages that can never succeed (the worker calls it when a handler
    raises :class:`~pgq_django.RejectMessage`). False for an unknown message or a receipt
    whose lease was taken over.
    """
    name = v.name(queue)
    text = v.text(error, "error", allow_none=False, max_length=100_000)
    queue_id, moved = message_manager().archive(
        name, [message_ref(msg_id)], outcome=Outcome.DEAD, error=text
    )
    if queue_id is None:
        raise queue_missing(name)
    return bool(moved)
