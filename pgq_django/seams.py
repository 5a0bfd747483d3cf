"""The one module that touches what Django and asgiref do not publish.

A few of pgq_django's hottest paths are cheaper when they read a dependency's internal state
instead of going through its public API. Each such shortcut lives here, beside the public way
of doing the same thing, and nowhere else (the one shortcut that only redoes a public loop,
``present_fields``, lives with the REST serializers it serves, so that DRF is imported only
where REST is):

- it is used only when it is detected (the internal name exists and has the expected
  shape) and ``PGQ["FAST_PATHS"]`` is true; otherwise the public path runs, with the same
  result. CI runs the whole suite once with ``FAST_PATHS`` off, so both paths are tested;
- a dependency upgrade that renames an internal makes the shortcut fall back, never break.

docs/design.md ("Fast paths") lists each shortcut with the gain it was kept for. Code
elsewhere in the package calls the functions below and never names an internal itself
(``tests/unit/test_seams.py`` checks the source).
"""

from __future__ import annotations

import re
import select
import threading
from asyncio import _get_running_loop
from collections import namedtuple
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from asgiref.sync import iscoroutinefunction
from django.db import connections
from django.db.models import Model
from django.db.models.signals import post_init, pre_init
from psycopg import pq

from .conf import settings

try:  # the state Django gives each loaded instance; public path: Model.from_db
    from django.db.models.base import ModelState as _ModelState
except ImportError:  # pragma: no cover - a Django without it takes the public path
    _ModelState = None  # type: ignore[assignment,misc]


#: The shortcuts by name. ``PGQ["FAST_PATHS"]`` is True (all), False (none) or a collection
#: of these names (the benchmark turns them off one at a time to measure each).
SHORTCUTS = (
    "thread_connection",
    "unwrapped_cursor",
    "bare_instances",
    "transaction_state",
    "asgi_one_hop",
    "present_fields",
    "libpq_statement",
)


def on(shortcut: str) -> bool:
    """Whether ``shortcut`` may be taken (``PGQ["FAST_PATHS"]``)."""
    chosen = settings.FAST_PATHS
    return chosen is True or (chosen is not False and shortcut in chosen)


# -- the thread's connection -------------------------------------------------------------------

_THREAD_LOCAL = threading.local


def connection(alias: str | None = None) -> Any:
    """``django.db.connections[alias]``, found cheaply when possible.

    Django keeps a thread's connections in asgiref's thread-critical ``Local``, which asks
    for the running event loop on every lookup and, in a thread without one (where the API
    runs), catches the error that raises: an exception per lookup, several per API call. In
    such a thread that ``Local`` keeps the connections in a plain ``threading.local``, read
    directly here. Anything else (a running event loop, a connection not made yet, another
    asgiref, shortcuts off) goes through ``connections[alias]``.
    """
    alias = alias or settings.DATABASE
    chosen = settings.FAST_PATHS  # on("thread_connection"), inline: this runs per statement
    if (
        chosen is True or (chosen is not False and "thread_connection" in chosen)
    ) and _get_running_loop() is None:
        storage = getattr(getattr(connections, "_connections", None), "_storage", None)
        if type(storage) is _THREAD_LOCAL:
            found = getattr(storage, alias, None)
            if found is not None:
                return found
    return connections[alias]


# -- statements without Django's cursor wrapper ------------------------------------------------


def may_skip_cursor_wrapper(db: Any) -> bool:
    """Whether a statement on ``db`` may run on the driver's cursor directly.

    Only when nothing would see the difference: no ``execute_wrapper`` hook and no query
    logging (``DEBUG``, ``CaptureQueriesContext``). The caller then does what the wrapper
    would: :func:`refuse_in_broken_transaction` first, and driver errors turned into
    Django's through ``db.wrap_database_errors``. The wrapper's own calls are most of the
    client's work on a single send (docs/design.md, "Fast paths").
    """
    chosen = settings.FAST_PATHS  # on("unwrapped_cursor"), inline: this runs per statement
    return (
        (chosen is True or (chosen is not False and "unwrapped_cursor" in chosen))
        and not db.execute_wrappers
        and not db.queries_logged
    )


def refuse_in_broken_transaction(db: Any) -> None:
    """Raise Django's TransactionManagementError inside an atomic block marked for
    rollback, as Django's cursor wrapper does before every statement."""
    if db.needs_rollback:
        db.validate_no_broken_transaction()


# -- a statement of its own transaction, through libpq -----------------------------------------

#: What :func:`run_through_libpq` answers when it did not run the statement: the caller runs
#: it the usual way (a failed try changed nothing: see there).
NOT_RUN: Any = object()

_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%%|%")
_IDLE = pq.TransactionStatus.IDLE
_ACTIVE = pq.TransactionStatus.ACTIVE
_READABLE = select.POLLIN
_WRITABLE = select.POLLOUT
_PIPELINE_OFF = pq.PipelineStatus.OFF
_TUPLES_OK = pq.ExecStatus.TUPLES_OK
_COMMAND_OK = pq.ExecStatus.COMMAND_OK
_BINARY = pq.Format.BINARY
# SQLSTATE invalid_sql_statement_name: the session lost the prepared statement (DISCARD ALL).
_NO_SUCH_STATEMENT = b"26000"
# SQLSTATE duplicate_prepared_statement: an interrupted prepare had completed after all.
_ALREADY_PREPARED = b"42P05"
_SQLSTATE = pq.DiagnosticField.SQLSTATE


class _LibpqStatement(NamedTuple):
    name: bytes  # the prepared statement's name in each session
    text: bytes  # the statement with libpq's $n placeholders
    order: tuple[str, ...]  # the parameter of each $n


# Statement text -> its libpq form, or None when it has a placeholder of another kind.
_LIBPQ_STATEMENTS: dict[str, _LibpqStatement | None] = {}
# A libpq statement's name -> the named-tuple type of its rows, made once per process (a
# session that ends with its request would otherwise make one per request).
_LIBPQ_ROW_TYPES: dict[bytes, Any] = {}


def _libpq_statement(statement: str) -> _LibpqStatement | None:
    found = _LIBPQ_STATEMENTS.get(statement, NOT_RUN)
    if found is not NOT_RUN:
        return found  # type: ignore[no-any-return]
    order: list[str] = []
    unsupported = False

    def number(match: re.Match[str]) -> str:
        nonlocal unsupported
        if match.group(0) == "%%":
            return "%"
        if match.group(1) is None:  # %s, %b, %(name)b: left to psycopg
            unsupported = True
            return ""
        if match.group(1) not in order:
            order.append(match.group(1))
        return f"${order.index(match.group(1)) + 1}"

    text = _PLACEHOLDER.sub(number, statement)
    made = None
    if not unsupported:
        name = f"_pgq_libpq_{len(_LIBPQ_STATEMENTS)}".encode()
        made = _LibpqStatement(name, text.encode(), tuple(order))
    _LIBPQ_STATEMENTS[statement] = made
    return made


def _text_value(value: Any) -> Any:
    """``value`` as a text-format parameter, or NOT_RUN for a type left to psycopg."""
    kind = type(value)
    if kind is str:
        return value.encode()
    if kind is bool:
        return b"t" if value else b"f"
    if kind is int:
        return str(value).encode()
    if value is None:
        return None
    return NOT_RUN


def run_through_libpq(raw: Any, statement: str, params: dict[str, Any]) -> Any:
    """Run ``statement`` in a transaction of its own through psycopg's libpq wrapper
    (``psycopg.pq``, public); its first row as a named tuple, None when it returned none, or
    :data:`NOT_RUN`.

    psycopg's cursor does per call, in Python, what a fixed statement needs once: look its
    adaptation up, convert the query, consult its prepared-statement cache. For the usual
    send that was most of the client's work (docs/design.md, "Fast paths"). Here the
    statement is prepared once per session under a name of its own, and each call binds its
    parameters as text, executes, and decodes the row with the connection's own binary
    loaders. It waits for the server as psycopg does (see :func:`_execute`).

    Taken only where psycopg would add nothing: the connection in autocommit, idle, not in
    pipeline mode, and every parameter a str, int, bool or None (the server infers their
    types from the statement, which must say them). Anything else, or any error, answers
    :data:`NOT_RUN` and the caller runs the statement through psycopg: a statement that
    failed on its own transaction was rolled back, so running it again changes nothing
    twice, and psycopg then raises the error (or finds the connection lost) as it always
    does. A session that lost the prepared statement (``DISCARD ALL``) prepares it again.
    """
    if not on("libpq_statement") or not raw.autocommit:
        return NOT_RUN
    pgconn = raw.pgconn
    if pgconn.transaction_status != _IDLE or pgconn.pipeline_status != _PIPELINE_OFF:
        return NOT_RUN
    shape = _libpq_statement(statement)
    if shape is None:
        return NOT_RUN
    values = []
    for key in shape.order:
        value = _text_value(params[key])
        if value is NOT_RUN:
            return NOT_RUN
        values.append(value)
    sessions = getattr(raw, "_pgq_libpq", None)
    if sessions is None:
        sessions = raw._pgq_libpq = {}
    decode = sessions.get(shape.name)
    if decode is False:
        return NOT_RUN  # this session could not prepare it
    if decode is None:
        decode = _prepare(raw, pgconn, sessions, shape)
        if decode is False:
            return NOT_RUN
    result = _execute(raw, pgconn, shape.name, values)
    if result.status != _TUPLES_OK and result.error_field(_SQLSTATE) == _NO_SUCH_STATEMENT:
        # The session lost it (DISCARD ALL) and ran nothing: prepare it again, once.
        decode = _prepare(raw, pgconn, sessions, shape)
        if decode is False:
            return NOT_RUN
        result = _execute(raw, pgconn, shape.name, values)
    if result.status != _TUPLES_OK:
        return NOT_RUN
    if decode is True:
        decode = sessions[shape.name] = _row_decoder(raw, shape.name, result)
    if not result.ntuples:
        return None
    return decode(result)


def _execute(raw: Any, pgconn: Any, name: bytes, values: list[Any]) -> Any:
    """Execute a prepared statement and return its result (see :func:`_interruptible`)."""
    pgconn.send_query_prepared(name, values, result_format=_BINARY)
    return _interruptible(raw, pgconn)


def _interruptible(raw: Any, pgconn: Any) -> Any:
    """The answer to what was just sent, waited for as psycopg waits: in ``poll``, which
    lets other threads run and a signal interrupt it. Interrupted (Ctrl-C), it asks the
    server to cancel the statement and takes its answer before re-raising, so the session
    is left idle, as psycopg leaves it."""
    try:
        return _answer(pgconn)
    except BaseException:
        if pgconn.transaction_status == _ACTIVE:
            try:
                raw.cancel_safe(timeout=5.0)
                _answer(pgconn)
            except Exception:  # the interruption is what the caller must see
                pass
        raise


def _answer(pgconn: Any) -> Any:
    """The statement's one result (rows or error), once the server has said all of it."""
    poller = select.poll()
    socket = pgconn.socket
    poller.register(socket, _READABLE)
    if pgconn.flush():  # what the socket did not take yet (a large statement)
        poller.modify(socket, _READABLE | _WRITABLE)
        while pgconn.flush():
            poller.poll()
            pgconn.consume_input()
        poller.modify(socket, _READABLE)
    first = None
    while True:
        while pgconn.is_busy():
            poller.poll()
            pgconn.consume_input()
        result = pgconn.get_result()
        if result is None:
            return first
        if first is None:
            first = result


def _prepare(raw: Any, pgconn: Any, sessions: dict[bytes, Any], shape: _LibpqStatement) -> bool:
    """Prepare ``shape`` in this session: True, or False (for good) when the server refused.

    Sent and waited for as a statement is (:func:`_interruptible`), not with libpq's
    blocking ``PQprepare``: parsing takes the table's lock, so a first send in a new session
    can wait on another transaction's ``LOCK TABLE``, and Ctrl-C must reach it there too.
    An interrupted prepare is not recorded; if it completed after all, the next attempt
    finds the statement there (``duplicate_prepared_statement``) and uses it."""
    pgconn.send_prepare(shape.name, shape.text)
    result = _interruptible(raw, pgconn)
    prepared = result is not None and (
        result.status == _COMMAND_OK or result.error_field(_SQLSTATE) == _ALREADY_PREPARED
    )
    sessions[shape.name] = prepared
    return prepared


def _row_decoder(raw: Any, name: bytes, result: Any) -> Callable[[Any], Any]:
    """Turns a result's first row into a named tuple, with the loaders psycopg would use."""
    count = result.nfields
    row_type: Any = _LIBPQ_ROW_TYPES.get(name)
    if row_type is None:
        names = [result.fname(i).decode() for i in range(count)]
        row_type = _LIBPQ_ROW_TYPES[name] = namedtuple("Row", names, rename=True)
    adapters = raw.adapters
    loads = []
    for i in range(count):
        oid = result.ftype(i)
        # A type without a binary loader comes back as bytes, as psycopg returns it.
        loader = adapters.get_loader(oid, _BINARY) or adapters.get_loader(0, _BINARY)
        loads.append(loader(oid, raw).load if loader is not None else bytes)
    columns = tuple(enumerate(loads))

    def decode(result: Any) -> Any:
        row = []
        for i, load in columns:
            value = result.get_value(0, i)
            row.append(None if value is None else load(value))
        return row_type._make(row)

    return decode


# -- model instances from rows -----------------------------------------------------------------


def instance_loader(model: type[Model], alias: str, names: tuple[str, ...]) -> Any:
    """A function that turns a row of ``names`` values into a saved ``model`` instance.

    Public path: ``model.from_db``. Shortcut: the instance ``from_db`` would make, built
    without ``Model.__init__`` and its per-field work (fields set in ``__dict__``, a
    loaded-from-``alias`` state); the one difference is that no pre_init/post_init signal
    is sent, so it is taken only for models that have no receiver of either.
    """
    from_db = model.from_db
    if not on("bare_instances") or _ModelState is None or _has_init_receivers(model):
        return lambda values: from_db(alias, names, list(values))
    new = model.__new__
    state_type = _ModelState

    def load(values: Any) -> Any:
        obj = new(model)
        fields = obj.__dict__
        fields.update(zip(names, values, strict=True))
        state = fields["_state"] = state_type()
        state.adding = False
        state.db = alias
        return obj

    return load


def _has_init_receivers(model: type[Model]) -> bool:
    return pre_init.has_listeners(model) or post_init.has_listeners(model)


# -- the state of a transaction ----------------------------------------------------------------


def transaction_is_empty(db: Any) -> bool | None:
    """Whether the atomic block on ``db`` has begun nothing of its own: no savepoint, no
    on-commit callback, and it will commit on exit. None when that cannot be told (shortcuts
    off): the caller must then assume something was begun."""
    if not on("transaction_state"):
        return None
    return bool(db.commit_on_exit) and not db.savepoint_ids and not db.run_on_commit


def on_commit_mark(db: Any) -> int | None:
    """A mark of the on-commit callbacks registered on ``db`` so far, for
    :func:`drop_on_commit_since`; None when shortcuts are off (the caller must then run the
    code whose callbacks may be dropped inside a savepoint of its own)."""
    if not on("transaction_state"):
        return None
    return len(db.run_on_commit)


def drop_on_commit_since(db: Any, mark: int) -> None:
    """Forget the on-commit callbacks registered after ``mark`` (a failed handler's)."""
    del db.run_on_commit[mark:]


# -- Django's request steps for a synchronous view under ASGI ----------------------------------


class RequestSteps(NamedTuple):
    """The two steps of Django's ASGI handler that :mod:`pgq_django.asgi` borrows to serve
    a synchronous view in one hop to its thread."""

    #: ``(scope, body_file) -> (request, None) | (None, error_response)``
    build_request: Callable[[Any, Any], tuple[Any, Any]]
    #: ``async (response, send)``: the response as ASGI messages
    send_answer: Callable[[Any, Any], Awaitable[None]]


def asgi_request_steps(handler: Any) -> RequestSteps | None:
    """``handler``'s (a Django ``ASGIHandler``) own request building and response sending,
    or None: then the caller passes the request whole to ``handler`` (the public path).

    Django's ASGI path crosses from the event loop to a thread and back for every
    synchronous middleware hook and again for the view; :mod:`pgq_django.asgi` instead runs
    the whole synchronous cycle in one hop, as a WSGI server would, and needs only these two
    steps of the handler to turn the ASGI scope into a request and the response into ASGI
    messages exactly as Django does. Detected by their presence and shape.
    """
    if not on("asgi_one_hop"):
        return None
    create = getattr(handler, "create_request", None)
    send = getattr(handler, "send_response", None)
    if not callable(create) or not iscoroutinefunction(send):
        return None
    return RequestSteps(create, send)
