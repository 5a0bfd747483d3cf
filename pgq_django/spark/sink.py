"""Writing a DataFrame into a queue or an exchange, from Spark's executors.

Executors have no Django, so a task does not call :func:`pgq_django.send_batch`; it checks
each row with the same checks (:func:`pgq_django.validation.send_options` and
:func:`~pgq_django.validation.body`) and hands it to the store's pipeline
(:class:`pgq_django.store.managers.pipeline.Pipeline`), which runs the managers' own send,
deduplicated send and publish operations on a psycopg connection, so a row written by Spark
is the row ``send`` or ``publish`` would have written: same defaults, counters, dedup
claims and wake-ups. Configuring Django
in every executor instead would need the project's settings and code on each worker machine,
and Django's connection handling per Python worker, for no different result.

Each task writes its rows in one transaction: a failing task leaves nothing behind, and
Spark's retry starts from a clean slate. A row fails its task where ``send`` or ``publish``
would raise: not valid, too large, no such queue or exchange, or no room under a queue's
``max_length`` (:class:`~pgq_django.exceptions.QueueFull`); a row is never dropped quietly.
Consecutive rows with the same options go in one ``SEND`` of many bodies (``send_batch``'s
statement, which sends all of them or, without room for all, none); other rows are
pipelined, one statement each, in the same round trips. A task that succeeded and is run
again (a lost executor, speculation) writes its rows again unless they carry a
``dedup_id``: then the second copy is suppressed for the dedup window (five minutes), as
with ``send`` (through an exchange, each routed queue's copy, as with ``publish``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage

from .. import validation as v
from ..exceptions import (
    ExchangeNotFound,
    InvalidMessage,
    MessageTooLarge,
    PgqError,
    QueueFull,
    QueueNotFound,
)
from ..routing import routing_key
from ..store.managers.pipeline import Pipeline, Publication, Sending
from .options import WriteOptions


@dataclass
class WriteReport(WriterCommitMessage):
    """What one task wrote: its ``rows``, and the message ``ids`` their statements answered
    (as ``send`` and ``publish`` return them: a repeated ``dedup_id`` answers the first
    copy's id)."""

    rows: int
    ids: int


def _json_field(value: Any, what: str) -> Any:
    """A headers/attributes cell: JSON text, a map, a struct (Row) or null."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError as exc:
            raise InvalidMessage(f"The {what} column holds text that is not JSON: {exc}.") from None
    if hasattr(value, "asDict"):
        return value.asDict(recursive=True)
    return value


@dataclass(frozen=True)
class _Op:
    kind: str  # "send" | "dedup" | "publish" | "publish_dedup"
    what: Sending | Publication
    options_key: tuple[Any, ...]
    position: int


def _row_op(row: Any, opts: WriteOptions, position: int, max_size: int | None) -> _Op:
    """Check one row as send() would and turn it into statement parameters."""
    cells = row.asDict() if hasattr(row, "asDict") else dict(zip(opts.columns, row, strict=True))
    try:
        headers = _json_field(cells.get("headers"), "headers")
        dropped = False
        if opts.drop_reserved_headers and isinstance(headers, dict):
            kept = {
                k: h
                for k, h in headers.items()
                if not (isinstance(k, str) and k.lower().startswith(v.RESERVED_HEADER_PREFIX))
            }
            dropped = len(kept) != len(headers)
            headers = kept
        v.unreserved_headers(headers)
        attributes = _json_field(cells.get("attributes"), "attributes")
        checked = v.send_options(
            headers=headers,
            attributes=attributes,
            label=cells.get("label"),
            priority=0 if cells.get("priority") is None else cells["priority"],
            delay=cells.get("delay"),
            group=cells.get("group"),
            dedup_id=cells.get("dedup_id"),
            expires_in=cells.get("expires_in"),
        )
        raw = cells.get("body")
        if opts.body_format == "json":
            if not isinstance(raw, str):
                raise InvalidMessage("The body column must hold JSON text (bodyFormat=json).")
            try:
                parsed = json.loads(raw)
            except ValueError as exc:
                raise InvalidMessage(f"The body is not JSON: {exc}.") from None
            size = len(v.body(parsed, headers).encode())
            body = raw  # sent as written, so numbers keep their digits
        else:
            body = v.body(raw, headers)
            size = len(body.encode())
        if isinstance(cells.get("headers"), str) and not dropped:
            # The text as written (numbers keep their digits); once keys were dropped, only
            # the filtered copy checked above may be written, never the original text.
            checked["headers"] = cells["headers"]
        if isinstance(cells.get("attributes"), str):
            checked["attributes"] = cells["attributes"]
    except PgqError as exc:
        raise type(exc)(f"Row {position} of the task: {exc.message}", **exc.details) from None
    if max_size is not None and size > max_size:
        raise MessageTooLarge(
            f"Row {position} of the task: the message is {size} bytes; queue "
            f"{opts.queue!r} accepts at most {max_size}.",
            size=size,
            max_message_size=max_size,
        )
    if opts.exchange:
        key = routing_key(cells.get("routing_key"))
        # The manager's choice (ExchangeManager.publish_body): a dedup_id claims each copy.
        kind = "publish" if checked["dedup_id"] is None else "publish_dedup"
        return _Op(kind, Publication(body, size, key, checked), (), position)
    if checked["dedup_id"] is not None:
        return _Op("dedup", Sending([body], size, checked), (), position)
    same = tuple(sorted((k, json.dumps(val)) for k, val in checked.items()))
    return _Op("send", Sending([body], size, checked), same, position)


def _merge_sends(ops: Sequence[_Op]) -> list[_Op]:
    """Consecutive sends with the same options become one send of many bodies (order kept)."""
    merged: list[_Op] = []
    for op in ops:
        last = merged[-1] if merged else None
        if last and op.kind == last.kind == "send" and op.options_key == last.options_key:
            assert isinstance(last.what, Sending) and isinstance(op.what, Sending)
            last.what.bodies.append(op.what.bodies[0])
            last.what.size = max(last.what.size, op.what.size)
        else:
            merged.append(op)
    return merged


def _write(
    store: Pipeline, same_kind: Sequence[_Op], opts: WriteOptions
) -> list[tuple[Any, ...] | None]:
    """Run ops of one kind through the store's pipeline (pipelined); each one's row."""
    kind = same_kind[0].kind
    if kind in ("publish", "publish_dedup"):
        assert opts.exchange is not None
        publications = [op.what for op in same_kind if isinstance(op.what, Publication)]
        return store.publish_each(opts.exchange, publications, channel=opts.channel)
    assert opts.queue is not None  # WriteOptions.parse takes exactly one of queue and exchange
    sends = [op.what for op in same_kind if isinstance(op.what, Sending)]
    if kind == "dedup":
        return store.send_deduplicated_each(opts.queue, sends, channel=opts.channel)
    # One transaction per task: its commit wakes the consumers (notify).
    return store.send_each(opts.queue, sends, channel=opts.channel)


def _count(op: _Op) -> int:
    """How many rows of the task an op carries (a send may carry several rows' bodies)."""
    return len(op.what.bodies) if isinstance(op.what, Sending) else 1


def _rows_named(op: _Op) -> str:
    """ "Row 3" or, for a send of several rows' bodies, "Rows 3-7" (positions in the task)."""
    count = _count(op)
    if count == 1:
        return f"Row {op.position}"
    return f"Rows {op.position}-{op.position + count - 1}"


def _check(op: _Op, row: Any, opts: WriteOptions, max_length: int | None) -> int:
    """How many message ids a statement answered (a named row); raises where ``send`` or
    ``publish`` would: no queue or exchange, a matched queue too small, no room under a
    queue's max_length. The caller's transaction then rolls back the task's every row."""
    publishing = op.kind in ("publish", "publish_dedup")
    if row is None or (row.exchange_id if publishing else row.found_queue_id) is None:
        if opts.exchange:
            raise ExchangeNotFound(f"Exchange {opts.exchange!r} does not exist.")
        raise QueueNotFound(f"Queue {opts.queue!r} does not exist.")
    if publishing:
        if row.queue_full is not None:
            raise QueueFull(
                f"{_rows_named(op)} of the task: queue {row.queue_full!r} bound to exchange "
                f"{opts.exchange!r} holds its max_length messages; the task wrote nothing.",
                queue=row.queue_full,
            )
        if row.too_large is not None:
            raise MessageTooLarge(
                f"{_rows_named(op)} of the task: the message is larger than queue "
                f"{row.too_large!r} bound to exchange {opts.exchange!r} accepts.",
                queue=row.too_large,
            )
        return len(row.msg_ids or [])
    if row.queue_full:
        count = _count(op)
        raise QueueFull(
            f"{_rows_named(op)} of the task: queue {opts.queue!r} has no room for {count} "
            f"more message{'s' if count != 1 else ''} under its max_length ({max_length}); "
            "the task wrote nothing.",
            queue=opts.queue,
            max_length=max_length,
        )
    if op.kind == "dedup":
        return 0 if row.msg_id is None else 1
    return len(row.msg_ids or [])


def _run(store: Pipeline, ops: list[_Op], opts: WriteOptions, max_length: int | None) -> int:
    """Run the ops in order, each maximal run of one kind pipelined (:func:`_write`); the
    message ids answered (see :func:`_check`)."""
    answered = 0
    start = 0
    while start < len(ops):
        end = start
        while end < len(ops) and ops[end].kind == ops[start].kind:
            end += 1
        same_kind = ops[start:end]
        rows = _write(store, same_kind, opts)
        for op, row in zip(same_kind, rows, strict=True):
            answered += _check(op, row, opts, max_length)
        start = end
    return answered


class QueueWriter(DataSourceWriter):
    """``df.write.format("pgq").option("queue", Q)`` (or ``exchange``): one transaction per task."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def _limits(self, store: Pipeline) -> tuple[int | None, int | None]:
        """The queue's max_message_size and max_length (None for an exchange: each routed
        queue's own are checked by the publish); raises when the queue or exchange is
        missing."""
        if not self.opts.queue:
            assert self.opts.exchange is not None
            if not store.exchange_exists(self.opts.exchange):
                raise ExchangeNotFound(f"Exchange {self.opts.exchange!r} does not exist.")
            return None, None
        state = store.queue_state(self.opts.queue)
        if state is None:
            raise QueueNotFound(f"Queue {self.opts.queue!r} does not exist.")
        return int(state.max_message_size), state.max_length

    def write(self, iterator: Iterator[Any]) -> WriteReport:
        rows = answered = 0
        with Pipeline.open(self.opts.dsn) as store, store.transaction():
            max_size, max_length = self._limits(store)
            batch: list[_Op] = []
            for row in iterator:
                batch.append(_row_op(row, self.opts, rows, max_size))
                rows += 1
                if len(batch) >= self.opts.batch_rows:
                    answered += _run(store, _merge_sends(batch), self.opts, max_length)
                    batch = []
            if batch:
                answered += _run(store, _merge_sends(batch), self.opts, max_length)
        return WriteReport(rows=rows, ids=answered)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Each task committed its own transaction; nothing is left to do."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Failed tasks rolled back; tasks that succeeded keep their rows (see the module)."""


class QueueStreamWriter(DataSourceStreamWriter):
    """The streaming sink: each micro-batch task writes as :class:`QueueWriter` does."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[Any]) -> WriteReport:
        return QueueWriter(self.opts).write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Each task committed its own transaction."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Failed tasks rolled back."""
