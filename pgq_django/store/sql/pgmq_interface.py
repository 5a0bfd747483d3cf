"""What the PGMQ SQL interface's installer asks and does around its schema files, and the
rendering of those files from the store's own statements.

The interface itself (types, views, PGMQ's functions over pgq_django's tables) is SQL
templates in :mod:`pgq_django.pgmq.sql`; :func:`render` fills them with the statements and
fragments of this package that the Python API runs (READ and the limited lease, POP,
ACK_ONE, DELETE, ARCHIVE, PURGE, LEASE_SELECTED, and the send's fragments), so a rule the
store owns is written once. The statements below are the installer's
(:mod:`pgq_django.store.pgmq_schema`, for :mod:`pgq_django.pgmq.install`): whether PGMQ or a
foreign schema is in the way, whether the tables are ready, and removing the schema while
carrying over its insert-notification settings.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

from psycopg.sql import SQL, Literal

from ... import validation
from . import messages, queues
from .fragments import (
    COLS,
    COUNTER_INSERT,
    HAS_ROOM,
    M_COLS,
    OPTION_DEFAULTS,
    archive_rows,
    counter_total,
    expiry,
    id_sequence,
    insert_messages,
    next_msg_id,
    notify_queue,
)

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

# -- queue_table_exists -- Whether the queue table is there at all (a database migrated to
# zero has none): before pgq_django's migrations, the interface has nothing to remove.
QUEUE_TABLE_EXISTS = "SELECT to_regclass('pgq_queue') IS NOT NULL AS present"

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


# -- the interface's SQL, rendered from the store's statements and fragments ---------------
#
# The .sql files of pgq_django.pgmq.sql are templates. Where they need a rule the store owns
# they name it by a placeholder, and render() writes in the store's own text: a change to
# the rule reaches the Python API and the PGMQ functions alike (at the next migrate).
# Whole statements come in as the managers run them, with their parameters turned into
# PL/pgSQL expressions and the changes PGMQ's contract asks for (reads set last_read_at,
# which PGMQ's message record carries; the archive keeps it; rows come back as PGMQ's
# message records). Each change is checked to apply exactly once, so a statement that
# changes shape stops the render instead of dropping the change.

# The relations the store's text names, written schema-qualified into the functions: they
# run with the search_path of whoever calls them (a PGMQ client's, not Django's).
_RELATIONS = (
    "pgq_archived_message",
    "pgq_message_msg_id_seq",
    "pgq_message_transient_id_seq",
    "pgq_message",
    "pgq_queue_counter",
    "pgq_queue_limit",
    "pgq_queue",
)
_RELATION = re.compile(r"(?<![\w.@])(" + "|".join(_RELATIONS) + r")\b")
_PARAMETER = re.compile(r"%\((\w+)\)[sb]")
_PLACEHOLDER = re.compile(r"@(\w+)(?::([^@\n]*))?@")


def qualified(text: str) -> str:
    """``text`` with every relation of the store's named as ``@pgq@.<name>``."""
    return _RELATION.sub(r"@pgq@.\1", text)


def _once(text: str, old: str, new: str) -> str:
    if text.count(old) != 1:
        raise AssertionError(f"expected {old!r} once in a statement the PGMQ interface renders")
    return text.replace(old, new)


def _records(rows: str, order: str | None = None) -> str:
    """PGMQ's message records of the rows of CTE ``rows``, in delivery order (or ``order``);
    headers never set read NULL, as PGMQ shows them."""
    r = rows
    return (
        f"SELECT {r}.msg_id, {r}.read_ct, {r}.enqueued_at, {r}.last_read_at, {r}.vt, "
        f"{r}.message, @extschema@._pgq_headers({r}.headers)\n"
        f"FROM {r} ORDER BY {order or f'{r}.priority, {r}.msg_id'}"
    )


# A read leases as the store's read does, and records the read in last_read_at (PGMQ's).
_LEASE_SET = "read_ct = m.read_ct + 1"
_RETURNING = f"RETURNING {M_COLS}"


def _reading(text: str) -> str:
    """``text``, a lease, setting and returning last_read_at too."""
    text = _once(text, _LEASE_SET, _LEASE_SET + ", last_read_at = clock_timestamp()")
    return _once(text, _RETURNING, _RETURNING + ", m.last_read_at")


def _archiving(
    text: str, rows: str, outcome: str, *, result: str | None = None, error: str | None = None
) -> str:
    """``text`` whose archive move (the fragment as the store wrote it, with these
    arguments) keeps last_read_at, which PGMQ's archive shows."""
    text = _once(text, _RETURNING, _RETURNING + ", m.last_read_at")
    moved = archive_rows(rows, outcome, result=result, error=error)
    kept = archive_rows(rows, outcome, result=result, error=error, kept=("last_read_at",))
    return _once(text, moved, kept)


# What PGMQ's grouped reads chose (p_ids of queue qrow), those still visible: leased as the
# Python API leases the messages an ORM queryset selected.
_CHOSEN = """SELECT m.msg_id FROM pgq_message m
    WHERE m.msg_id = ANY(p_ids) AND m.queue_id = qrow.id AND m.vt <= clock_timestamp()"""

# What a PGMQ read's ``conditional`` filters: the body contains it ('{}': every message).
_CONDITIONAL = (
    "AND (p_conditional IS NULL OR p_conditional = '{}'::jsonb OR m.message @> p_conditional)"
)

# The values of the store's parameters in the functions: PL/pgSQL variables (``p_``) the
# function declares, or what PGMQ's calls always mean: no byte budget (qty alone bounds a
# read), never a relaxed commit (the caller's transaction), no receipt (PGMQ acts on a
# msg_id whoever leased it), no result or error, the outcome 'archived'.
_VALUES = {
    "queue": "p_queue",
    "vt": "p_vt",
    "qty": "p_qty",
    "ids": "p_ids",
    "msg_id": "p_msg_id",
    "max_bytes": "9223372036854775807",
    "relax": "false",
    "cts": "NULL::int[]",
    "ct": "NULL::int",
    "result": "NULL",
    "error": "NULL",
    "outcome": "'archived'",
}


@functools.cache
def _statements() -> dict[str, str]:
    """The store's statements the functions run, by the name their placeholder gives."""
    found = {}
    for fifo, suffix in ((False, ""), (True, "_fifo")):
        read = _reading(messages.READ[fifo]).format(filters=_CONDITIONAL)
        found["read" + suffix] = f"WITH leased AS ({read})\n{_records('leased')}"
        limited = _reading(queues.READ_LIMITED[fifo]).format(filters=_CONDITIONAL)
        found["read_limited" + suffix] = _once(
            limited, f"SELECT {COLS} FROM leased", _records("leased")
        )
        pop = _archiving(messages.POP[fifo], "d", "'acked'").format(filters="")
        found["pop" + suffix] = _once(pop, f"SELECT {COLS} FROM d", _records("d"))
    chosen = _once(messages.LEASE_SELECTED.format(candidates=_CHOSEN), "%s", "%(vt)s")
    found["lease_ids"] = (
        f"WITH leased AS ({_reading(chosen)})\n"
        f"{_records('leased', 'array_position(p_ids, leased.msg_id)')}"
    )
    found["lock_limit"] = queues.LOCK_LIMIT
    found["add_limit"] = queues.ADD_LIMIT
    found["ack_one"] = messages.ACK_ONE
    found["delete"] = messages.DELETE[False]
    found["delete_archiving"] = _archiving(
        messages.DELETE[True], "d", "'acked'", result="%(result)s::jsonb"
    )
    found["archive"] = _archiving(
        messages.ARCHIVE, "d", "%(outcome)s", result="%(result)s::jsonb", error="%(error)s"
    )
    found["purge"] = messages.PURGE
    return found


# What the columns a PGMQ send does not set take: the store's defaults of a send without
# options, except headers (PGMQ's own, per message), the group (PGMQ's 'x-pgmq-group'
# header) and the delay (until ``visible_at``, or the queue's delivery_delay without one).
_SEND_OPTIONS = {
    **OPTION_DEFAULTS,
    "headers": "coalesce(b.header, '{}'::jsonb)",
    "group": "CASE WHEN jsonb_typeof(b.header) = 'object' THEN b.header->>'x-pgmq-group' END",
    "delay": "p_delay",
}


def _fragment(name: str, args: list[str]) -> str:
    """The text of one fragment placeholder: ``@name@`` or ``@name:arg|arg@``."""
    if name == "store":
        statement, *overrides = args
        values = dict(_VALUES)
        for override in overrides:
            key, _, given = override.partition("=")
            values[key.strip()] = given.strip()

        def value(found: re.Match[str]) -> str:
            return values[found.group(1)]

        return qualified(_PARAMETER.sub(value, _statements()[statement].strip()))
    fragments: dict[str, Callable[..., str]] = {
        "next_msg_id": next_msg_id,
        "id_sequence": id_sequence,
        "expiry": lambda seconds, start: expiry(seconds, start=start),
        "counter_insert": lambda: COUNTER_INSERT,
        "counter_total": counter_total,
        "has_room": lambda q, n: HAS_ROOM.format(q=q, n=n),
        "insert_messages": lambda q, body: insert_messages(q, body, options=_SEND_OPTIONS),
    }
    return qualified(fragments[name](*args))


def render(template: str, *, schema: str, tables: str, channel: str) -> str:
    """A .sql template of the interface with its placeholders filled: the store's
    statements and fragments first (see above), then the names and literals they and the
    templates use: ``@extschema@`` (the interface's schema), ``@pgq@`` (the schema of the
    store's tables), ``@channel@`` (the store's notify channel, a literal), ``@forever@``
    (the longest retention, which means "never expires"), and the store's text rules as
    literals, ``@reserved_prefix@`` and ``@not_xml@``. ``@notify:name@`` is the store's
    wake-up of queue ``name``. A placeholder it does not know raises ``KeyError``."""
    constants = {
        "extschema": schema,
        "pgq": tables,
        "channel": Literal(channel).as_string(None),
        "forever": str(validation.MAX_SECONDS),
        "not_xml": Literal(validation.NOT_XML_IN_JSON).as_string(None),
        "reserved_prefix": Literal(validation.RESERVED_HEADER_PREFIX).as_string(None),
    }

    def fragment(found: re.Match[str]) -> str:
        name, args = found.group(1), found.group(2)
        if name in constants:
            return found.group(0)
        if name == "notify":
            return notify_queue(args, channel=constants["channel"])
        return _fragment(name, args.split("|") if args else [])

    def constant(found: re.Match[str]) -> str:
        return constants[found.group(1)]

    return _PLACEHOLDER.sub(constant, _PLACEHOLDER.sub(fragment, template))
