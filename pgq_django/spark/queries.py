"""The statements Spark runs on its own connections, named, parameterised, in one place.

Spark executors (and the driver-side Python workers that plan a read) run without Django:
they connect with psycopg to the libpq conninfo the data source was given. Sending,
publishing, leasing and acknowledging reuse the very statements the managers run
(:data:`pgq_django.managers.SEND`, :data:`~pgq_django.managers.READ`,
:data:`~pgq_django.managers.DELETE`, :data:`pgq_django.delivery.SEND_DEDUPLICATED`,
:data:`pgq_django.routing.PUBLISH`), imported from their modules; this module holds only what
the pipeline adds: listing partitions, reading an id range of a table, and the archive
stream's watermark. Identifiers are composed with :mod:`psycopg.sql` from fixed names;
every value is a query parameter.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

MESSAGE_TABLE = "pgq_message"
ARCHIVE_TABLE = "pgq_archived_message"
TABLES = {"messages": MESSAGE_TABLE, "archive": ARCHIVE_TABLE}
# The msg_id sequence (pgq_django.models.fields.MSG_ID_SEQUENCE; not imported: models need
# Django's app registry, which executors do not have).
MSG_ID_SEQUENCE = "pgq_message_msg_id_seq"

# Output columns, in schema order (see pgq_django.spark.schema.READ_SCHEMA).
COLUMNS = (
    "msg_id",
    "queue",
    "message",
    "headers",
    "attributes",
    "label",
    "priority",
    "read_ct",
    "enqueued_at",
    "vt",
    "expires_at",
    "group_id",
    "archived_at",
    "outcome",
    "error",
)


def _micros(column: str) -> sql.Composable:
    """A timestamptz as integer microseconds since the epoch (exact: extract is numeric)."""
    return sql.SQL("(extract(epoch FROM m.{}) * 1000000)::int8").format(sql.Identifier(column))


def _select_list(table: str) -> sql.Composable:
    archived = table == ARCHIVE_TABLE
    return sql.SQL(", ").join(
        [
            sql.SQL("m.msg_id, q.name, m.message::text, m.headers::text, m.attributes::text"),
            sql.SQL("m.label, m.priority, m.read_ct"),
            _micros("enqueued_at"),
            _micros("vt"),
            _micros("expires_at"),
            sql.SQL("m.group_id"),
            _micros("archived_at") if archived else sql.SQL("NULL::int8"),
            sql.SQL("m.outcome::text, m.error") if archived else sql.SQL("NULL::text, NULL::text"),
        ]
    )


# -- list_partitions -- The partitions of a table (range ones and the default) with their
# lowest and highest msg_id; a partition holding no row has NULL bounds.
LIST_PARTITIONS = """
SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT'
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
JOIN pg_class p ON p.oid = i.inhparent
WHERE p.relname = %s AND p.relnamespace = c.relnamespace
  AND p.relnamespace = to_regnamespace(current_schema())::oid
ORDER BY c.relname
"""


# -- partition_span -- The lowest and highest msg_id of one partition (two index probes).
def partition_span(partition: str) -> sql.Composed:
    return sql.SQL("SELECT min(msg_id), max(msg_id) FROM {}").format(sql.Identifier(partition))


# -- read_range -- The rows of one table (a partition, or the parent) with msg_id in
# [lo, hi], narrowed by queue, time window and outcome; timestamps as epoch microseconds.
def read_range(table: str, *, archived: bool) -> sql.Composed:
    time_column = "archived_at" if archived else "enqueued_at"
    outcome = (
        sql.SQL("AND (%(outcomes)s::text[] IS NULL OR m.outcome = ANY(%(outcomes)s::text[]))")
        if archived
        else sql.SQL("")
    )
    return sql.SQL("""
SELECT {columns}
FROM {table} m JOIN pgq_queue q ON q.id = m.queue_id
WHERE m.msg_id >= %(lo)s AND m.msg_id <= %(hi)s
  AND (%(queue)s::text IS NULL OR q.name = %(queue)s::text)
  AND (%(since)s::timestamptz IS NULL OR m.{time} >= %(since)s::timestamptz)
  AND (%(until)s::timestamptz IS NULL OR m.{time} < %(until)s::timestamptz)
  {outcome}
""").format(
        columns=_select_list(ARCHIVE_TABLE if archived else MESSAGE_TABLE),
        table=sql.Identifier(table),
        time=sql.Identifier(time_column),
        outcome=outcome,
    )


# -- leased_rows -- Live messages by receipt (msg_id and read_ct), for a micro-batch of a
# queue stream: a message leased again since (another read_ct) is not ours any more.
LEASED_ROWS = sql.SQL("""
SELECT {columns}
FROM pgq_message m JOIN pgq_queue q ON q.id = m.queue_id
WHERE m.msg_id = ANY(%(ids)s::bigint[])
  AND m.read_ct = (%(cts)s::int[])[array_position(%(ids)s::bigint[], m.msg_id)]
""").format(columns=_select_list(MESSAGE_TABLE))

# -- id_horizon -- The highest msg_id handed out so far and the snapshot's xmax: once every
# transaction below that xmax has ended, no id at or below the position can still appear.
ID_HORIZON = sql.SQL("""
SELECT (SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END FROM {}),
       pg_snapshot_xmax(pg_current_snapshot())::text::bigint
""").format(sql.Identifier(MSG_ID_SEQUENCE))

# -- oldest_running -- The oldest transaction still running (xmin of a fresh snapshot).
OLDEST_RUNNING = "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint"

# -- archive_frontier -- In one snapshot: the highest archived msg_id and the lowest live one
# (a live message may still be archived later, so an archive stream stops below it).
ARCHIVE_FRONTIER = """
SELECT (SELECT max(msg_id) FROM pgq_archived_message), (SELECT min(msg_id) FROM pgq_message)
"""

# -- queue_names -- Which of the given names are queues.
QUEUE_NAMES = "SELECT name FROM pgq_queue WHERE name = ANY(%(names)s::text[])"

# -- exchange_exists -- Whether an exchange of that name exists.
EXCHANGE_EXISTS = "SELECT EXISTS (SELECT 1 FROM pgq_exchange WHERE name = %(name)s)"


@dataclass(frozen=True)
class PartitionSpan:
    name: str
    default: bool
    lo: int | None
    hi: int | None


def connect(dsn: str) -> psycopg.Connection[Any]:
    """An autocommit connection for the pipeline (``conn.transaction()`` opens a transaction);
    in UTC, as Django's connections are."""
    conn = psycopg.connect(dsn, autocommit=True, application_name="pgq_django.spark")
    conn.execute("SET TIME ZONE 'UTC'")
    return conn


def list_partition_spans(conn: psycopg.Connection[Any], table: str) -> list[PartitionSpan]:
    """Every partition of ``table`` with the ids it holds now (default partition included)."""
    spans = []
    for name, is_default in conn.execute(LIST_PARTITIONS, [table]).fetchall():
        lo, hi = conn.execute(partition_span(name)).fetchone() or (None, None)
        spans.append(PartitionSpan(name, bool(is_default), lo, hi))
    return spans


def stream_range(
    conn: psycopg.Connection[Any],
    statement: sql.Composed,
    params: dict[str, Any],
    *,
    batch_rows: int,
    cursor_name: str,
) -> Iterator[list[tuple[Any, ...]]]:
    """Fetch a query's rows through a server-side cursor, ``batch_rows`` at a time.

    The cursor lives in a transaction of its own; memory stays bounded by one batch however
    many rows the range holds.
    """
    with conn.transaction(), conn.cursor(name=cursor_name, binary=True) as cursor:
        cursor.itersize = batch_rows
        cursor.execute(statement, params)
        while rows := cursor.fetchmany(batch_rows):
            yield rows


def fetch_all(
    conn: psycopg.Connection[Any], statement: Any, params: Any = None
) -> Sequence[tuple[Any, ...]]:
    return conn.execute(statement, params).fetchall()
