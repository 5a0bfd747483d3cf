"""Partition upkeep: the catalog queries, locks and DDL of :mod:`pgq_django.store.partitions`.

DDL cannot take its identifiers as parameters, so these statements are
:class:`psycopg.sql.SQL` templates: the caller fills each ``{placeholder}`` with
:class:`~psycopg.sql.Identifier` (table and partition names) or
:class:`~psycopg.sql.Literal` (bounds, settings), which quote them; no value is ever pasted
into the text.
"""

from __future__ import annotations

from psycopg import sql

# -- list_partitions -- The range partitions of a table with their bounds, lowest first.
LIST_PARTITIONS = """
SELECT c.relname, pg_get_expr(c.relpartbound, c.oid)
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
JOIN pg_class p ON p.oid = i.inhparent
WHERE p.relname = %s AND p.relnamespace = c.relnamespace
  AND p.relnamespace = to_regnamespace(current_schema())::oid
"""

# -- sequence_position -- The highest msg_id a {sequence} has handed out so far (one below its
# start before the first).
SEQUENCE_POSITION = sql.SQL(
    "SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END FROM {sequence}"
)

# The upkeep lock's key: the first 8 bytes of md5("pgq_django.partition_upkeep").
_UPKEEP_KEY = "('x' || left(md5('pgq_django.partition_upkeep'), 16))::bit(64)::bigint"

# -- try_upkeep_lock -- One upkeep run at a time: take the lock without waiting, for as long
# as this transaction (the run's own, on a connection of its own) lasts.
TRY_UPKEEP_LOCK = f"SELECT pg_try_advisory_xact_lock({_UPKEEP_KEY})"

# -- long_lock_holder -- Whether another session has held a lock on the table %s (or, for a
# parent, on any of its partitions) for a while: in a transaction idle for over a second or
# open for over five (a REPEATABLE READ report, a forgotten BEGIN). Upkeep leaves such a table
# for its next run instead of queueing an exclusive lock behind that session, which would make
# every send and read wait behind the queued lock until the holder ends.
LONG_LOCK_HOLDER = """
SELECT EXISTS (
    SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
    WHERE l.granted AND l.locktype = 'relation' AND a.pid <> pg_backend_pid()
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND l.relation IN (SELECT relid FROM pg_partition_tree(%s::regclass))
      AND (a.xact_start < clock_timestamp() - interval '5 seconds'
           OR (a.state IN ('idle in transaction', 'idle in transaction (aborted)')
               AND a.state_change < clock_timestamp() - interval '1 second'))
)
"""

# -- show_lock_timeout -- The lock_timeout in force (to put back after a change).
SHOW_LOCK_TIMEOUT = "SELECT current_setting('lock_timeout')"

# -- set_lock_timeout -- Give up waiting for a lock after {timeout} (this transaction only).
SET_LOCK_TIMEOUT = sql.SQL("SET LOCAL lock_timeout = {timeout}")

# -- lock_parent -- Hold {table} exclusively until commit: no insert into a range in flight.
LOCK_PARENT = sql.SQL("LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")

# -- default_max_id -- The highest msg_id in [%s, %s) of a default {partition} (NULL: none);
# ranges of that id space must start above it.
DEFAULT_MAX_ID = sql.SQL("SELECT max(msg_id) FROM {partition} WHERE msg_id >= %s AND msg_id < %s")

# -- default_next_id -- The lowest msg_id at or above %s in a default {partition}.
DEFAULT_NEXT_ID = sql.SQL("SELECT min(msg_id) FROM {partition} WHERE msg_id >= %s")

# -- count_range -- How many rows of {partition} fall in [%s, %s).
COUNT_RANGE = sql.SQL("SELECT count(*) FROM {partition} WHERE msg_id >= %s AND msg_id < %s")

# -- table_columns -- The columns of a table, in order (the repair copies rows by name).
TABLE_COLUMNS = """
SELECT attname FROM pg_attribute
WHERE attrelid = to_regclass(%s) AND attnum > 0 AND NOT attisdropped ORDER BY attnum
"""

# -- create_stash -- A temporary table shaped like {table} for rows leaving the default.
CREATE_STASH = sql.SQL("CREATE TEMP TABLE {stash} (LIKE {table}) ON COMMIT DROP")

# -- stash_default_rows -- Move the default partition's rows in [%s, %s) to the stash.
STASH_DEFAULT_ROWS = sql.SQL(
    "WITH moved AS (DELETE FROM {partition} WHERE msg_id >= %s AND msg_id < %s "
    "RETURNING {columns}) INSERT INTO {stash} ({columns}) SELECT {columns} FROM moved"
)

# -- restore_stash -- Put stashed rows back through the parent (they route to their range).
RESTORE_STASH = sql.SQL("INSERT INTO {table} ({columns}) SELECT {columns} FROM {stash}")

# -- create_partition -- A range partition [{lower}, {upper}) of {table} with its storage.
CREATE_PARTITION = sql.SQL(
    "CREATE TABLE {partition} PARTITION OF {table} FOR VALUES FROM ({lower}) TO ({upper}) "
    "WITH ({storage})"
)

# -- create_unlogged_partition -- An UNLOGGED range partition of {table} (the live ranges of
# the non-durable id space): its rows are written to no WAL and are gone after a crash.
CREATE_UNLOGGED_PARTITION = sql.SQL(
    "CREATE UNLOGGED TABLE {partition} PARTITION OF {table} "
    "FOR VALUES FROM ({lower}) TO ({upper}) WITH ({storage})"
)

# -- partition_storage -- The storage parameters a partition has now (``name=value``).
PARTITION_STORAGE = "SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = to_regclass(%s)"

# -- set_storage -- Give an existing partition the storage parameters {storage}.
SET_STORAGE = sql.SQL("ALTER TABLE {partition} SET ({storage})")

# -- queue_id_distinct -- The n_distinct a live partition's queue_id column is planned with
# now (NULL: what ANALYZE measured; see partitions.QUEUE_ID_DISTINCT).
QUEUE_ID_DISTINCT = """
SELECT (SELECT split_part(o, '=', 2) FROM unnest(a.attoptions) AS o WHERE o LIKE 'n_distinct=%%')
FROM pg_attribute a WHERE a.attrelid = to_regclass(%s) AND a.attname = 'queue_id'
"""

# -- set_queue_id_distinct -- Plan a live {partition} as if its queue_id held {n} values.
SET_QUEUE_ID_DISTINCT = sql.SQL(
    "ALTER TABLE {partition} ALTER COLUMN queue_id SET (n_distinct = {n})"
)

# -- partition_has_rows -- Whether a {partition} holds any row.
PARTITION_HAS_ROWS = sql.SQL("SELECT EXISTS (SELECT 1 FROM {partition})")

# -- archive_range_retained -- Whether any queue still keeps rows of an archive {partition}:
# its newest row there is within its retention. One probe of the (queue_id, archived_at)
# index per queue, so it costs nothing like a scan of the range.
ARCHIVE_RANGE_RETAINED = sql.SQL("""
SELECT EXISTS (SELECT 1 FROM pgq_queue q
               WHERE (SELECT max(a.archived_at) FROM {partition} a WHERE a.queue_id = q.id)
                     >= clock_timestamp() - make_interval(secs => q.retention))
""")

# -- archive_range_last -- The newest archived_at of an archive {partition} (its index).
ARCHIVE_RANGE_LAST = sql.SQL("SELECT max(archived_at) FROM {partition}")

# -- count_rows -- How many rows a {partition} holds (once, before it is dropped whole).
COUNT_ROWS = sql.SQL("SELECT count(*) FROM {partition}")

# -- drop_stash -- Remove the repair's temporary {stash} (before commit would).
DROP_STASH = sql.SQL("DROP TABLE {stash}")

# -- partition_newest_id -- The highest msg_id in a live {partition}, NULL when it holds no
# row. One backward probe of its primary key, starting at the newest (likeliest live) rows:
# under traffic it answers at once, where EXISTS would walk the dead rows at the front.
PARTITION_NEWEST_ID = sql.SQL("SELECT max(msg_id) FROM {partition}")

# -- partition_bytes -- The disk a partition (%s, by name) takes with its indexes and TOAST.
PARTITION_BYTES = "SELECT coalesce(pg_total_relation_size(to_regclass(%s)), 0)"

# -- lock_partition -- Hold one {partition} exclusively until commit: every transaction that
# reads or writes it has finished, and none starts until commit.
LOCK_PARTITION = sql.SQL("LOCK TABLE {partition} IN ACCESS EXCLUSIVE MODE")

# -- truncate_partition -- Give a drained live {partition}'s files back (it stays attached).
TRUNCATE_PARTITION = sql.SQL("TRUNCATE TABLE {partition}")

# -- drop_partition -- Remove a drained {partition}.
DROP_PARTITION = sql.SQL("DROP TABLE {partition}")
