"""The PGMQ SQL interface's schema in the database: what its installer asks and does.

The installer (:mod:`pgq_django.pgmq.install`) decides when the schema goes in or out and
what to refuse; the statements it needs run here, through the one runner, so the door holds
no SQL and names no table. The schema's own SQL is rendered here too
(:func:`render_script`), from the interface's ``.sql`` templates and the store's fragments
(:mod:`pgq_django.store.sql.pgmq_interface`).
"""

from __future__ import annotations

from psycopg.sql import Identifier

from . import db
from .sql import pgmq_interface as statements


def render_script(template: str, *, schema: str, tables: str, channel: str) -> str:
    """One of the interface's SQL files with its placeholders filled (see
    :func:`pgq_django.store.sql.pgmq_interface.render`)."""
    return statements.render(template, schema=schema, tables=tables, channel=channel)


def extension_schema(alias: str) -> str | None:
    """The schema of PGMQ itself when it is installed here as an extension, or None."""
    row = db.run_one(statements.PGMQ_EXTENSION, None, alias, prepare=False)
    return None if row is None else str(row.schema)


def schema_comment(schema: str, alias: str) -> tuple[bool, str | None]:
    """Whether a schema of that name exists, and its comment."""
    row = db.run_one(statements.SCHEMA_STATE, {"schema": schema}, alias, prepare=False)
    return (False, None) if row is None else (True, row.comment)


def tables_ready(alias: str) -> bool:
    """Whether pgq_django's tables are migrated far enough to carry the interface."""
    row = db.run_one(statements.TABLES_READY, None, alias, prepare=False)
    return bool(row and row.ready)


def tables_schema(alias: str) -> str | None:
    """The schema holding pgq_django's tables, or None before they exist."""
    row = db.run_one(statements.TABLES_SCHEMA, None, alias, prepare=False)
    return None if row is None else str(row.name)


def queue_table_exists(alias: str) -> bool:
    """Whether the queue table is there at all (a database migrated to zero has none)."""
    row = db.run_one(statements.QUEUE_TABLE_EXISTS, None, alias, prepare=False)
    return bool(row and row.present)


def saved_throttles(schema: str, alias: str) -> list[tuple[str, int]]:
    """The queues with insert notifications on in the installed schema."""
    statement = statements.SAVED_THROTTLES.format(schema=Identifier(schema))
    return [(r.queue_name, r.throttle_interval_ms) for r in db.run_all(statement, None, alias)]


def drop_schema(schema: str, alias: str) -> None:
    """Drop the interface's schema (the caller has checked that it is ours)."""
    db.run_rowcount(statements.DROP_SCHEMA.format(schema=Identifier(schema)), None, alias)


def run_script(text: str, alias: str) -> None:
    """Run one rendered script of the interface (many statements, no parameters)."""
    db.execute(text, None, alias, prepare=False, binary=False)


def restore_throttle(schema: str, queue: str, ms: int, alias: str) -> bool:
    """Switch a queue's insert notifications back on; False when the queue is gone."""
    if not db.run_one(statements.QUEUE_EXISTS, {"queue": queue}, alias, prepare=False):
        return False
    restore = statements.RESTORE_THROTTLE.format(schema=Identifier(schema))
    db.run_one(restore, {"queue": queue, "ms": ms}, alias)
    return True
