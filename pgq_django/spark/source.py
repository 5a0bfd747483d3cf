"""The ``pgq`` Python data source: batch and streaming reads of queues and the archive.

Planning runs in a Python worker beside the driver, reading on the executors; neither has
Django set up, so both open the store's pipeline
(:class:`pgq_django.store.managers.pipeline.Pipeline`) on the conninfo in the options (see
:func:`pgq_django.spark.register` for the default). Rows travel to Spark as Arrow record
batches built straight from a server-side cursor, ``fetchSize`` rows at a time.

- Batch read: the input partitions are msg_id ranges cut along the table's own partitions
  (every range partition and the default one), so each task reads whole index ranges of a
  few partitions and every row is read exactly once (:func:`plan_slices`).
- Streaming read of the archive (``table=archive``): offsets are msg_ids. A micro-batch ends
  below every id that could still reach the archive, so a batch once planned never gains a
  row and replays identically from a checkpoint (:class:`ArchiveStreamReader`).
- Streaming consumption of a queue (``table=messages``): each micro-batch leases messages and
  acknowledges them when Spark has committed the batch (:class:`QueueStreamReader`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.types import StructType

from ..conf import DEFAULTS
from ..exceptions import QueueNotFound
from ..store.managers.pipeline import (
    ARCHIVE_TABLE,
    COLUMNS,
    MESSAGE_COLUMNS,
    TRANSIENT_FIRST_ID,
    Pipeline,
)
from .options import ArchiveStreamOptions, ConsumeOptions, ReadOptions, WriteOptions
from .sink import QueueStreamWriter, QueueWriter

READ_SCHEMA = (
    "msg_id BIGINT, queue STRING, message STRING, headers STRING, attributes STRING, "
    "label STRING, priority INT, read_ct INT, enqueued_at TIMESTAMP, vt TIMESTAMP, "
    "expires_at TIMESTAMP, group_id STRING, archived_at TIMESTAMP, outcome STRING, error STRING"
)

# One slice of a read: (table or partition name, lowest msg_id, highest msg_id), inclusive.
Slice = tuple[str, int, int]


def _arrow_schema() -> Any:
    import pyarrow as pa

    ts = pa.timestamp("us", tz="UTC")
    types = {
        "msg_id": pa.int64(),
        "priority": pa.int32(),
        "read_ct": pa.int32(),
        "enqueued_at": ts,
        "vt": ts,
        "expires_at": ts,
        "archived_at": ts,
    }
    return pa.schema([(name, types.get(name, pa.string())) for name in COLUMNS])


def to_record_batch(rows: Sequence[tuple[Any, ...]]) -> Any:
    """Rows in :data:`COLUMNS` order (timestamps as epoch microseconds) as Arrow."""
    import pyarrow as pa

    schema = _arrow_schema()
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(schema)
    arrays = [pa.array(col, type=field.type) for col, field in zip(columns, schema, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def plan_slices(spans: Sequence[Slice], parts: int) -> list[list[Slice]]:
    """Cut id spans into about ``parts`` groups of equal id width, in span order.

    Each span is one table (partition) with the lowest and highest id it holds. A group may
    hold pieces of several small spans and a large span may be cut into several groups; the
    pieces of one span never overlap and together cover it, so every row is read once.
    """
    total = sum(hi - lo + 1 for _, lo, hi in spans)
    if total == 0:
        return []
    width = max(1, math.ceil(total / max(1, parts)))
    groups: list[list[Slice]] = []
    current: list[Slice] = []
    room = width
    for table, lo, hi in spans:
        start = lo
        while start <= hi:
            end = min(hi, start + room - 1)
            current.append((table, start, end))
            room -= end - start + 1
            start = end + 1
            if room == 0:
                groups.append(current)
                current, room = [], width
    if current:
        groups.append(current)
    return groups


class SlicesPartition(InputPartition):
    """An input partition: the slices one task reads, one after the other."""

    def __init__(self, slices: list[Slice]) -> None:
        super().__init__(slices)
        self.slices = slices


def _read_slices(opts: ReadOptions, slices: Sequence[Slice]) -> Iterator[Any]:
    with Pipeline.open(opts.dsn) as store:
        for table, lo, hi in slices:
            for rows in store.read_range(
                table,
                opts.params(lo, hi),
                archived=opts.archived,
                batch_rows=opts.fetch_rows,
                cursor_name=f"pgq_spark_{lo}",
            ):
                yield to_record_batch(rows)


class BatchReader(DataSourceReader):
    """``spark.read.format("pgq")``: msg_id ranges aligned with the table partitions."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        with Pipeline.open(self.opts.dsn) as store:
            spans = store.partition_spans(self.opts.relation)
        held = [
            (s.name, s.lo, s.hi)
            for s in sorted(spans, key=lambda s: (s.lo or 0, s.name))
            if s.lo is not None and s.hi is not None
        ]
        groups = plan_slices(held, self.opts.partitions)
        return [SlicesPartition(g) for g in groups] or [SlicesPartition([])]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, SlicesPartition)
        yield from _read_slices(self.opts, partition.slices)


# The archive stream's offset keys: one position per id space (pgq_django.store.partitions),
# each the highest msg_id of that space already delivered. A checkpoint written before the second
# space existed has only "msg_id"; its transient position is then the space's start.
_SPACES = (("msg_id", 0), ("transient", TRANSIENT_FIRST_ID - 1))


class ArchiveStreamReader(DataSourceStreamReader):
    """The archive as a stream of msg_id ranges, replayable from a checkpoint.

    A batch ``(start, end]`` may only end where no id at or below ``end`` can still reach
    the archive. Rows enter the archive from the live table in the transaction that deletes
    them there, so ``end`` stays below the oldest live message; and it stays at or below the
    sequence position of a moment after which every transaction running then has ended, so
    a send still in flight cannot add a smaller live id later. Every id at or below ``end``
    is then archived already or never will be: re-reading ``(start, end]`` after a failure
    gives the same rows, which with Spark's checkpoints makes the stream exactly-once.
    The price: the stream trails the oldest message still in any queue.

    Durable and non-durable queues draw ids from two sequences (two id spaces), so each
    space has its own ``(start, end]`` in the offset, bounded the same way by its own
    sequence and its own oldest live message: a message stuck in one kind of queue does not
    hold back the other.
    """

    def __init__(self, opts: ArchiveStreamOptions) -> None:
        self.opts = opts
        # Highest position known to be settled, per space (driver-side only).
        self._settled = [floor for _, floor in _SPACES]

    def initialOffset(self) -> dict[str, int]:
        start = self.opts.starting
        if start == "latest":
            return self._frontier()
        if start == "earliest":
            return _positions(None)
        after = int(start)
        # A msg_id starts its own space after it; the other space from its start.
        own = "transient" if after >= TRANSIENT_FIRST_ID else "msg_id"
        return {**_positions(None), own: after}

    def latestOffset(self, start: dict[str, int] | None = None, limit: Any = None) -> dict:
        frontier = self._frontier()
        begin = _positions(start)
        return {key: max(frontier[key], begin[key]) for key, _ in _SPACES}

    def _frontier(self) -> dict[str, int]:
        """The highest msg_id a batch may end at now, per space (see the class docstring)."""
        with Pipeline.open(self.opts.read.dsn) as store:
            durable, transient, xmax = store.id_horizon()
            deadline = time.monotonic() + self.opts.settle_seconds
            while True:
                if store.oldest_running() >= xmax:
                    now = (durable, transient)
                    self._settled = [max(*pair) for pair in zip(self._settled, now, strict=True)]
                    break
                if time.monotonic() > deadline:
                    break  # a long transaction: keep the last settled positions
                time.sleep(0.02)
            row = store.archive_frontier()
        frontier = {}
        for (key, floor), settled, archived, live in zip(
            _SPACES, self._settled, row[0::2], row[1::2], strict=True
        ):
            bounds = [settled, archived or floor]
            if live is not None:
                bounds.append(live - 1)
            frontier[key] = max(floor, min(bounds))
        return frontier

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin, stop = _positions(start), _positions(end)
        spans = [
            (ARCHIVE_TABLE, begin[key] + 1, stop[key])
            for key, _ in _SPACES
            if stop[key] > begin[key]
        ]
        groups = plan_slices(spans, self.opts.read.partitions)
        return [SlicesPartition(g) for g in groups]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, SlicesPartition)
        yield from _read_slices(self.opts.read, partition.slices)

    def commit(self, end: dict) -> None:
        """Nothing to release: the archive is only read."""


def _positions(offset: dict[str, int] | None) -> dict[str, int]:
    """Each space's position in an offset; a missing key is its space's start."""
    given = offset or {}
    return {key: int(given.get(key, floor)) for key, floor in _SPACES}


class ReceiptsPartition(InputPartition):
    """Leased messages of one micro-batch, as receipts (msg_id, read_ct)."""

    def __init__(self, receipts: list[tuple[int, int]]) -> None:
        super().__init__(receipts)
        self.receipts = receipts


def _encode(receipts: Sequence[tuple[int, int]]) -> str:
    return ",".join(f"{i}:{c}" for i, c in receipts)


def _decode(text: str) -> list[tuple[int, int]]:
    out = []
    for item in filter(None, (text or "").split(",")):
        msg_id, ct = item.split(":")
        out.append((int(msg_id), int(ct)))
    return out


# Driver-side pipelines of queue streams, by conninfo (stream readers are pickled, so
# they cannot hold a connection; the driver-side worker process keeps this module loaded).
_LEASE_CONNECTIONS: dict[str, Pipeline] = {}


class QueueStreamReader(DataSourceStreamReader):
    """Consume a live queue: lease per micro-batch, acknowledge when Spark commits it.

    ``latestOffset`` leases up to ``maxBatchSize`` messages and returns their receipts as the
    batch's end offset, so the offset log records exactly which deliveries a batch holds and
    a batch re-run after a restart reads the same messages (those whose lease nobody has
    taken over since). They are acknowledged (deleted, or archived as ``acked`` with
    archive_on_ack) by ``commit``, and also at the next ``latestOffset``: Spark asks for the
    next offset only after the batch ending at ``start`` is in its commit log, and without
    new data it never calls ``commit`` for that batch. A query that crashes before its batch
    is committed acknowledges nothing: the leases run out after the visibility timeout and
    the messages are delivered again (at least once).
    """

    def __init__(self, opts: ConsumeOptions) -> None:
        self.opts = opts
        self._acked: set[int] = set()
        self._last: dict[str, Any] = {"batch": 0, "receipts": ""}

    def _store(self) -> Pipeline:
        store = _LEASE_CONNECTIONS.get(self.opts.dsn)
        if store is None or not store.usable:
            store = _LEASE_CONNECTIONS[self.opts.dsn] = Pipeline.open(self.opts.dsn)
        return store

    def _state(self) -> Any:
        """The queue's state, by column name (the statement may grow columns)."""
        state = self._store().queue_state(self.opts.queue)
        if state is None:
            raise QueueNotFound(f"Queue {self.opts.queue!r} does not exist.")
        return state

    def initialOffset(self) -> dict[str, Any]:
        self._state()
        return {"batch": 0, "receipts": ""}

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict[str, Any]:
        start = start if start is not None else self._last
        self._ack(start)
        qty = self.opts.batch_size
        max_rows = getattr(limit, "max_rows", None)
        if max_rows:
            qty = max(1, min(qty, int(max_rows)))
        state = self._state()
        if state.paused:
            return start
        # As pgq.read leases: a queue with a rate or concurrency limit through the limited
        # lease, so the stream counts against the limits like every other consumer.
        rows = self._store().lease_messages(
            self.opts.queue,
            qty=qty,
            vt=self.opts.visibility_timeout,
            # The byte budget of a read; executors have no Django settings, so the
            # documented default applies (a batch is bounded by batchSize as well).
            max_bytes=DEFAULTS["READ_MAX_BYTES"],
            fifo=state.fifo,
            limited=state.limited,
        )
        if not rows:
            return start
        ct = MESSAGE_COLUMNS.index("read_ct")
        receipts = sorted((int(r[0]), int(r[ct])) for r in rows)
        self._last = {"batch": int(start.get("batch", 0)) + 1, "receipts": _encode(receipts)}
        return self._last

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        if end.get("batch") == start.get("batch"):
            return []
        receipts = _decode(end.get("receipts", ""))
        n = max(1, min(self.opts.partitions, len(receipts)))
        size = math.ceil(len(receipts) / n)
        return [ReceiptsPartition(receipts[i : i + size]) for i in range(0, len(receipts), size)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, ReceiptsPartition)
        if not partition.receipts:
            return
        with Pipeline.open(self.opts.dsn) as store:
            rows = store.leased_rows(partition.receipts)
        if rows:
            yield to_record_batch(sorted(rows, key=lambda r: r[0]))

    def commit(self, end: dict) -> None:
        self._ack(end)

    def _ack(self, offset: dict) -> None:
        """Delete (or archive as acked) a committed batch's messages, once per batch."""
        batch = int(offset.get("batch", 0))
        receipts = _decode(offset.get("receipts", ""))
        if batch in self._acked or not receipts:
            return
        archives = self._state().archive_on_ack
        self._store().ack_receipts(self.opts.queue, receipts, archives=archives)
        self._acked.add(batch)

    def stop(self) -> None:
        store = _LEASE_CONNECTIONS.pop(self.opts.dsn, None)
        if store is not None:
            store.close()


class PgqDataSource(DataSource):
    """``format("pgq")``. :func:`pgq_django.spark.register` registers a subclass that
    carries the defaults of the Django project it was registered from."""

    default_dsn: ClassVar[str | None] = None
    default_partitions: ClassVar[int] = 2
    notify_channel: ClassVar[str] = "pgq"

    @classmethod
    def name(cls) -> str:
        return "pgq"

    def schema(self) -> str:
        return READ_SCHEMA

    def _read_options(self) -> ReadOptions:
        return ReadOptions.parse(
            self.options,
            default_dsn=self.default_dsn,
            default_partitions=self.default_partitions,
        )

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(self._read_options())

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        table = {k.lower(): val for k, val in self.options.items()}.get("table", "archive")
        if table == "messages":
            return QueueStreamReader(
                ConsumeOptions.parse(self.options, default_dsn=self.default_dsn)
            )
        return ArchiveStreamReader(
            ArchiveStreamOptions.parse(
                self.options,
                default_dsn=self.default_dsn,
                default_partitions=self.default_partitions,
            )
        )

    def _write_options(self, schema: StructType) -> WriteOptions:
        return WriteOptions.parse(
            self.options,
            [f.name for f in schema.fields],
            default_dsn=self.default_dsn,
            channel=self.notify_channel,
        )

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return QueueWriter(self._write_options(schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return QueueStreamWriter(self._write_options(schema))
