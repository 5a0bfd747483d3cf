"""How a send happens: its checked options, its bodies, waiting for room, deduplication.

:func:`pgq_django.send`, :func:`~pgq_django.send_batch`, :func:`~pgq_django.publish` and
:func:`~pgq_django.replay` all come through here, so a send option means the same
everywhere and is checked once. The public functions live in :mod:`.messages`; this module
holds what they share.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import timedelta
from typing import Any, TypedDict

from .. import telemetry
from .. import validation as v
from ..conf import settings
from ..exceptions import InvalidArgument, InvalidMessage, MessageTooLarge, QueueFull
from ..types import Duration, QueueRef
from .refs import message_manager, queue_full, queue_missing


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
_DEFAULT_OPTIONS = v.send_options()


def check_send_options(options: dict[str, Any]) -> dict[str, Any]:
    """Checked send options. An unknown name is a clear error, not a TypeError.

    The answer is read, never changed, by its callers: a send without options (the usual
    one) gets the defaults checked once, not ten checks per call.
    """
    if not options:
        return _DEFAULT_OPTIONS
    unknown = sorted(set(options) - SEND_OPTIONS)
    if unknown:
        raise InvalidArgument(
            f"{', '.join(map(repr, unknown))} is not a send option; the options are "
            f"{', '.join(sorted(SEND_OPTIONS))}.",
            field=unknown[0],
        )
    # The checks themselves live in validation, free of models, so that Spark executors
    # (which run without Django) check each row exactly as send() checks its arguments.
    return v.send_options(**options)


def send_trusted(
    queue: QueueRef, messages: Iterable[Any], *, wait: Duration | None = None, **options: Any
) -> list[int]:
    """:func:`pgq_django.send_batch` without the reserved-header check.

    For the API's own records (a replay writes ``pgq_replayed_from``); users' sends go
    through ``send_batch``, which refuses ``pgq_*`` header keys first.
    """
    name = v.name(queue)
    opts = check_send_options(options)
    deadline = None if wait is None else wait_deadline(wait)
    raw = options.get("headers")
    if type(messages) is not list and (
        isinstance(messages, str | bytes | dict) or not isinstance(messages, Iterable)
    ):
        raise InvalidArgument("messages must be a list of message bodies.")
    bodies = _bodies(messages, raw)
    if not bodies:
        return []
    size = max(map(_byte_size, bodies))  # the largest body's
    if opts["dedup_id"] is not None and len(bodies) != 1:
        raise InvalidArgument(
            "dedup_id applies to one message; send them one by one.", field="dedup_id"
        )
    return _insert_waiting(name, bodies, size, opts, deadline)


def send_one(queue: QueueRef, message: Any, *, wait: Duration | None = None, **options: Any) -> int:
    """:func:`pgq_django.send` after its reserved-header check: :func:`send_trusted` of one
    message, with the same checks in the same order, without building and walking a batch
    (a single send is the most common call; see docs/performance.md)."""
    name = v.name(queue)
    opts = check_send_options(options)
    deadline = None if wait is None else wait_deadline(wait)
    body = v.body(message, options.get("headers"))
    size = _byte_size(body)
    budget = settings.SEND_BATCH_MAX_BYTES
    if size > budget:
        raise _batch_too_large(budget, size)
    return _insert_waiting(name, [body], size, opts, deadline)[0]


def _byte_size(body: str) -> int:
    """Bytes of an encoded body (ASCII text, the usual JSON, is as long as its encoding)."""
    return len(body) if body.isascii() else len(body.encode())


@telemetry.traced_send
def _insert_waiting(
    name: str, bodies: list[str], size: int, opts: dict[str, Any], deadline: float | None
) -> list[int]:
    """Insert; under max_length with a deadline, try again until there is room or time."""
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
        return [send_deduplicated(name, bodies[0], size=size, **opts)]
    queue_id, ids, full = message_manager().send_bodies(name, bodies, size=size, **opts)
    if queue_id is None:
        raise queue_missing(name, size=size)
    if full:
        raise queue_full(name, len(bodies))
    return list(ids)


def send_deduplicated(name: str, body: str, *, size: int, **options: Any) -> int:
    """Send one message under a dedup_id; a repeat within 5 minutes returns the first id."""
    row = message_manager().send_deduplicated(name, body, size=size, **options)
    if row.found_queue_id is None:
        raise queue_missing(name, size=size)
    if row.queue_full:
        raise queue_full(name, 1)
    return int(row.msg_id)


def _bodies(messages: Iterable[Any], headers: Any) -> list[str]:
    """Encoded bodies, refusing a batch too long or too large before anything is sent."""
    most, budget = settings.SEND_BATCH_MAX_MESSAGES, settings.SEND_BATCH_MAX_BYTES
    bodies: list[str] = []
    total = 0
    for index, message in enumerate(messages):
        if index == most:
            raise InvalidArgument(
                f"A batch holds at most {most} messages (PGQ['SEND_BATCH_MAX_MESSAGES']); "
                "split it.",
                field="messages",
            )
        try:
            body = v.body(message, headers)
        except InvalidMessage as exc:
            # Which entry: in a batch of thousands "Cannot encode the message body" alone
            # leaves the caller bisecting.
            details = {**exc.details, "index": index}
            raise type(exc)(f"messages[{index}]: {exc.message}", **details) from None
        total += len(body)  # characters: a lower bound of the bytes, checked exactly below
        if total > budget and (total := sum(len(b.encode()) for b in (*bodies, body))) > budget:
            raise _batch_too_large(budget, total)
        bodies.append(body)
    return bodies


def _batch_too_large(budget: int, size: int) -> MessageTooLarge:
    return MessageTooLarge(
        f"The batch's bodies are more than {budget} bytes together "
        "(PGQ['SEND_BATCH_MAX_BYTES']); split it.",
        size=size,
    )


def wait_deadline(wait: Duration | None) -> float | None:
    """When a send waiting for room under max_length gives up (None: it does not wait)."""
    if wait is None:
        return None
    seconds: float = v.seconds(wait, "wait")
    if seconds > settings.MAX_WAIT_SECONDS:
        raise InvalidArgument(
            f"wait must be at most {settings.MAX_WAIT_SECONDS} seconds (PGQ['MAX_WAIT_SECONDS']).",
            field="wait",
        )
    refuse_inside_atomic("wait")
    return time.monotonic() + seconds


def refuse_inside_atomic(what: str) -> None:
    """Waiting inside transaction.atomic() would hold the caller's transaction open."""
    from django.db import connections

    if not connections[settings.DATABASE].in_atomic_block:
        return
    raise InvalidArgument(
        f"{what} cannot be used inside transaction.atomic(): waiting would hold the "
        "transaction (and its locks) open; wait outside it, or don't wait.",
        field=what,
    )
