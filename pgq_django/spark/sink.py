"""Writing a DataFrame into a queue or an exchange, from Spark's executors.

Executors have no Django, so a task does not call :func:`pgq_django.send_batch`; it checks
each row with the same checks (:func:`pgq_django.validation.send_options` and
:func:`~pgq_django.validation.body`) and runs the same statements the functional API
runs (:data:`pgq_django.sql.messages.SEND`, :data:`pgq_django.sql.delivery.SEND_DEDUPLICATED`,
:data:`pgq_django.sql.exchanges.PUBLISH`), with parameters from the managers' own builders
(:mod:`pgq_django.sql.params`), over psycopg (:mod:`.queries`), so a row written by Spark is
the row ``send`` would have written: same defaults, counters and wake-ups. Configuring Django in
every executor instead would need the project's settings and code on each worker machine,
and Django's connection handling per Python worker, for no different result.

Each task writes its rows in one transaction: a failing task leaves nothing behind, and
Spark's retry starts from a clean slate. Consecutive rows with the same options go in one
``SEND`` of many bodies (``send_batch``'s statement); other rows are pipelined, one
statement each, in the same round trips. A task that succeeded and is run again (a lost
executor, speculation) writes its rows again unless they carry a ``dedup_id``: then the
second copy is suppressed for the dedup window (five minutes), as with ``send``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage

from .. import validation as v
from ..exceptions import (
    ExchangeNotFound,
    InvalidMessage,
    MessageTooLarge,
    PgqError,
    QueueNotFound,
)
from ..routing import routing_key
from ..sql import spark as statements
from ..sql.delivery import SEND_DEDUPLICATED
from ..sql.exchanges import PUBLISH
from ..sql.messages import SEND
from ..sql.params import (
    publish_params,
    queue_state_params,
    send_deduplicated_params,
    send_params,
)
from ..sql.queues import QUEUE_STATE
from .options import WriteOptions
from .queries import connect, run, run_each


@dataclass
class WriteReport(WriterCommitMessage):
    """What one task wrote."""

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
    kind: str  # "send" | "dedup" | "publish"
    params: dict[str, Any]
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
        params = publish_params(
            opts.exchange, body, size=size, routing_key=key, channel=opts.channel, options=checked
        )
        return _Op("publish", params, (), position)
    queue = opts.queue
    assert queue is not None  # WriteOptions.parse takes exactly one of queue and exchange
    if checked["dedup_id"] is not None:
        params = send_deduplicated_params(
            queue, body, size=size, channel=opts.channel, options=checked
        )
        return _Op("dedup", params, (), position)
    same = tuple(sorted((k, json.dumps(val)) for k, val in checked.items()))
    # One transaction per task: its commit wakes the consumers (notify).
    params = send_params(
        queue, [body], size=size, channel=opts.channel, notify=True, options=checked
    )
    return _Op("send", params, same, position)


def _merge_sends(ops: Sequence[_Op]) -> list[_Op]:
    """Consecutive sends with the same options become one send of many bodies (order kept)."""
    merged: list[_Op] = []
    for op in ops:
        last = merged[-1] if merged else None
        if last and op.kind == last.kind == "send" and op.options_key == last.options_key:
            last.params["bodies"].append(op.params["bodies"][0])
            last.params["size"] = max(last.params["size"], op.params["size"])
        else:
            merged.append(op)
    return merged


def _statement(kind: str) -> str:
    """The statement of an op's kind: ``send`` (of many bodies), ``dedup`` or ``publish``."""
    if kind == "send":
        return SEND
    if kind == "dedup":
        return SEND_DEDUPLICATED
    return PUBLISH


def _check(op: _Op, row: Sequence[Any] | None, opts: WriteOptions) -> int:
    """How many messages a statement inserted; raises when it found no queue/exchange."""
    if row is None or row[0] is None:
        if opts.exchange:
            raise ExchangeNotFound(f"Exchange {opts.exchange!r} does not exist.")
        raise QueueNotFound(f"Queue {opts.queue!r} does not exist.")
    if op.kind == "publish" and row[2] is not None:
        raise MessageTooLarge(
            f"Row {op.position} of the task: the message is larger than queue {row[2]!r} "
            f"bound to exchange {opts.exchange!r} accepts."
        )
    if op.kind == "dedup":
        return 1 if row[2] else 0
    return len(row[1] or [])


def _run(conn: psycopg.Connection[Any], ops: list[_Op], opts: WriteOptions) -> int:
    """Run the ops in order, each maximal run of one statement pipelined (:func:`run_each`)."""
    inserted = 0
    start = 0
    while start < len(ops):
        end = start
        while end < len(ops) and ops[end].kind == ops[start].kind:
            end += 1
        same_kind = ops[start:end]
        rows = run_each(conn, _statement(same_kind[0].kind), [op.params for op in same_kind])
        for op, row in zip(same_kind, rows, strict=True):
            inserted += _check(op, row, opts)
        start = end
    return inserted


class QueueWriter(DataSourceWriter):
    """``df.write.format("pgq").option("queue", Q)`` (or ``exchange``): one transaction per task."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def _max_size(self, conn: psycopg.Connection[Any]) -> int | None:
        if not self.opts.queue:
            found = run(conn, statements.EXCHANGE_EXISTS, {"name": self.opts.exchange}).fetchone()
            if not (found and found[0]):
                raise ExchangeNotFound(f"Exchange {self.opts.exchange!r} does not exist.")
            return None
        state = run(conn, QUEUE_STATE, queue_state_params(self.opts.queue)).fetchone()
        if state is None:
            raise QueueNotFound(f"Queue {self.opts.queue!r} does not exist.")
        return int(state[2])

    def write(self, iterator: Iterator[Any]) -> WriteReport:
        rows = inserted = 0
        with connect(self.opts.dsn) as conn, conn.transaction():
            max_size = self._max_size(conn)
            batch: list[_Op] = []
            for row in iterator:
                batch.append(_row_op(row, self.opts, rows, max_size))
                rows += 1
                if len(batch) >= self.opts.batch_rows:
                    inserted += _run(conn, _merge_sends(batch), self.opts)
                    batch = []
            if batch:
                inserted += _run(conn, _merge_sends(batch), self.opts)
        return WriteReport(rows=rows, ids=inserted)

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
