"""The connection the store's shared operations run on: Django's, or a plain psycopg one.

Most of the store runs on Django's connection through the one runner
(:mod:`pgq_django.store.db`). A few operations are also needed where Django is not set up:
the Spark executors lease, acknowledge, send and publish with the same statements, on
psycopg connections of their own. Those operations
(:class:`pgq_django.store.managers.operations.Operations`) are written once, against the
small interface :class:`Connection`, which both :class:`DjangoConnection` (the runner, on a
Django alias) and :class:`PsycopgConnection` (a psycopg connection the caller owns) satisfy:
procrastinate's connector, where one job manager serves every driver.

Rows come back as named tuples (``row.msg_id``) from :meth:`Connection.one` and
:meth:`Connection.each`, and as plain tuples from :meth:`Connection.rows`, whose rows the
callers turn into messages at once.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

import psycopg
from django.db import connections, transaction
from psycopg.conninfo import make_conninfo
from psycopg.rows import RowMaker, tuple_row
from psycopg.sql import SQL, Composed

from . import db

# What a statement is: SQL text, or a psycopg.sql template filled with identifiers.
Statement = str | SQL | Composed


class Connection(Protocol):
    """What an operation of the store needs of a connection."""

    def one(self, statement: Statement, params: Any = None) -> Any:
        """The statement's first row, named, or None when it returned none."""

    def rows(self, statement: Statement, params: Any = None) -> list[tuple[Any, ...]]:
        """Every row of the statement, as plain tuples."""

    def each(self, statement: Statement, param_sets: Sequence[Any]) -> list[Any]:
        """The first row (named, or None) of one run of the statement per parameter set, in
        order; in as few round trips as the driver allows."""

    def run(self, statement: Statement, params: Any = None) -> None:
        """Run a statement for its effect."""

    def transaction(self) -> AbstractContextManager[Any]:
        """A transaction (a savepoint inside one already open) around a block."""

    def in_transaction(self) -> bool:
        """Whether a transaction is open (the block's statements commit with it)."""


class DjangoConnection:
    """Django's connection ``alias``, through the one runner (prepared statements, binary
    rows, Django's error translation and transaction state)."""

    __slots__ = ("alias",)

    def __init__(self, alias: str) -> None:
        self.alias = alias

    def one(self, statement: Statement, params: Any = None) -> Any:
        return db.run_one(statement, params, self.alias)

    def rows(self, statement: Statement, params: Any = None) -> list[tuple[Any, ...]]:
        return db.run_all(statement, params, self.alias, named=False)

    def each(self, statement: Statement, param_sets: Sequence[Any]) -> list[Any]:
        return [db.run_one(statement, params, self.alias) for params in param_sets]

    def run(self, statement: Statement, params: Any = None) -> None:
        db.run_rowcount(statement, params, self.alias)

    def transaction(self) -> AbstractContextManager[Any]:
        return transaction.atomic(using=self.alias)

    def in_transaction(self) -> bool:
        return bool(transaction.get_connection(self.alias).in_atomic_block)


def _named_row(cursor: Any) -> RowMaker[Any]:
    """psycopg row factory: named tuples, with columns whose names repeat or are not Python
    names renamed (``_1``, …) as the runner names them, rather than refused."""
    description = cursor.description
    if description is None:
        return tuple_row(cursor)
    made: Any = namedtuple("Row", [c.name for c in description], rename=True)  # type: ignore[misc]
    return made._make


class PsycopgConnection:
    """A psycopg connection the caller owns, without Django (the Spark executors').

    Open it with :meth:`open` (autocommit, so each statement outside :meth:`transaction`
    commits on its own) and close it with :meth:`close` or a ``with`` block.
    """

    __slots__ = ("raw",)

    def __init__(self, raw: psycopg.Connection[Any]) -> None:
        self.raw = raw

    @classmethod
    def open(cls, dsn: str, *, application_name: str) -> PsycopgConnection:
        return cls(psycopg.connect(dsn, autocommit=True, application_name=application_name))

    def close(self) -> None:
        self.raw.close()

    def __enter__(self) -> PsycopgConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def usable(self) -> bool:
        """Whether the connection is still open and not broken."""
        return not (self.raw.closed or self.raw.broken)

    def one(self, statement: Statement, params: Any = None) -> Any:
        with self.raw.cursor(row_factory=_named_row) as cursor:
            return cursor.execute(statement, params).fetchone()

    def rows(self, statement: Statement, params: Any = None) -> list[tuple[Any, ...]]:
        with self.raw.cursor(row_factory=tuple_row) as cursor:
            return cursor.execute(statement, params).fetchall()

    def each(self, statement: Statement, param_sets: Sequence[Any]) -> list[Any]:
        """Pipelined: every run goes out before the first answer is read."""
        with self.raw.cursor(row_factory=_named_row) as cursor:
            cursor.executemany(statement, param_sets, returning=True)
            found = []
            for _ in param_sets:
                found.append(cursor.fetchone())
                cursor.nextset()
        return found

    def run(self, statement: Statement, params: Any = None) -> None:
        self.raw.execute(statement, params)

    def transaction(self) -> AbstractContextManager[Any]:
        return self.raw.transaction()

    def in_transaction(self) -> bool:
        return self.raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE

    def stream(
        self, statement: Statement, params: Any, *, batch_rows: int, cursor_name: str
    ) -> Iterator[list[tuple[Any, ...]]]:
        """A query's rows through a server-side cursor, ``batch_rows`` at a time, in a
        transaction of its own: memory stays bounded by one batch however many rows the
        query finds."""
        with self.raw.transaction(), self.raw.cursor(name=cursor_name, binary=True) as cursor:
            cursor.itersize = batch_rows
            cursor.execute(statement, params)
            while rows := cursor.fetchmany(batch_rows):
                yield rows


def conninfo(alias: str) -> str:
    """The libpq conninfo of Django's database ``alias``, for connections made without
    Django (the Spark executors')."""
    found = connections[alias].settings_dict
    params = {
        "dbname": found.get("NAME"),
        "user": found.get("USER") or None,
        "password": found.get("PASSWORD") or None,
        "host": found.get("HOST") or None,
        "port": str(found["PORT"]) if found.get("PORT") else None,
        **{k: v for k, v in (found.get("OPTIONS") or {}).items() if isinstance(v, str | int)},
    }
    return make_conninfo(**{k: str(v) for k, v in params.items() if v is not None})
