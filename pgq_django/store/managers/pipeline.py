"""The Spark pipeline's face of the store: its executors' operations, without Django.

Spark executors (and the driver-side Python workers that plan a read) run without Django:
they open a :class:`Pipeline` on the libpq conninfo the data source was given and ask it
for what they need. It runs the managers' own operations (:class:`.operations.Operations`:
lease with the limited-queue sequence, acknowledge, send, publish, a queue's state) on a
plain psycopg connection (:class:`pgq_django.store.connection.PsycopgConnection`), and adds
what only the pipeline needs (:mod:`pgq_django.store.sql.spark`: partition spans, id-range
reads through a server-side cursor, the archive stream's watermark, leased rows by receipt),
so :mod:`pgq_django.spark` holds no statement and no driver of its own.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.sql import Identifier

from ..connection import PsycopgConnection
from ..sql import spark as sql
from ..sql.fragments import MESSAGE_COLUMNS, TRANSIENT_FIRST_ID
from ..sql.params import (
    delete_params,
    publish_params,
    read_params,
    receipt_params,
    send_deduplicated_params,
    send_params,
)
from ..sql.spark import COLUMNS
from .operations import Operations

MESSAGE_TABLE = "pgq_message"
ARCHIVE_TABLE = "pgq_archived_message"
#: The tables a read may name (``table`` option) -> the table.
TABLES = {"messages": MESSAGE_TABLE, "archive": ARCHIVE_TABLE}

__all__ = [
    "ARCHIVE_TABLE",
    "COLUMNS",
    "MESSAGE_COLUMNS",
    "MESSAGE_TABLE",
    "TABLES",
    "TRANSIENT_FIRST_ID",
    "PartitionSpan",
    "Pipeline",
    "Publication",
    "Sending",
]


@dataclass(frozen=True)
class PartitionSpan:
    """One partition of a table and the ids it holds now (None, None: no row)."""

    name: str
    default: bool
    lo: int | None
    hi: int | None


@dataclass
class Sending:
    """Bodies (JSON text) sent to one queue by one statement with the same options (as
    :func:`pgq_django.validation.send_options` checks them), the largest ``size`` bytes."""

    bodies: list[str]
    size: int
    options: dict[str, Any]


@dataclass(frozen=True)
class Publication:
    """One body (JSON text, ``size`` bytes) published with a routing key and options."""

    body: str
    size: int
    routing_key: str
    options: dict[str, Any]


class Pipeline(Operations):
    """The store's operations on a psycopg connection of the pipeline's own.

    Open one with :meth:`open`; it closes with :meth:`close` or at the end of a ``with``
    block. Statements outside :meth:`transaction` commit one by one (autocommit).
    """

    __slots__ = ()

    connection: PsycopgConnection

    @classmethod
    def open(cls, dsn: str) -> Pipeline:
        """A pipeline on a new connection to ``dsn``, in UTC as Django's connections are."""
        conn = PsycopgConnection.open(dsn, application_name="pgq_django.spark")
        conn.run(sql.SET_UTC)
        return cls(conn)

    def close(self) -> None:
        self.connection.close()

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def usable(self) -> bool:
        """Whether the connection is still open and not broken."""
        return self.connection.usable

    def transaction(self) -> Any:
        """A transaction around a block (a task's writes commit or roll back together)."""
        return self.connection.transaction()

    def partition_spans(self, table: str) -> list[PartitionSpan]:
        """Every partition of ``table`` with the ids it holds now (default partition included)."""
        spans = []
        for name, is_default in self.connection.rows(sql.LIST_PARTITION_NAMES, [table]):
            span = sql.PARTITION_SPAN.format(partition=Identifier(name))
            row = self.connection.one(span)
            lo, hi = (None, None) if row is None else tuple(row)
            spans.append(PartitionSpan(name, bool(is_default), lo, hi))
        return spans

    def read_range(
        self,
        table: str,
        params: dict[str, Any],
        *,
        archived: bool,
        batch_rows: int,
        cursor_name: str,
    ) -> Iterator[list[tuple[Any, ...]]]:
        """The live or ``archived`` rows of ``table`` (a partition, or the parent) in the id
        range and window of ``params``, as :data:`COLUMNS`, ``batch_rows`` at a time. A
        partition dropped since the read was planned yields nothing: partitions are only
        dropped once they hold no row."""
        template = sql.READ_ARCHIVE_RANGE if archived else sql.READ_LIVE_RANGE
        statement = template.format(table=Identifier(table))
        try:
            yield from self.connection.stream(
                statement, params, batch_rows=batch_rows, cursor_name=cursor_name
            )
        except psycopg.errors.UndefinedTable:
            return

    def id_horizon(self) -> tuple[int, int, int]:
        """(highest durable msg_id handed out, highest transient one, snapshot xmax)."""
        row = self.connection.one(sql.ID_HORIZON)
        durable, transient, xmax = row if row is not None else (0, 0, 0)
        return int(durable or 0), int(transient or 0), int(xmax or 0)

    def oldest_running(self) -> int:
        """The oldest transaction still running (xmin of a fresh snapshot)."""
        row = self.connection.one(sql.OLDEST_RUNNING)
        return int(row[0] or 0) if row is not None else 0

    def archive_frontier(self) -> tuple[Any, ...]:
        """Per id space (durable, then transient): the highest archived msg_id and the
        lowest live one, in one snapshot (NULLs where there is none)."""
        row = self.connection.one(sql.ARCHIVE_FRONTIER, {"transient": TRANSIENT_FIRST_ID})
        return tuple(row) if row is not None else (None,) * 4

    def leased_rows(self, receipts: Sequence[tuple[int, int]]) -> list[tuple[Any, ...]]:
        """The live messages of ``receipts`` still under those leases, as :data:`COLUMNS`."""
        return self.connection.rows(sql.LEASED_ROWS, receipt_params(receipts))

    def exchange_exists(self, name: str) -> bool:
        row = self.connection.one(sql.EXCHANGE_EXISTS, {"name": name})
        return bool(row and row[0])

    def lease_messages(
        self,
        queue: str,
        *,
        qty: int,
        vt: float | None,
        max_bytes: int,
        fifo: bool,
        limited: bool,
    ) -> list[tuple[Any, ...]]:
        """Lease up to ``qty`` messages as :func:`pgq_django.read` does (limits and FIFO
        runs included), as rows of MESSAGE_COLUMNS; ``fifo`` and ``limited`` from the
        queue's state (:meth:`~.operations.Operations.queue_state`)."""
        params = read_params(queue, qty=qty, vt=vt, max_bytes=max_bytes)
        return self.lease(params, fifo=fifo, limited=limited)

    def ack_receipts(
        self, queue: str, receipts: Sequence[tuple[int, int]], *, archives: bool
    ) -> None:
        """Delete (or archive as acked, on a queue that ``archives`` on ack) the messages of
        ``receipts`` still under those leases."""
        self.ack(delete_params(queue, receipts, result=None), archives=archives)

    def send_each(self, queue: str, sends: Sequence[Sending], *, channel: str) -> list[Any]:
        """One send per :class:`Sending` (all its bodies or, without room under the queue's
        max_length, none), pipelined; each one's row (found_queue_id, msg_ids, queue_full).
        Each wakes the queue's consumers when the transaction commits."""
        param_sets = [
            send_params(
                queue, s.bodies, size=s.size, channel=channel, notify=True, options=s.options
            )
            for s in sends
        ]
        return self.send(param_sets)

    def send_deduplicated_each(
        self, queue: str, sends: Sequence[Sending], *, channel: str
    ) -> list[Any]:
        """One send of one body under its ``dedup_id`` per :class:`Sending`, pipelined; each
        one's row (found_queue_id, msg_id: the first copy's for a repeat, queue_full)."""
        param_sets = [
            send_deduplicated_params(
                queue, s.bodies[0], size=s.size, channel=channel, options=s.options
            )
            for s in sends
        ]
        return self.send_deduplicated(param_sets)

    def publish_each(
        self, exchange: str, publications: Sequence[Publication], *, channel: str
    ) -> list[Any]:
        """One publish per :class:`Publication`, pipelined (each routed queue's copy claimed
        under a ``dedup_id`` when it has one, as :func:`pgq_django.publish` does); each
        one's row (exchange_id, msg_ids, too_large, queue_full)."""
        plain = [p.options.get("dedup_id") is None for p in publications]
        param_sets = [
            publish_params(
                exchange,
                p.body,
                size=p.size,
                routing_key=p.routing_key,
                channel=channel,
                options=p.options,
            )
            for p in publications
        ]
        if all(plain):
            return self.publish(param_sets)
        if not any(plain):
            return self.publish_deduplicated(param_sets)
        return [
            (self.publish if alone else self.publish_deduplicated)([params])[0]
            for alone, params in zip(plain, param_sets, strict=True)
        ]
