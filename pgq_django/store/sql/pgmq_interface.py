"""What the PGMQ SQL interface's installer asks and does around its schema files.

The interface itself (types, views, PGMQ's functions over pgq_django's tables) is SQL files
in :mod:`pgq_django.pgmq.sql`; these statements are the installer's
(:mod:`pgq_django.pgmq.install`): whether PGMQ or a foreign schema is in the way, whether
the tables are ready, and removing the schema while carrying over its insert-notification
settings.
"""

from __future__ import annotations

from psycopg.sql import SQL

# -- pgmq_extension -- The schema of PGMQ itself, when it is installed as an extension in
# this database (no row: it is not).
PGMQ_EXTENSION = """
SELECT e.extnamespace::regnamespace::text AS schema FROM pg_extension e WHERE e.extname = 'pgmq'
"""

# -- schema_state -- The schema of that name, if any: whether it exists and its comment
# (ours starts with
# pgq_django.pgmq.sql.OWN_SCHEMA_MARK).
SCHEMA_STATE = """
SELECT n.nspname::text AS name, obj_description(n.oid, 'pg_namespace') AS comment
FROM pg_namespace n WHERE n.nspname = %(schema)s
"""

# -- tables_ready -- Whether pgq_django's tables are migrated far enough for the interface:
# the message table exists and has last_read_at (migration 0013).
TABLES_READY = """
SELECT EXISTS (
    SELECT 1 FROM pg_attribute a
    WHERE a.attrelid = to_regclass('pgq_message') AND a.attname = 'last_read_at'
      AND NOT a.attisdropped
) AS ready
"""

# -- tables_schema -- The schema holding pgq_django's tables (where migrate made them).
TABLES_SCHEMA = """
SELECT c.relnamespace::regnamespace::text AS name
FROM pg_class c WHERE c.oid = to_regclass('pgq_queue')
"""

# -- saved_throttles -- The queues with insert notifications on, to carry over a reinstall.
SAVED_THROTTLES = SQL(
    "SELECT queue_name, throttle_interval_ms FROM {schema}.notify_insert_throttle"
)

# -- restore_throttle -- Switch one queue's insert notifications back on after a reinstall.
RESTORE_THROTTLE = SQL(
    "SELECT {schema}.enable_notify_insert(%(queue)s::text, %(ms)s::integer)::text AS done"
)

# -- queue_exists -- Whether a queue of this name still exists (a carried-over setting of
# a dropped queue is left behind).
QUEUE_EXISTS = "SELECT 1 AS found FROM pgq_queue WHERE name = %(queue)s"

# -- drop_schema -- Remove the interface: its schema, and with its functions the triggers
# it put on pgq_queue and pgq_message. pgq_django's tables and messages stay.
DROP_SCHEMA = SQL("DROP SCHEMA {schema} CASCADE")
