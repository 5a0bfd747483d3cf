"""The one runner: every named statement of :mod:`pgq_django.store.sql` executes here.

Statements run on Django's connection to the queue database (``PGQ["DATABASE"]``), inside
whatever transaction the caller holds, through Django's cursor wrapper (query logging,
``execute_wrapper`` hooks, error translation and transaction state all apply), with three
differences from Django's own queries:

- each statement is prepared once per connection and later calls only bind and execute
  (``PGQ["PREPARED_STATEMENTS"] = False`` turns this off for poolers that cannot keep
  prepared statements);
- results come back in binary format, decoded by psycopg's C loaders (in text format when
  prepared statements are off and a statement runs as a call of its server function, sent
  in one simple-protocol message: see :class:`_CallCursor`);
- rows are named tuples: ``row.msg_id``, not ``row[0]``. The row type of a prepared
  statement is made once per process from the names its result columns carry (psycopg's
  ``namedtuple_row`` would look the names up again on every call, which cost a send a
  twentieth of its client time).

A connection set up in another process (this one was forked after using the database) is
abandoned for a new one, so parent and child never share a session: see "Forked processes"
in docs/design.md.

A few statements need a session of their own rather than Django's connection of the calling
thread: the LISTEN connection's (:mod:`pgq_django.store.sql.notify`), heard only while its
session lasts, run here too, on the caller's psycopg connection (:func:`run_dedicated`); the
worker leader's (:mod:`pgq_django.store.sql.leader`) hold an advisory lock on a dedicated
connection."""

from __future__ import annotations

import os
from collections import namedtuple
from typing import Any

import psycopg
from django.db import connections
from psycopg.sql import SQL, Composable, Composed
from psycopg.types.datetime import TimestamptzLoader
from psycopg.types.json import JsonbBinaryLoader, JsonbLoader

from .. import seams
from ..conf import settings
from . import server_functions

_EMPTY_OBJECT = b"\x01{}"


class _JsonbLoader(JsonbBinaryLoader):
    """psycopg's binary jsonb loader, with the empty object (the headers and attributes of
    most messages) made without the JSON decoder, which otherwise runs twice a row on a
    read's hottest path."""

    def load(self, data: Any) -> Any:
        if data == _EMPTY_OBJECT:
            return {}
        return super().load(data)


class _JsonbTextLoader(JsonbLoader):
    """The text-format twin of :class:`_JsonbLoader`, for :class:`_CallCursor`'s rows."""

    def load(self, data: Any) -> Any:
        if data == b"{}":
            return {}
        return super().load(data)


# A prepare threshold no statement reaches by repetition: only explicit prepares happen.
_PREPARE_ONLY_WHEN_ASKED = 2**31 - 1
# A raw connection set up for our statements carries the pid of the process that set it up
# (``_pgq_pid``: a forked child must not use its parent's connection) and its two reusable
# cursors (``_pgq_cursors``, see _configure). Attributes, not a weak dictionary: looking a
# connection up in one made a weak reference on every call of the runner's hot path.
# Connections a forked child inherited and let go of. Kept referenced so they are never
# garbage-collected in the child: psycopg would not close them there (it checks the pid),
# but it would warn about an open connection being deleted.
_ABANDONED: list[Any] = []
# This process's id, renewed in a forked child (below): os.getpid() is a system call, made
# on every statement when it was asked each time.
_pid = os.getpid()


def _abandon(db: Any) -> None:
    """Let go of a connection that belongs to the parent process, without closing it.

    Closing it would send PostgreSQL a Terminate message over the socket the parent still
    uses, ending the parent's session. Django opens a new connection on next use.
    """
    _ABANDONED.append(db.connection)
    db.connection = None


def _forget_inherited_connections() -> None:
    """After ``fork()``, in the child: abandon the connections of the forking thread.

    Any query the child made on them would share the parent's server session — interleaved
    protocol messages, and ``DuplicatePreparedStatement`` once both prepare statements under
    the same names. Other threads do not exist in the child.
    """
    global _pid
    _pid = os.getpid()
    try:
        for db in connections.all(initialized_only=True):
            if db.connection is not None:
                _abandon(db)
    except Exception:  # Django not configured in this process: nothing to forget
        pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_inherited_connections)


class _PreparingCursor(psycopg.Cursor[Any]):
    """A server-binding cursor that prepares each statement on first use.

    The named statements run thousands of times per connection and are large CTEs: parsing
    and planning them costs PostgreSQL as much as running them (docs/performance.md).
    Prepared once per connection, later calls only bind and execute.
    Django's own cursors bind on the client and never prepare, so this is opt-in here.

    Results come back in binary format: psycopg's C loaders then decode timestamps, where
    the text format goes through Django's Python timestamptz loader, a regular expression
    per timestamp, three a row. Values are the same (aware UTC datetimes, since
    Django sets the connection's time zone to UTC; jsonb decoded to Python objects).
    """

    def __init__(self, connection: Any, *, prepare: bool = True, binary: bool = True) -> None:
        super().__init__(connection)
        self._pgq_prepare = prepare
        self._pgq_binary = binary

    def execute(self, query: Any, params: Any = None, *, prepare: Any = None, **kw: Any) -> Any:
        kw.setdefault("binary", self._pgq_binary)
        if prepare is None:
            prepare = self._pgq_prepare
        return super().execute(query, params, prepare=prepare, **kw)


class _CallCursor(psycopg.ClientCursor[Any]):
    """Runs the call of a statement's server function (prepared statements off).

    A call without a binary argument (see
    :func:`~pgq_django.store.server_functions.binds_on_client`) is bound on the client and sent
    as one simple-protocol ``Query`` message, where a server-bound statement is five (Parse,
    Bind, Describe, Execute, Sync): the server sets up no unnamed statement and portal for
    it, and a pooler forwards one message, which brings a pooled single call closer to a
    direct prepared one (docs/performance.md, "Behind PgBouncer"). A value never becomes
    SQL: psycopg quotes each one with libpq's escaping, as Django's own cursors do by
    default. The simple protocol has only text results, so this cursor decodes jsonb to
    Python objects and timestamps with psycopg's C loaders, giving the same values as the
    binary rows of :class:`_PreparingCursor`.
    """

    _pgq_prepare = False
    _pgq_binary = False

    def __init__(self, connection: Any) -> None:
        super().__init__(connection)
        self.adapters.register_loader("jsonb", _JsonbTextLoader)
        self.adapters.register_loader("timestamptz", TimestamptzLoader)

    def execute(self, query: Any, params: Any = None, *, prepare: Any = None, **kw: Any) -> Any:
        kw["binary"] = False
        return super().execute(query, params, prepare=False, **kw)


def _configure(raw: Any, pid: int) -> dict[Any, _PreparingCursor | _CallCursor]:
    """Set a raw connection up for our statements; returns its (empty) cursor cache.

    Each connection keeps its cursors, reused call after call: every caller fetches its rows
    before the next statement runs on the connection (run_one, run_all, run_rowcount), and
    making a cursor per call was a large share of the runner's own time. A fixed statement
    (a module constant, or one of the few shapes of a read) has a cursor of its own: psycopg
    keeps a cursor's adaptation state (its ``Transformer``, with the dumpers and loaders it
    looked up) only while the cursor runs the same statement object again, and one cursor
    shared by a read and its delete started both afresh on every call. Other statements
    (texts built per call) share one cursor per kind (preparing or not, binary or text
    results).
    """
    if raw.prepare_threshold is None:
        # Django turns preparing off per connection; allow it for the statements that ask
        # (ours) without making Django's own queries start preparing.
        raw.prepare_threshold = _PREPARE_ONLY_WHEN_ASKED
    # Django maps jsonb to a text loader; our binary results need psycopg's binary jsonb
    # loader. Django's own queries use the text format and are unaffected.
    raw.adapters.register_loader("jsonb", _JsonbLoader)
    raw._pgq_pid = pid
    cursors: dict[Any, _PreparingCursor | _CallCursor] = {}
    raw._pgq_cursors = cursors
    return cursors


#: ``django.db.connections[alias]`` (``PGQ["DATABASE"]`` by default), found cheaply: the
#: seam's own function (:func:`pgq_django.seams.connection`), called directly on every
#: statement.
django_connection = seams.connection


def _session(alias: str | None) -> tuple[Any, Any, dict[Any, Any]]:
    """(Django connection, its psycopg connection, our cursors on it) for one call.

    What Django's ``connection.cursor()`` does first, in the same order: drop a connection
    set up by the process we were forked from, run the health check (``CONN_HEALTH_CHECKS``),
    connect if needed (refused inside an atomic block whose connection was closed), and
    refuse a connection made by another thread.
    """
    db = django_connection(alias)
    raw = db.connection
    pid = _pid
    if raw is not None and getattr(raw, "_pgq_pid", pid) != pid:
        _abandon(db)  # set up by the process we were forked from (see _abandon)
        raw = None
    if raw is not None and db.health_check_enabled:
        db.close_if_health_check_failed()  # once per request cycle: Django keeps count
        raw = db.connection
    if raw is None:
        db.ensure_connection()
        raw = db.connection
    db.validate_thread_sharing()
    cursors = getattr(raw, "_pgq_cursors", None)
    if cursors is None or raw._pgq_pid != pid:
        cursors = _configure(raw, pid)
    return db, raw, cursors


def _inner_cursor(
    statement: str | Composable,
    alias: str | None,
    prepare: bool,
    binary: bool,
    session: tuple[Any, Any, dict[Any, Any]] | None = None,
) -> tuple[Any, Any, str, Any]:
    """(Django connection, our psycopg cursor on it, statement text, the cursor's key) for
    one call; the key is None unless the statement is fixed (see :func:`_configure`).
    ``session``: what :func:`_session` answered for this call already, if it was asked."""
    db, raw, cursors = session or _session(alias)
    fixed = prepare and isinstance(statement, str)
    if not isinstance(statement, str):
        statement = statement.as_string(raw)
        prepare = False
    call = None
    if prepare and not settings.PREPARED_STATEMENTS:
        prepare = False
        if settings.SERVER_FUNCTIONS:
            # A fixed statement, where it cannot be prepared: its server-side function, whose
            # plans the server session keeps (pgq_django.store.server_functions), if it has one.
            call = server_functions.call_for(db.alias, raw, statement)
            statement = call or statement
    key: Any = (statement, prepare, binary) if fixed else (prepare, binary)
    inner: Any = cursors.get(key)
    if inner is None or inner.closed:
        with db.wrap_database_errors:
            inner = cursors[key] = (
                _CallCursor(raw)
                if call is not None and server_functions.binds_on_client(call)
                else _PreparingCursor(raw, prepare=prepare, binary=binary)
            )
    return db, inner, statement, key if fixed else None


def execute(
    statement: str | Composable,
    params: Any = None,
    alias: str | None = None,
    *,
    prepare: bool = True,
    binary: bool = True,
) -> Any:
    """Run one statement on Django's connection ``alias`` and return the open cursor.

    ``prepare=False`` binds on the server without preparing, for a statement whose text
    varies from call to call (one built around an ORM queryset). ``binary=False`` asks for
    results in text format, as Django's own queries get them, for rows the ORM's field
    converters turn into model instances (an ORM-compiled statement run many times). A
    :class:`~psycopg.sql.Composable` (a DDL template filled with identifiers) is rendered
    for this connection and never prepared, since its text varies with the identifiers.
    Prefer :func:`run_one`, :func:`run_all` and :func:`run_rowcount`, which return rows.
    """
    db, inner, text, _key = _inner_cursor(statement, alias, prepare, binary)
    cursor = db.make_debug_cursor(inner) if db.queries_logged else db.make_cursor(inner)
    cursor.execute(text, params)
    return cursor


def _fetch(
    statement: str | Composable,
    params: Any,
    alias: str | None,
    prepare: bool,
    how: int,
    session: tuple[Any, Any, dict[Any, Any]] | None = None,
) -> tuple[Any, Any, bool]:
    """Run a statement and fetch its result: (cursor, rows or first row or rowcount, fixed).

    ``how``: :data:`_ONE`, :data:`_ALL` or :data:`_COUNT`. ``fixed`` says whether the text
    is a prepared constant (its row type can be cached). Where nothing would see the
    difference (no ``execute_wrapper`` hook, no query logging, the ``unwrapped_cursor``
    shortcut on: see :func:`pgq_django.seams.may_skip_cursor_wrapper`) the statement runs on
    the driver's cursor directly, and this does what Django's wrapper would around it:
    refuse to run in a broken atomic block, and turn a driver error into Django's (marking
    the connection as errored). Otherwise it goes through Django's wrapper, so hooks and
    query logs see it as they see the ORM's.
    """
    db, inner, text, key = _inner_cursor(statement, alias, prepare, True, session)
    if seams.may_skip_cursor_wrapper(db):
        seams.refuse_in_broken_transaction(db)
        cursor = inner
    else:
        cursor = db.make_debug_cursor(inner) if db.queries_logged else db.make_cursor(inner)
        cursor.execute(text, params)
    try:
        if cursor is inner:
            _EXECUTE(inner, text, params, prepare=inner._pgq_prepare, binary=inner._pgq_binary)
        if how == _ONE:
            return cursor, inner.fetchone(), key is not None
        if how == _ALL:
            rows = inner.fetchall()
            if key is not None and len(rows) > _KEEP_RESULTS_UP_TO:
                # A fixed statement's cursor would hold its result until the statement
                # runs again: let a large one go now (a new cursor costs little per row).
                _row_type(inner, statement, True)  # named from its description first
                inner.close()
                del inner.connection._pgq_cursors[key]
            return cursor, rows, key is not None
        return cursor, inner.rowcount, key is not None
    except Exception:
        with db.wrap_database_errors:  # re-raised as Django's error, as the wrapper does
            raise


_ONE, _ALL, _COUNT = 0, 1, 2
# Rows a fixed statement's cursor may keep between two runs of it (see _fetch).
_KEEP_RESULTS_UP_TO = 16
# psycopg's own execute, called past our cursor classes' defaults (see _fetch).
_EXECUTE = psycopg.Cursor.execute


# Statement text -> the named-tuple type of its rows, for prepared statements only: their
# texts are fixed (module constants and the few shapes of a read), so this stays small.
_ROW_TYPES: dict[str, Any] = {}


def _row_type(cursor: Any, statement: Any, fixed: bool) -> Any:
    """The named-tuple type of the rows ``cursor`` returned for ``statement``."""
    found = _ROW_TYPES.get(statement) if fixed else None
    if found is not None:
        return found
    names = [column.name for column in cursor.description]
    made: Any = namedtuple("Row", names, rename=True)  # type: ignore[misc]
    if fixed:
        _ROW_TYPES[statement] = made
    return made


def run_one(
    statement: str | Composable,
    params: Any = None,
    alias: str | None = None,
    *,
    prepare: bool = True,
) -> Any:
    """The statement's first row as a named tuple, or None when it returned none."""
    return _run_one(statement, params, alias, prepare)


def _run_one(
    statement: str | Composable,
    params: Any,
    alias: str | None,
    prepare: bool,
    session: tuple[Any, Any, dict[Any, Any]] | None = None,
) -> Any:
    cursor, row, fixed = _fetch(statement, params, alias, prepare, _ONE, session)
    if row is None:
        return None
    return _row_type(cursor, statement, fixed)._make(row)


def run_one_alone(statement: str, params: dict[str, Any], alias: str | None = None) -> Any:
    """:func:`run_one` for a fixed statement that usually runs as its own transaction (the
    usual send): then, where nothing would see the difference, through libpq directly
    (:func:`pgq_django.seams.run_through_libpq`), otherwise as :func:`run_one` runs it.

    Not on a connection Django lets threads share: psycopg's cursor serialises them on the
    connection's lock, which libpq's calls would not take."""
    session = _session(alias)
    db, raw, _cursors = session
    if (
        settings.PREPARED_STATEMENTS
        and seams.may_skip_cursor_wrapper(db)
        and not db.allow_thread_sharing
    ):
        try:
            row = seams.run_through_libpq(raw, statement, params)
        except Exception:
            with db.wrap_database_errors:  # re-raised as Django's error, as the wrapper does
                raise
        if row is not seams.NOT_RUN:
            return row
    return _run_one(statement, params, alias, True, session)


def run_all(
    statement: str | Composable,
    params: Any = None,
    alias: str | None = None,
    *,
    prepare: bool = True,
    named: bool = True,
) -> list[Any]:
    """Every row the statement returned, as named tuples.

    ``named=False`` returns plain tuples, for rows that become model instances at once
    (a read's messages, matched to :data:`~pgq_django.store.sql.fragments.MESSAGE_COLUMNS` by the
    manager): naming a hundred rows first would only be thrown away.
    """
    cursor, rows, fixed = _fetch(statement, params, alias, prepare, _ALL)
    if not rows or not named:
        return rows  # type: ignore[no-any-return]
    make = _row_type(cursor, statement, fixed)._make
    return [make(row) for row in rows]


def run_rowcount(
    statement: str | Composable,
    params: Any = None,
    alias: str | None = None,
    *,
    prepare: bool = True,
) -> int:
    """Run a statement for its effect (DDL, locks, settings); returns the rows it touched."""
    return int(_fetch(statement, params, alias, prepare, _COUNT)[1])


def run_dedicated(
    connection: psycopg.Connection[Any], statement: str | SQL | Composed, params: Any = None
) -> psycopg.Cursor[Any]:
    """Run a named statement on a psycopg connection the caller owns, outside Django.

    For a session that must stay the caller's alone for as long as it lives (a LISTEN hears
    notifications only while its session lasts), which Django's per-thread connections,
    closed and reopened with requests, cannot be. The statement is never prepared (such a
    connection may go through a pooler that cannot keep prepared statements); the caller
    fetches what it needs from the cursor returned.
    """
    return connection.execute(statement, params, prepare=False)
