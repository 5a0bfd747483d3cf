"""Partition upkeep: the catalog queries and DDL of :mod:`pgq_django.partitions`.

DDL cannot take its identifiers as parameters, so these statements are
:class:`psycopg.sql.SQL` templates: the caller fills each ``{placeholder}`` with
:class:`~psycopg.sql.Identifier` (table and partition names) or
:class:`~psycopg.sql.Literal` (bounds, settings), which quote them; no value is ever pasted
into the text.
"""

from __future__ import annotations

from psycopg.sql import SQL, Identifier

from .fragments import MSG_ID_SEQUENCE

# -- list_partitions -- The partitions of a table (in the current schema) with their bounds as
# PostgreSQL prints them; the DEFAULT partition's bound is "DEFAULT".
LIST_PARTITIONS = """
SELECT c.relname AS name, pg_get_expr(c.relpartbound, c.oid) AS bound
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
JOIN pg_class p ON p.oid = i.inhparent
WHERE p.relname = %s AND p.relnamespace = c.relnamespace
  AND p.relnamespace = to_regnamespace(current_schema())::oid
"""

# -- sequence_position -- The highest msg_id handed out so far (0 before the first).
SEQUENCE_POSITION = SQL(
    "SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END AS position FROM {}"
).format(Identifier(MSG_ID_SEQUENCE))

# -- default_max_id -- The highest msg_id in a default {partition} (ranges must start above).
DEFAULT_MAX_ID = SQL("SELECT coalesce(max(msg_id), 0) AS max_id FROM {partition}")

# -- create_partition -- A range partition [{lower}, {upper}) of {table}, with its fillfactor.
CREATE_PARTITION = SQL(
    "CREATE TABLE {partition} PARTITION OF {table} FOR VALUES FROM ({lower}) TO ({upper}) "
    "WITH (fillfactor = {fillfactor})"
)

# -- set_lock_timeout -- Give up waiting for a lock after {timeout} (this transaction only).
SET_LOCK_TIMEOUT = SQL("SET LOCAL lock_timeout = {timeout}")

# -- lock_parent -- Hold {table} exclusively until commit: no insert into a range in flight.
LOCK_PARENT = SQL("LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")

# -- partition_has_rows -- Whether a {partition} holds any row.
PARTITION_HAS_ROWS = SQL("SELECT EXISTS (SELECT 1 FROM {partition}) AS has_rows")

# -- drop_partition -- Remove a drained {partition}.
DROP_PARTITION = SQL("DROP TABLE {partition}")
