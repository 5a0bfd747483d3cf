"""What the Spark pipeline adds: partition spans, id-range reads, the archive stream's
watermark, and checks of names.

Spark executors run without Django set up, on psycopg connections of their own, so these
statements run in the store's pipeline (:class:`pgq_django.store.managers.pipeline.Pipeline`)
rather than through :mod:`pgq_django.store.db`. Sending, publishing, leasing and
acknowledging are the managers' own operations
(:class:`pgq_django.store.managers.operations.Operations`), with the same statements and
parameter builders (:mod:`.params`), on the pipeline's connection.
Identifiers are composed with :mod:`psycopg.sql` from fixed names; every value is a
parameter.
"""

from __future__ import annotations

from psycopg.sql import SQL, Identifier

from .fragments import MSG_ID_SEQUENCE, TRANSIENT_MSG_ID_SEQUENCE

# The columns a Spark read returns, in schema order (see pgq_django.spark.source).
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


def _micros(column: str) -> str:
    """A timestamptz as integer microseconds since the epoch (exact: extract is numeric)."""
    return f"(extract(epoch FROM m.{column}) * 1000000)::int8"


def _select_list(*, archived: bool) -> str:
    """:data:`COLUMNS` of table ``m`` joined to its queue ``q`` (NULL where a live row has
    no archive column)."""
    archive = (
        f"{_micros('archived_at')}, m.outcome::text, m.error"
        if archived
        else "NULL::int8, NULL::text, NULL::text"
    )
    return (
        "m.msg_id, q.name, m.message::text, m.headers::text, m.attributes::text, "
        "m.label, m.priority, m.read_ct, "
        f"{_micros('enqueued_at')}, {_micros('vt')}, {_micros('expires_at')}, m.group_id, "
        f"{archive}"
    )


# -- set_utc -- Timestamps in UTC on a pipeline connection, as on Django's.
SET_UTC = "SET TIME ZONE 'UTC'"

# -- list_partition_names -- The partitions of a table (range ones and the default), with
# whether each is the default.
LIST_PARTITION_NAMES = """
SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT'
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
JOIN pg_class p ON p.oid = i.inhparent
WHERE p.relname = %s AND p.relnamespace = c.relnamespace
  AND p.relnamespace = to_regnamespace(current_schema())::oid
ORDER BY c.relname
"""

# -- partition_span -- The lowest and highest msg_id of one {partition} (two index probes);
# NULLs when it holds no row.
PARTITION_SPAN = SQL("SELECT min(msg_id), max(msg_id) FROM {partition}")

# The id-range read of either table: rows of {{table}} (a partition, or the parent) with msg_id
# in [lo, hi], narrowed by queue and time window; timestamps as epoch microseconds.
_READ_RANGE = """
SELECT {columns}
FROM {{table}} m JOIN pgq_queue q ON q.id = m.queue_id
WHERE m.msg_id >= %(lo)s AND m.msg_id <= %(hi)s
  AND (%(queue)s::text IS NULL OR q.name = %(queue)s::text)
  AND (%(since)s::timestamptz IS NULL OR m.{time} >= %(since)s::timestamptz)
  AND (%(until)s::timestamptz IS NULL OR m.{time} < %(until)s::timestamptz)
  {outcome}
"""

# -- read_live_range -- Live messages of {table} with msg_id in [lo, hi], by queue and
# enqueue time.
READ_LIVE_RANGE = SQL(
    _READ_RANGE.format(columns=_select_list(archived=False), time="enqueued_at", outcome="")
)

# -- read_archive_range -- Archived messages of {table} with msg_id in [lo, hi], by queue,
# archive time and outcome.
READ_ARCHIVE_RANGE = SQL(
    _READ_RANGE.format(
        columns=_select_list(archived=True),
        time="archived_at",
        outcome="AND (%(outcomes)s::text[] IS NULL OR m.outcome = ANY(%(outcomes)s::text[]))",
    )
)

# -- leased_rows -- Live messages by receipt (msg_id and read_ct), for a micro-batch of a
# queue stream: a message leased again since (another read_ct) is not ours any more.
LEASED_ROWS = f"""
SELECT {_select_list(archived=False)}
FROM pgq_message m JOIN pgq_queue q ON q.id = m.queue_id
WHERE m.msg_id = ANY(%(ids)s::bigint[])
  AND m.read_ct = (%(cts)s::int[])[array_position(%(ids)s::bigint[], m.msg_id)]
"""

# -- id_horizon -- The highest msg_id handed out so far in each id space (durable, then
# transient) and the snapshot's xmax: once every transaction below that xmax has ended, no id
# at or below either position can still appear.
ID_HORIZON = SQL("""
SELECT (SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END FROM {}),
       (SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END FROM {}),
       pg_snapshot_xmax(pg_current_snapshot())::text::bigint
""").format(Identifier(MSG_ID_SEQUENCE), Identifier(TRANSIENT_MSG_ID_SEQUENCE))

# -- oldest_running -- The oldest transaction still running (xmin of a fresh snapshot).
OLDEST_RUNNING = "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint"

# -- archive_frontier -- In one snapshot, for each id space (durable ids below
# %(transient)s, then transient ids from it): the highest archived msg_id and the lowest live
# one (a live message may still be archived later, so an archive stream stops below it).
# Each bound prunes to its space's ranges.
ARCHIVE_FRONTIER = """
SELECT (SELECT max(msg_id) FROM pgq_archived_message WHERE msg_id < %(transient)s),
       (SELECT min(msg_id) FROM pgq_message WHERE msg_id < %(transient)s),
       (SELECT max(msg_id) FROM pgq_archived_message WHERE msg_id >= %(transient)s),
       (SELECT min(msg_id) FROM pgq_message WHERE msg_id >= %(transient)s)
"""

# -- exchange_exists -- Whether an exchange of that name exists.
EXCHANGE_EXISTS = "SELECT EXISTS (SELECT 1 FROM pgq_exchange WHERE name = %(name)s)"
