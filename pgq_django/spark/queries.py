"""The pipeline's own psycopg connections, and the runner of every statement on them.

Spark executors (and the driver-side Python workers that plan a read) run without Django:
they connect with psycopg to the libpq conninfo the data source was given, and run the
statements of :mod:`pgq_django.store.sql` there: what the pipeline adds
(:mod:`pgq_django.store.sql.spark`: partition spans, id-range reads, the archive stream's
watermark) and, for sending, publishing, leasing and acknowledging, the very statements the
managers run, with parameters from the same builders (:mod:`pgq_django.store.sql.params`).

This module is the pipeline's counterpart of :mod:`pgq_django.store.db`: the rest of
:mod:`pgq_django.spark` runs statements only through :func:`run` (one statement),
:func:`run_each` (one statement per parameter set, pipelined) and :func:`stream_range` (a
server-side cursor), and holds no SQL text of its own.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import namedtuple_row, tuple_row
from psycopg.sql import SQL, Composed, Identifier

from ..store.sql import spark as sql
from ..store.sql.spark import COLUMNS

MESSAGE_TABLE = "pgq_message"
ARCHIVE_TABLE = "pgq_archived_message"
TABLES = {"messages": MESSAGE_TABLE, "archive": ARCHIVE_TABLE}

__all__ = [
    "ARCHIVE_TABLE",
    "COLUMNS",
    "MESSAGE_TABLE",
    "TABLES",
    "PartitionSpan",
    "connect",
    "list_partition_spans",
    "read_range",
    "run",
    "run_each",
    "stream_range",
]

# What a statement is: SQL text, or a psycopg.sql template (filled with identifiers).
Statement = str | SQL | Composed


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
    run(conn, sql.SET_UTC)
    return conn


def run(
    conn: psycopg.Connection[Any], statement: Statement, params: Any = None, *, named: bool = False
) -> psycopg.Cursor[Any]:
    """Run one statement; its rows wait in the returned cursor (``fetchone``, ``fetchall``).

    Rows are plain tuples, or with ``named`` tuples whose fields are the statement's column
    names (for a statement that may grow columns, such as a queue's state).
    """
    cursor = conn.cursor(row_factory=namedtuple_row) if named else conn.cursor()
    return cursor.execute(statement, params)


def run_each(
    conn: psycopg.Connection[Any],
    statement: Statement,
    param_sets: Sequence[Any],
    *,
    named: bool = False,
) -> list[tuple[Any, ...] | None]:
    """Run a statement once per parameter set, pipelined (the lot in the same round trips);
    the first row of each run (None when it returned none), in order.

    With ``named`` the rows are named tuples, as with :func:`run`: a caller that reads the
    answers of several statements (a send's and a publish's ``queue_full``) reads each by
    name, whatever its position in the statement.
    """
    factory = namedtuple_row if named else tuple_row
    with conn.cursor(row_factory=factory) as cursor:
        cursor.executemany(statement, param_sets, returning=True)
        rows = []
        for _ in param_sets:
            rows.append(cursor.fetchone())
            cursor.nextset()
    return rows


def list_partition_spans(conn: psycopg.Connection[Any], table: str) -> list[PartitionSpan]:
    """Every partition of ``table`` with the ids it holds now (default partition included)."""
    spans = []
    for name, is_default in run(conn, sql.LIST_PARTITION_NAMES, [table]).fetchall():
        span = sql.PARTITION_SPAN.format(partition=Identifier(name))
        lo, hi = run(conn, span).fetchone() or (None, None)
        spans.append(PartitionSpan(name, bool(is_default), lo, hi))
    return spans


def read_range(table: str, *, archived: bool) -> Composed:
    """The id-range read of ``table`` (a partition, or the parent) of live or archived rows."""
    template = sql.READ_ARCHIVE_RANGE if archived else sql.READ_LIVE_RANGE
    return template.format(table=Identifier(table))


def stream_range(
    conn: psycopg.Connection[Any],
    statement: Composed,
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
