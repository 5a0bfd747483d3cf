"""Run one leased message: the handler and its ack in one transaction, a nack on failure.

The ack is the receipt-fenced delete at the end of the handler's transaction, so the
handler's own database writes commit exactly when the message is acknowledged. If the
worker dies mid-handler the transaction rolls back and the message comes back when its lease
expires; if the lease was lost to another consumer meanwhile, the fenced delete finds
nothing and the handler's writes are rolled back too. Either way the database sees the
handler's effects once.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from enum import StrEnum
from typing import Any

from asgiref.sync import async_to_sync
from django.db import transaction
from psycopg.pq import TransactionStatus

from .. import seams, telemetry
from ..api import delivery, messages, replies, workflows
from ..conf import settings
from ..exceptions import InvalidArgument, RejectMessage
from ..store import availability
from .registry import Handler

logger = logging.getLogger("pgq_django.worker")
# One line per message handled goes here, not to ``logger``: ``pgq_worker -v 2`` shows the
# worker's DEBUG lines with a summary per interval, and only ``-v 3`` adds these.
message_logger = logging.getLogger("pgq_django.worker.messages")
telemetry.carry_trace_ids(logger, message_logger)

# Longest error text kept with a failed message (the nack stores it in the DLQ history).
MAX_ERROR_LENGTH = 20_000


class Outcome(StrEnum):
    ACKED = "acked"
    FAILED = "failed"
    LEASE_LOST = "lease_lost"
    CANCELLED = "cancelled"
    #: The handler returned, but its acknowledgement could not commit: the database could
    #: not be reached. Not the handler's failure: no nack, no attempt counted; the message
    #: comes back when its lease runs out, as after a crash.
    ACK_FAILED = "ack_failed"
    #: The database could not be reached before the handler started (its transaction could
    #: not begin): nothing ran, nothing is counted; the message comes back when its lease
    #: runs out. The process's outage record reports the outage itself.
    NOT_RUN = "not_run"


class LeaseLost(Exception):
    """The message was leased again by someone else before this handler finished."""


def describe_error(exc: BaseException) -> str:
    """The error text stored with a failed message: the traceback, ending in the exception."""
    text = "".join(traceback.format_exception(exc))
    return text if len(text) <= MAX_ERROR_LENGTH else "…" + text[-MAX_ERROR_LENGTH:]


def call_handler(entry: Handler, message: Any) -> Any:
    """Call a sync handler directly and an async one on an event loop in this thread.

    ``async_to_sync`` keeps Django's thread-sensitive calls (the async ORM) in this thread,
    so an async handler's queries join the transaction around it.
    """
    if entry.is_async:
        return async_to_sync(entry.func)(message)
    return entry.func(message)


def _complete(queue: str, message: Any, value: Any) -> bool:
    """Acknowledge with the handler's return value, or with a note when it cannot be stored.

    The handler has succeeded by now: a return value PostgreSQL cannot hold (NaN, a NUL
    character, an object that is not JSON) must not fail the message, or its work would be
    rolled back and run again. The archived result then says why the value is missing.
    """
    try:
        return bool(delivery.complete(queue, message.receipt, result=value))
    except InvalidArgument as exc:
        if exc.details.get("field") != "result":
            raise
        note = unstorable_result_note(queue, message, value, exc)
        return bool(delivery.complete(queue, message.receipt, result=note))


def _ack(queue: str, message: Any, value: Any) -> None:
    """Acknowledge, or raise LeaseLost when another consumer holds the message now."""
    if not _complete(queue, message, value):
        raise LeaseLost(f"message {message.msg_id} was leased again meanwhile")


def takes_part(message: Any) -> bool:
    """Whether a message asks for a reply or is awaited by others (docs/workflows.md): its
    ack then also sends the reply, or releases what waits for it (the store does that in
    the ack's transaction), so it is acknowledged in a transaction of its own rather than
    with a batch: a batch holding several groups' members would lock their follow-ups
    until it commits, in whatever order its messages came."""
    headers = message.headers
    return bool(headers) and (workflows.REPLY_TO in headers or workflows.AWAITED in headers)


def _ack_taking_part(queue: str, message: Any, value: Any) -> None:
    """The ack of a message that :func:`takes_part`: the reply first, then the ack (which
    releases its dependants); a lost lease rolls both back together."""
    with transaction.atomic(using=settings.DATABASE):
        replies.send_reply(message, value)
        _ack(queue, message, value)


def unstorable_result_note(
    queue: str, message: Any, value: Any, exc: InvalidArgument
) -> dict[str, str]:
    """The result archived in place of a return value PostgreSQL cannot hold, logged once."""
    logger.warning(
        "event=result_not_stored queue=%s msg_id=%s error=%r",
        queue,
        message.msg_id,
        exc.message,
    )
    return {"unstorable_result": exc.message, "type": type(value).__qualname__}


def _nothing_begun(using: str) -> bool:
    """Whether the handler's transaction is still empty, so its ack may commit on its own.

    psycopg sends BEGIN with a transaction's first statement. A handler that ran none (and
    left no on-commit callback to order after the ack) has nothing to commit with its ack,
    so the ack runs after the block as one autocommit statement: one round trip where
    BEGIN, the ack and COMMIT took three, which matters most behind a pooler. What a crash
    can leave is unchanged: the message is acknowledged or still leased.
    """
    conn = transaction.get_connection(using)
    raw = conn.connection
    return (
        raw is not None
        and bool(seams.transaction_is_empty(conn))  # None (cannot tell): assume begun
        and raw.info.transaction_status == TransactionStatus.IDLE
    )


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@telemetry.traced_process
def execute(entry: Handler, message: Any) -> Outcome:
    """Handle one message; never raises for a handler's failure (a worker survives it)."""
    queue = entry.queue
    receipt = message.receipt
    if message.cancel_requested:
        delivery.archive_cancelled(queue, receipt)
        logger.info("event=message_cancelled queue=%s msg_id=%s", queue, message.msg_id)
        return Outcome.CANCELLED
    started = time.monotonic()
    ack = _ack_taking_part if takes_part(message) else _ack
    called = returned = False  # whether the handler ran, and returned: what failed, if any
    try:
        if entry.atomic:
            with transaction.atomic(using=settings.DATABASE):
                called = True
                value = call_handler(entry, message)
                returned = True
                alone = _nothing_begun(settings.DATABASE)
                if not alone:
                    ack(queue, message, value)
            if alone:
                ack(queue, message, value)
        else:
            called = True
            value = call_handler(entry, message)
            returned = True
            ack(queue, message, value)
    except LeaseLost:
        logger.warning(
            "event=lease_lost queue=%s msg_id=%s read_ct=%s", queue, message.msg_id, message.read_ct
        )
        return Outcome.LEASE_LOST
    except RejectMessage as exc:
        return _reject(queue, message, exc)
    except Exception as exc:
        if (returned or not called) and availability.is_unreachable(exc):
            return _ack_failed(queue, message, exc) if returned else Outcome.NOT_RUN
        return _fail(queue, message, exc)
    except BaseException as exc:
        return _fail(queue, message, exc)
    message_logger.debug(
        "event=message_acked queue=%s msg_id=%s read_ct=%s duration_ms=%.2f",
        queue,
        message.msg_id,
        message.read_ct,
        (time.monotonic() - started) * 1000,
    )
    return Outcome.ACKED


def _ack_failed(queue: str, message: Any, exc: Exception) -> Outcome:
    """The handler succeeded and its acknowledgement could not commit, the database being
    out of reach: say that (one line, no traceback), and leave the message to come back
    when its lease runs out. A nack could not reach the database either, and would count
    an attempt the handler did not fail."""
    logger.warning(
        "event=ack_failed queue=%s msg_id=%s read_ct=%s error=%r; the handler finished, "
        "the message comes back when its lease runs out",
        queue,
        message.msg_id,
        message.read_ct,
        availability.summary(exc),
    )
    return Outcome.ACK_FAILED


def log_failure(queue: str, message: Any, exc: BaseException) -> None:
    """The one ``event=message_failed`` line, for a handler run alone or in a batch."""
    telemetry.record_failure(exc)
    logger.warning(
        "event=message_failed queue=%s msg_id=%s read_ct=%s error=%r",
        queue,
        message.msg_id,
        message.read_ct,
        f"{type(exc).__name__}: {exc}",
    )


def _fail(queue: str, message: Any, exc: BaseException) -> Outcome:
    """The handler raised: nack the message (its retry delay, or its dead letter)."""
    # SystemExit, KeyboardInterrupt or a cancelled coroutine raised *by the handler* is
    # its failure like any other: nack it and keep the worker thread alive. Only in the
    # main thread (a caller driving work_once itself) does Ctrl-C still stop the caller.
    error = describe_error(exc)
    log_failure(queue, message, exc)
    try:
        messages.nack(queue, message.receipt, error=error)
    except Exception as nack_error:
        # The lease will expire and the message come back; the worker carries on.
        if availability.is_unreachable(nack_error):
            logger.warning(
                "event=nack_failed queue=%s msg_id=%s error=database_unavailable",
                queue,
                message.msg_id,
            )
        else:
            logger.exception("event=nack_failed queue=%s msg_id=%s", queue, message.msg_id)
    if not isinstance(exc, Exception) and _in_main_thread():
        raise exc
    return Outcome.FAILED


def _reject(queue: str, message: Any, exc: RejectMessage) -> Outcome:
    """A handler refused its message for good: archive it as dead now, with the reason."""
    telemetry.record_failure(exc)
    reason = exc.message.replace("\x00", "\\x00")[:MAX_ERROR_LENGTH]
    error = f"{type(exc).__module__}.{type(exc).__qualname__}: {reason}"
    logger.warning(
        "event=message_rejected queue=%s msg_id=%s read_ct=%s error=%r",
        queue,
        message.msg_id,
        message.read_ct,
        reason,
    )
    try:
        delivery.reject(queue, message.receipt, error=error)
    except Exception:
        # The lease will expire and the message come back, to be rejected again.
        logger.exception("event=reject_failed queue=%s msg_id=%s", queue, message.msg_id)
    return Outcome.FAILED
