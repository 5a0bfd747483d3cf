"""The data source's options, checked once on the driver and carried to the executors.

Spark hands a data source its options as strings; these dataclasses turn them into typed,
checked values (a bad option is an :class:`~pgq_django.exceptions.InvalidArgument` that says
what is allowed) and are what the readers and writers pickle to the executors. Nothing here
needs Django set up: the executors have none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .. import validation as v
from ..exceptions import InvalidArgument
from ..store.managers.pipeline import TABLES

OUTCOMES = ("acked", "dead", "expired", "cancelled", "archived")
MAX_PARTITIONS = 10_000


def _lower(options: Mapping[str, Any]) -> dict[str, str]:
    return {str(k).lower(): str(val) for k, val in options.items() if val is not None}


def timestamp(value: str | datetime | None, field: str) -> datetime | None:
    """An ISO 8601 time (a date means its midnight); without an offset it is UTC."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        found = value
    else:
        try:
            found = datetime.fromisoformat(str(value).strip())
        except ValueError:
            raise InvalidArgument(
                f"{field} must be an ISO 8601 date or time such as 2025-01-31 or "
                f"2025-01-31T12:00:00+00:00, not {value!r}.",
                field=field,
            ) from None
    return found if found.tzinfo else found.replace(tzinfo=UTC)


def _positive(options: dict[str, str], key: str, default: int, maximum: int) -> int:
    raw = options.get(key.lower())
    if raw is None:
        return default
    # ASCII digits only: int() would also read other scripts' digits and "1_000".
    number = int(raw) if v.is_ascii_digits(raw) and len(raw) <= 18 else 0
    if not 1 <= number <= maximum:
        raise InvalidArgument(
            f"Option {key} must be a whole number from 1 to {maximum}, not {raw!r}.", field=key
        )
    return number


def _dsn(options: dict[str, str], default: str | None) -> str:
    dsn = options.get("dsn") or default
    if not dsn:
        raise InvalidArgument(
            "Option dsn is missing: give a libpq conninfo (option dsn), or register the data "
            "source with pgq_django.spark.register(spark) in a process where Django is set up.",
            field="dsn",
        )
    return dsn


def _table(options: dict[str, str], default: str) -> str:
    table = options.get("table", default)
    if table not in TABLES:
        raise InvalidArgument(
            f"Option table must be 'messages' or 'archive', not {table!r}.", field="table"
        )
    return table


@dataclass(frozen=True)
class ReadOptions:
    """What to read: the table, the filters, how to split it, where the database is."""

    dsn: str
    table: str  # "messages" | "archive"
    queue: str | None
    since: datetime | None
    until: datetime | None
    outcomes: tuple[str, ...] | None
    partitions: int
    fetch_rows: int

    @property
    def archived(self) -> bool:
        return self.table == "archive"

    @property
    def relation(self) -> str:
        return TABLES[self.table]

    def params(self, lo: int, hi: int) -> dict[str, Any]:
        return {
            "lo": lo,
            "hi": hi,
            "queue": self.queue,
            "since": self.since,
            "until": self.until,
            "outcomes": list(self.outcomes) if self.outcomes else None,
        }

    @classmethod
    def parse(
        cls,
        options: Mapping[str, Any],
        *,
        default_dsn: str | None,
        default_partitions: int,
        default_table: str = "archive",
    ) -> ReadOptions:
        opts = _lower(options)
        table = _table(opts, default_table)
        queue = opts.get("queue")
        if queue is not None:
            queue = v.name(queue)
        outcomes = None
        if opts.get("outcome"):
            if table != "archive":
                raise InvalidArgument(
                    "Option outcome applies to the archive (table=archive) only.", field="outcome"
                )
            outcomes = tuple(o.strip() for o in opts["outcome"].split(",") if o.strip())
            unknown = sorted(set(outcomes) - set(OUTCOMES))
            if unknown or not outcomes:
                raise InvalidArgument(
                    f"Option outcome takes a comma-separated list of {', '.join(OUTCOMES)}; "
                    f"{', '.join(unknown) or 'nothing'} is not one.",
                    field="outcome",
                )
        since = timestamp(opts.get("since"), "since")
        until = timestamp(opts.get("until"), "until")
        if since and until and since >= until:
            raise InvalidArgument("Option since must be earlier than until.", field="since")
        return cls(
            dsn=_dsn(opts, default_dsn),
            table=table,
            queue=queue,
            since=since,
            until=until,
            outcomes=outcomes,
            partitions=_positive(opts, "numPartitions", default_partitions, MAX_PARTITIONS),
            fetch_rows=_positive(opts, "fetchSize", 10_000, 1_000_000),
        )


@dataclass(frozen=True)
class ConsumeOptions:
    """A stream that consumes a live queue: lease per micro-batch, acknowledge on commit."""

    dsn: str
    queue: str
    batch_size: int
    visibility_timeout: float | None
    partitions: int

    @classmethod
    def parse(cls, options: Mapping[str, Any], *, default_dsn: str | None) -> ConsumeOptions:
        opts = _lower(options)
        if not opts.get("queue"):
            raise InvalidArgument(
                "Streaming from table=messages consumes a queue: give option queue.",
                field="queue",
            )
        ignored = sorted({"since", "until", "outcome"} & set(opts))
        if ignored:
            raise InvalidArgument(
                f"Consuming a queue takes every visible message; {', '.join(ignored)} "
                "applies to batch reads and the archive only.",
                field=ignored[0],
            )
        vt = opts.get("visibilitytimeout")
        timeout = None
        if vt is not None:
            try:
                if not v.is_ascii_decimal(vt):
                    raise ValueError(vt)
                timeout = v.seconds(float(vt), "visibilityTimeout")
            except ValueError:
                raise InvalidArgument(
                    f"Option visibilityTimeout must be a number of seconds, not {vt!r}.",
                    field="visibilityTimeout",
                ) from None
        return cls(
            dsn=_dsn(opts, default_dsn),
            queue=v.name(opts["queue"]),
            batch_size=_positive(opts, "maxBatchSize", 1000, v.MAX_QTY),
            visibility_timeout=timeout,
            partitions=_positive(opts, "numPartitions", 1, MAX_PARTITIONS),
        )


@dataclass(frozen=True)
class ArchiveStreamOptions:
    """A stream over the archive, keyed by msg_id offsets."""

    read: ReadOptions
    starting: str  # "earliest" | "latest" | a msg_id (exclusive)
    settle_seconds: float

    @classmethod
    def parse(
        cls, options: Mapping[str, Any], *, default_dsn: str | None, default_partitions: int
    ) -> ArchiveStreamOptions:
        read = ReadOptions.parse(
            options, default_dsn=default_dsn, default_partitions=default_partitions
        )
        if read.since or read.until:
            raise InvalidArgument(
                "A stream of the archive is keyed by msg_id: use startingOffset, not since or "
                "until.",
                field="since",
            )
        opts = _lower(options)
        starting = opts.get("startingoffset", "earliest")
        if starting not in ("earliest", "latest") and not starting.isdigit():
            raise InvalidArgument(
                "Option startingOffset is 'earliest', 'latest' or a msg_id to start after, "
                f"not {starting!r}.",
                field="startingOffset",
            )
        return cls(read=read, starting=starting, settle_seconds=5.0)


WRITE_COLUMNS = {
    # column -> the send option it fills (None: the body / the routing key)
    "body": None,
    "headers": "headers",
    "attributes": "attributes",
    "label": "label",
    "priority": "priority",
    "delay": "delay",
    "group": "group",
    "dedup_id": "dedup_id",
    "expires_in": "expires_in",
    "routing_key": None,
}


@dataclass(frozen=True)
class WriteOptions:
    """Where a DataFrame goes (a queue or an exchange) and how its rows are read."""

    dsn: str
    queue: str | None
    exchange: str | None
    body_format: str  # "json": the body column is JSON text; "text": it is the body itself
    batch_rows: int
    channel: str
    columns: tuple[str, ...]
    # Header keys starting with ``pgq_`` are the server's record (dead-letter history, redrive,
    # replay): a row carrying one is refused, as send() refuses it, unless the writer is a
    # replay of archived rows, which drops them instead (option dropReservedHeaders=true).
    drop_reserved_headers: bool = False

    @classmethod
    def parse(
        cls,
        options: Mapping[str, Any],
        columns: list[str],
        *,
        default_dsn: str | None,
        channel: str,
    ) -> WriteOptions:
        opts = _lower(options)
        queue, exchange = opts.get("queue"), opts.get("exchange")
        if (queue is None) == (exchange is None):
            raise InvalidArgument(
                "Writing to pgq needs exactly one of the options queue and exchange.",
                field="queue",
            )
        body_format = opts.get("bodyformat", "json")
        if body_format not in ("json", "text"):
            raise InvalidArgument(
                f"Option bodyFormat is 'json' or 'text', not {body_format!r}.", field="bodyFormat"
            )
        allowed = set(WRITE_COLUMNS) - ({"routing_key"} if queue else set())
        unknown = sorted(set(columns) - allowed)
        if unknown or "body" not in columns:
            raise InvalidArgument(
                "The DataFrame written to pgq needs a 'body' column and may have "
                f"{', '.join(sorted(allowed - {'body'}))}; "
                + (f"{', '.join(unknown)} is not one of them." if unknown else "body is missing."),
                field="columns",
            )
        return cls(
            dsn=_dsn(opts, default_dsn),
            queue=v.name(queue) if queue else None,
            exchange=v.name(exchange, kind="exchange") if exchange else None,
            body_format=body_format,
            batch_rows=_positive(opts, "batchSize", 500, v.MAX_QTY),
            channel=opts.get("notifychannel", channel),
            columns=tuple(columns),
            drop_reserved_headers=_flag(opts, "dropReservedHeaders"),
        )


def _flag(opts: Mapping[str, Any], name: str) -> bool:
    """A true/false option (Spark hands every option over as text)."""
    value = str(opts.get(name.lower(), "false")).strip().lower()
    if value not in ("true", "false"):
        raise InvalidArgument(f"Option {name} is true or false, not {value!r}.", field=name)
    return value == "true"
