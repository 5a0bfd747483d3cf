"""Survive a lost database connection: drop it, reconnect, and retry once when that is safe.

Django keeps a broken connection until ``close_old_connections()`` runs, which happens at the
end of a web request but never in a script, a thread or a worker loop. After a PostgreSQL
restart (or ``pg_terminate_backend``) every later query on that connection would fail with
"the connection is lost". Each public function of the functional API is wrapped with
:func:`recovers`, which handles two different moments of a loss:

1. **Before anything is sent.** A server that ended our session left an error message and
   an end-of-file in the connection's socket. On entry the wrapper looks, without a round
   trip, whether an idle connection's socket is readable (one ``poll`` system call); if it is,
   libpq reads what is there, and a closed session is dropped so Django reconnects. Nothing
   was sent on the dead connection, so every operation, sends included, just works.
2. **While a statement runs.** The session can end after the statement left and before its
   answer arrived. Whether it committed is then unknown. Operations that are safe to run
   twice are retried once on a new connection: reads (a lease the first attempt may have
   taken is simply delivered again after its visibility timeout, as after a consumer
   crash), acknowledgements and other changes that land in the same state when repeated,
   and sends with a ``dedup_id`` (the second attempt finds the first one's claim and returns
   its msg_id). A send or publish without ``dedup_id`` and the creation of a queue or
   exchange are not retried: they raise :class:`~pgq_django.ConnectionLost`, which says the
   outcome is unknown; the connection is already replaced, so the caller's next call works.

Inside ``transaction.atomic()`` nothing is retried or replaced: the transaction died with its
connection and only the caller can decide what to redo, so the database error propagates
as it always has.

3. **When the server cannot be reached.** A failed attempt to *connect* sent nothing: it
   raises :class:`~pgq_django.DatabaseUnavailable` (safe to retry, whatever the operation)
   and opens an outage in the process's record (:mod:`pgq_django.store.availability`),
   which rations the attempts of every thread with back-off. Until the next round is due,
   a call that would have to connect fails at once with the same error, without a
   connection attempt or a log line; one line says the database was lost, one every
   half minute while it stays down, one when it is back.
"""

from __future__ import annotations

import functools
import logging
import select
import threading
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from django.db import InterfaceError, OperationalError, ProgrammingError, connections

from ..exceptions import ConnectionLost, DatabaseUnavailable, NotMigrated
from ..store import availability
from ..store.db import django_connection

logger = logging.getLogger("pgq_django")

P = ParamSpec("P")
R = TypeVar("R")

# Set while a wrapped call runs in this thread, so inner API calls do not retry again.
_active = threading.local()


# How long to wait for the end-of-file that follows a message an idle session did not ask for.
_EOF_GRACE_SECONDS = 0.2


_POLL = hasattr(select, "poll")  # not on Windows
_READABLE = select.POLLIN | select.POLLERR | select.POLLHUP if _POLL else 0


def _socket_readable(fd: int, timeout: float = 0.0) -> bool:
    """Whether data (or end-of-file) waits on the socket, waiting at most ``timeout``."""
    if _POLL:
        poller = select.poll()
        poller.register(fd, _READABLE)
        return bool(poller.poll(int(timeout * 1000)))
    readable, _w, _x = select.select([fd], [], [], timeout)  # Windows: no poll()
    return bool(readable)


def _is_dead(raw: Any) -> bool:
    """Whether an idle psycopg connection has already been closed by the server.

    An idle session sends nothing unprompted except notices and notifications, so a
    readable socket is rare; libpq then reads what arrived and notices a terminated
    session. The common case costs one non-blocking ``poll``.
    """
    if raw.closed:
        return True
    pgconn = raw.pgconn
    try:
        if pgconn.transaction_status != 0:
            return False  # a transaction of the caller's is open: not idle
        # libpq reads what is buffered per call: a terminated session's error message
        # first, its end-of-file on a later call. A few rounds see both. The server sends
        # the FATAL message a moment before its process exits and closes the socket, so once
        # something unasked-for has arrived, give the end-of-file a short while to follow
        # (an idle Django connection does not LISTEN, so this is a dying session, not a
        # notification; the common case still costs one non-blocking poll).
        for attempt in range(4):
            if attempt == 0 and _POLL:
                # One poll object per connection, registered once (its socket is the
                # connection's for life): the common case is this one system call.
                poller = getattr(raw, "_pgq_poller", None)
                if poller is None:
                    poller = raw._pgq_poller = select.poll()
                    poller.register(pgconn.socket, _READABLE)
                if not poller.poll(0):
                    return False
            elif not _socket_readable(pgconn.socket, _EOF_GRACE_SECONDS if attempt else 0.0):
                return False
            pgconn.consume_input()
            if raw.closed:
                return True
    except Exception:
        return True
    return bool(raw.closed)


def drop_dead_connection(alias: str | None = None) -> bool:
    """Close Django's connection if the server already ended it; True if it did.

    Never touches a connection inside an atomic block (the caller's transaction is lost and
    must fail visibly).
    """
    return _drop_if_dead(django_connection(alias))


def drop_dead_connections() -> None:
    """Close every connection of this thread that the server already ended.

    For work that reaches the database before any API call does: the REST API's and the SQS
    endpoint's authentication and grant look-ups, which would otherwise meet the dead
    connection first after a PostgreSQL restart and fail. Costs one ``poll`` per open
    connection.
    """
    for db in connections.all(initialized_only=True):
        _drop_if_dead(db)


def _drop_if_dead(db: Any) -> bool:
    raw = db.connection
    if raw is None or db.in_atomic_block or not _is_dead(raw):
        return False
    logger.info("event=connection_dropped reason=closed_by_server alias=%s", db.alias)
    db.close()
    return True


def _lost(db: Any) -> bool:
    raw = db.connection
    return raw is None or bool(raw.closed)


def recovers(
    retry: bool | Callable[..., bool] = True,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Wrap an API function with the recovery described in the module docstring.

    ``retry`` says whether running the function a second time after an unknown outcome is
    safe: True, False, or a predicate over the call's arguments (sends: "has a dedup_id").
    """

    def decorate(func: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(func)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            if getattr(_active, "on", False):
                return func(*args, **kwargs)
            _active.on = True
            try:
                return _call_recovering(func, retry, args, kwargs)
            finally:
                _active.on = False

        return wrapper

    return decorate


def _call_recovering(
    func: Callable[..., R],
    retry: bool | Callable[..., bool],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> R:
    db = django_connection()
    _drop_if_dead(db)
    if db.connection is None and not availability.of(db.alias).may_try():
        raise _unavailable(func.__name__, availability.of(db.alias))
    try:
        return func(*args, **kwargs)
    except ProgrammingError as exc:
        missing = not_migrated(exc, db.alias)
        if missing is None:
            raise
        raise missing from None
    except (OperationalError, InterfaceError) as exc:
        if db.in_atomic_block or not _lost(db):
            raise
        record = availability.of(db.alias)
        if db.connection is None:  # the connection could not be made: nothing was sent
            record.lost(exc)
            raise _unavailable(func.__name__, record) from exc
        db.close()
        safe = retry(*args, **kwargs) if callable(retry) else retry
        if not safe:
            raise _outcome_unknown(func.__name__) from exc
        logger.info("event=connection_lost_retry operation=%s error=%r", func.__name__, exc)
        return _retry_once(func, args, kwargs, db, record)


def _outcome_unknown(operation: str) -> ConnectionLost:
    return ConnectionLost(
        f"The connection to PostgreSQL was lost during {operation}(); whether it took "
        "effect is unknown. The next call uses a new connection; to send at most once "
        "across such a retry, give the message a dedup_id and send it again with the same "
        "one.",
        operation=operation,
    )


def _retry_once(
    func: Callable[..., R],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    db: Any,
    record: availability.Availability,
) -> R:
    """The one retry after a lost session, on a new connection: if that connection cannot
    be made the server is gone, which opens an outage rather than failing with its error;
    if it is lost in turn (a failover under way), the outcome is unknown again, and says so."""
    if not record.may_try():
        raise _unavailable(func.__name__, record, retrying=True)
    try:
        return func(*args, **kwargs)
    except (OperationalError, InterfaceError) as exc:
        if db.in_atomic_block:
            raise
        if db.connection is None:
            record.lost(exc)
            raise _unavailable(func.__name__, record, retrying=True) from exc
        if not _lost(db):
            raise
        db.close()
        raise _outcome_unknown(func.__name__) from exc


def _unavailable(
    operation: str, record: availability.Availability, *, retrying: bool = False
) -> DatabaseUnavailable:
    """The error of a call that could not connect; ``retrying``: its first attempt lost its
    connection mid-statement, so only a call that is safe to repeat (one with a dedup_id,
    for a send) is safe to make again, with the same arguments."""
    state = record.status()
    done = (
        "lost its connection, so whether its first attempt took effect is unknown; calling it "
        "again with the same arguments is safe"
        if retrying
        else "sent nothing and is safe to retry"
    )
    return DatabaseUnavailable(
        f"PostgreSQL cannot be reached (database {record.alias!r}, down for "
        f"{state.down_for:.0f}s): {operation}() {done}; the next connection attempt is in "
        f"{state.next_attempt_in:.1f}s.",
        operation=operation,
        database=record.alias,
    )


# PostgreSQL's "does not exist" errors that a database without pgq_django's migrations gives.
_UNDEFINED = frozenset({"42P01", "42703", "42883"})  # a table, a column, a function


def not_migrated(exc: BaseException, alias: str) -> NotMigrated | None:
    """The "run migrate" error for ``exc`` if it says one of pgq_django's objects is missing.

    PostgreSQL names the missing table (``relation "pgq_queue" does not exist``) but not the
    command that creates it; a new project that skipped ``migrate`` meets this first. Only
    "does not exist" errors that name a ``pgq_`` object qualify, so a mistake in a project's
    own SQL keeps its own error.
    """
    if isinstance(exc, NotMigrated):
        return None
    cause = exc.__cause__
    if getattr(cause, "sqlstate", None) not in _UNDEFINED:
        return None
    diag = getattr(cause, "diag", None)
    primary = getattr(diag, "message_primary", None) or str(cause).splitlines()[0]
    if "pgq_" not in primary:
        return None
    return NotMigrated(
        f"Database {alias!r} does not have pgq_django's tables ({primary}): run "
        "`python manage.py migrate`.",
        database=alias,
    )


def has_dedup_id(*args: Any, **kwargs: Any) -> bool:
    """Retry predicate for sends: a send under a dedup_id can safely run twice."""
    return kwargs.get("dedup_id") is not None
