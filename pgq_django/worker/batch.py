"""Batch commit: a leased batch's handlers and acknowledgements in one transaction.

The default mode (:mod:`.executor`) commits once per message: the handler's writes and its
fenced ack. For short handlers that commit (a WAL flush) is most of the cost, so a handler
registered with ``batch_commit=True`` (or every atomic handler under ``pgq_worker
--batch-size N``) runs its whole leased batch in one transaction instead:

- each handler runs in a savepoint of its own (opened before its first statement, see
  :class:`_LazySavepoint`), so one that raises rolls back its own writes and no one else's;
  its failure path (retry after the queue's delay, dead letter, or the
  archive for a rejected message) is recorded in the same transaction;
- the successes are acknowledged together by one fenced delete (one per distinct return
  value; handlers returning ``None`` share one), and commit together with their writes, so
  exactly-once effects on the database hold per committed batch;
- if the worker dies before the commit, everything rolls back: every message is still
  leased, comes back when its lease expires, and that delivery counts as an attempt (a
  message that kills its worker every time is still dead-lettered);
- if a lease was lost meanwhile (the fenced delete misses a message that another consumer
  leased again), the whole batch rolls back and each message still held runs again on its
  own, in the default mode, so no handler's writes commit without its ack;
- a stop requested mid-batch runs no further handler: the finished ones commit, and the
  ones not started are released at once, uncounted;
- a batch whose handlers write commits after every :data:`MAX_SAVEPOINTS` savepoints and
  goes on in a new transaction, so it never overflows PostgreSQL's subtransaction cache.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from django.db import close_old_connections, connections, transaction
from django.db.transaction import TransactionManagementError

from .. import seams, telemetry
from ..api import delivery, messages
from ..conf import settings
from ..exceptions import InvalidArgument, RejectMessage
from ..store import availability
from .executor import (
    MAX_ERROR_LENGTH,
    Outcome,
    call_handler,
    describe_error,
    execute,
    log_failure,
    takes_part,
    unstorable_result_note,
)
from .leases import LeaseExtender
from .registry import Handler

logger = logging.getLogger("pgq_django.worker")

# Results that compare equal share one acknowledgement; None (most handlers) is its own key.
_NO_RESULT = object()

#: Savepoints one batch transaction may open before it commits and the rest of the batch
#: continues in a new one. Each savepoint that writes takes a subtransaction id, and
#: PostgreSQL keeps only 64 of them per transaction in shared memory: past that, every
#: session's snapshots must look writers up in pg_subtrans until the transaction ends, a
#: known cliff for the whole server. 56 leaves room for one handler's own nested blocks.
MAX_SAVEPOINTS = 56


class _LeasesLost(Exception):
    """The batch's ack missed messages whose lease another consumer took over."""

    def __init__(self, lost: list[Any]) -> None:
        super().__init__(f"{len(lost)} lease(s) taken over during the batch")
        self.lost = lost


class _Batch:
    """What the handlers of one batch produced, before any of it is written."""

    def __init__(self) -> None:
        self.results: dict[Any, tuple[Any, list[Any]]] = {}
        self.failed: list[tuple[Any, BaseException]] = []
        self.rejected: list[tuple[Any, RejectMessage]] = []
        self.cancelled: list[Any] = []
        self.unstarted: list[Any] = []
        self.deferred: list[Any] = []
        self.interrupt: BaseException | None = None

    def succeeded(self, queue: str, message: Any, value: Any) -> None:
        key, value = _result_key(queue, message, value)
        self.results.setdefault(key, (value, []))[1].append(message)

    def outcomes(self) -> list[Outcome]:
        acked = sum(len(group) for _value, group in self.results.values())
        return (
            [Outcome.ACKED] * acked
            + [Outcome.CANCELLED] * len(self.cancelled)
            + [Outcome.FAILED] * (len(self.failed) + len(self.rejected))
        )


def _result_key(queue: str, message: Any, value: Any) -> tuple[Any, Any]:
    """(grouping key, value to store): the stored JSON text groups equal results; a value
    PostgreSQL cannot hold is replaced by the note the default mode stores (see
    :func:`pgq_django.worker.executor._complete`)."""
    if value is None:
        return _NO_RESULT, None
    try:
        return delivery.encode_result(value), value
    except InvalidArgument as exc:
        note = unstorable_result_note(queue, message, value, exc)
        return delivery.encode_result(note), note


# Each handler of a batch in its own ``process`` span (the batch's ack is one settle span).
_process = telemetry.traced_process(call_handler)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def run_batch(
    entry: Handler,
    batch: list[Any],
    *,
    leases: LeaseExtender,
    stopping: Callable[[], bool],
) -> list[Outcome]:
    """Run a leased batch in one transaction; returns one outcome per message run.

    A batch whose handlers have opened :data:`MAX_SAVEPOINTS` savepoints commits there and
    runs the rest in a new transaction. Messages left unstarted because ``stopping()``
    turned true are released before this returns. A ``SystemExit``/``KeyboardInterrupt``
    raised by a handler in the main thread ends the batch there (the finished ones commit)
    and is raised again, as in the default mode; in a worker thread it is that handler's
    failure like any other.
    """
    outcomes: list[Outcome] = []
    # A request or an awaited message runs on its own (its ack sends a reply or releases
    # dependants in its transaction), after the batch.
    own = [m for m in batch if takes_part(m)]
    rest = [m for m in batch if not takes_part(m)] if own else batch
    while rest:
        done, rest = _commit_some(entry, rest, leases, stopping)
        outcomes += done
    for i, message in enumerate(own):
        if stopping():
            _release(entry.queue, own[i:])
            break
        leases.started(message)
        outcomes.append(execute(entry, message))
    return outcomes


def _commit_some(
    entry: Handler, batch: list[Any], leases: LeaseExtender, stopping: Callable[[], bool]
) -> tuple[list[Outcome], list[Any]]:
    """One transaction over the head of ``batch``: its outcomes, and what is left to run."""
    started = time.monotonic()
    try:
        done = _run_in_transaction(entry, batch, leases, stopping)
    except _LeasesLost as exc:
        return _run_one_by_one(entry, batch, exc.lost, leases, stopping), []
    except Exception as exc:
        if availability.is_unreachable(exc):
            # The database went away under the batch: not its handlers' failure. Nothing
            # committed; every message comes back when its lease runs out.
            logger.warning(
                "event=ack_failed queue=%s size=%s error=%r; the batch did not commit, its "
                "messages come back when their leases run out",
                entry.queue,
                len(batch),
                availability.summary(exc),
            )
            close_old_connections()
            return [Outcome.ACK_FAILED] * len(batch), []
        # The transaction rolled back: every message is still leased and comes back when
        # its lease expires (counted, so a batch that always breaks ends in dead letters).
        logger.exception("event=batch_failed queue=%s size=%s", entry.queue, len(batch))
        close_old_connections()
        return [Outcome.FAILED] * len(batch), []
    _release(entry.queue, done.unstarted)
    outcomes = done.outcomes()
    logger.debug(
        "event=batch_committed queue=%s acked=%s failed=%s released=%s deferred=%s "
        "duration_ms=%.2f",
        entry.queue,
        outcomes.count(Outcome.ACKED),
        outcomes.count(Outcome.FAILED),
        len(done.unstarted),
        len(done.deferred),
        (time.monotonic() - started) * 1000,
    )
    if done.interrupt is not None:
        raise done.interrupt
    return outcomes, done.deferred


def _run_in_transaction(
    entry: Handler, batch: list[Any], leases: LeaseExtender, stopping: Callable[[], bool]
) -> _Batch:
    queue = entry.queue
    done = _Batch()
    savepoint = _LazySavepoint(settings.DATABASE)
    with transaction.atomic(using=settings.DATABASE), savepoint.installed():
        for i, message in enumerate(batch):
            if stopping() or done.interrupt is not None:
                done.unstarted = batch[i:]
                break
            if savepoint.opened >= MAX_SAVEPOINTS:
                done.deferred = batch[i:]  # for the next transaction (see MAX_SAVEPOINTS)
                break
            if message.cancel_requested:
                done.cancelled.append(message)
                continue
            leases.started(message)
            try:
                value = savepoint.call(_process, entry, message)
            except RejectMessage as exc:
                done.rejected.append((message, exc))
            except BaseException as exc:
                done.failed.append((message, exc))
                if not isinstance(exc, Exception) and _in_main_thread():
                    done.interrupt = exc
            else:
                done.succeeded(queue, message, value)
            finally:
                leases.finished(message)
        _acknowledge(queue, done)
        _record_failures(queue, done)
    return done


class _LazySavepoint:
    """Each handler's own savepoint, opened just before the handler's first statement.

    A savepoint costs two round trips (``SAVEPOINT``, ``RELEASE``): for short handlers, most
    of a batch's time. A handler that never touches the database has nothing to roll back,
    so none is taken for it. Every statement run through Django's connection (the ORM,
    ``connection.cursor()``, the pgq API) passes the execute wrapper installed for the
    batch, which opens a ``transaction.atomic()`` block around the rest of the handler the
    first time. When the handler raises, or leaves its transaction marked for rollback,
    that block rolls back, and the ``on_commit`` callbacks it registered are dropped,
    including any registered before its first statement. (Dropping those needs a count of
    the connection's callbacks, a shortcut of :mod:`pgq_django.seams`; with shortcuts off
    the savepoint is opened before every handler instead.)
    """

    def __init__(self, using: str) -> None:
        self.using = using
        self.connection = connections[using]
        self._scope: ExitStack | None = None
        self._running = False
        self._opening = False
        #: SAVEPOINT statements run in this transaction: ours and the handlers' own.
        self.opened = 0

    @contextmanager
    def installed(self) -> Iterator[None]:
        with self.connection.execute_wrapper(self._before_statement):
            yield

    def _before_statement(
        self, execute: Callable[..., Any], sql: Any, params: Any, many: bool, context: Any
    ) -> Any:
        if isinstance(sql, str) and sql.startswith("SAVEPOINT"):
            self.opened += 1
        if self._running:
            self._open()
        return execute(sql, params, many, context)

    def _open(self) -> None:
        """Open the handler's savepoint unless it is open (or being opened: the SAVEPOINT
        statement itself passes through the execute wrapper)."""
        if self._scope is not None or self._opening:
            return
        self._opening = True
        try:
            scope = ExitStack()
            scope.enter_context(transaction.atomic(using=self.using))
            self._scope = scope
        finally:
            self._opening = False

    def call(self, func: Callable[..., Any], *args: Any) -> Any:
        """``func(*args)`` with its writes in a savepoint of their own; raises what it raised."""
        mark = seams.on_commit_mark(self.connection)
        if mark is None:
            # On-commit callbacks cannot be counted (shortcuts off): the savepoint is opened
            # now, so the handler's callbacks go with it whether or not it runs a statement.
            self._open()
        self._running = True
        try:
            value = func(*args)
            if transaction.get_rollback(using=self.using):
                raise TransactionManagementError(
                    "the handler marked its transaction for rollback (set_rollback(True))"
                )
            self._running = False
            scope, self._scope = self._scope, None
            if scope is not None:
                scope.close()  # RELEASE; if that fails, atomic rolls back and raises
        except BaseException as exc:
            self._running = False
            scope, self._scope = self._scope, None
            if scope is not None:
                scope.__exit__(type(exc), exc, exc.__traceback__)
            if mark is not None:
                seams.drop_on_commit_since(self.connection, mark)
            transaction.set_rollback(False, using=self.using)
            raise
        return value


def _acknowledge(queue: str, done: _Batch) -> None:
    """One fenced delete per distinct result; a message it misses lost its lease."""
    lost: list[Any] = []
    for value, group in done.results.values():
        acked = delivery.complete(queue, [m.receipt for m in group], result=value)
        assert isinstance(acked, list)
        found = set(acked)
        lost += [m for m in group if m.msg_id not in found]
    if lost:
        raise _LeasesLost(lost)


def _record_failures(queue: str, done: _Batch) -> None:
    """Cancellations, rejections and nacks, inside the batch's transaction.

    Unlike the default mode these are not retried on their own when they fail: a failing
    statement aborts the transaction, and the whole batch rolls back (see :func:`run_batch`).
    A receipt that no longer matches (the lease was taken over) changes nothing.
    """
    for message in done.cancelled:
        delivery.archive_cancelled(queue, message.receipt)
        logger.info("event=message_cancelled queue=%s msg_id=%s", queue, message.msg_id)
    for message, rejection in done.rejected:
        reason = rejection.message.replace("\x00", "\\x00")[:MAX_ERROR_LENGTH]
        logger.warning(
            "event=message_rejected queue=%s msg_id=%s read_ct=%s error=%r",
            queue,
            message.msg_id,
            message.read_ct,
            reason,
        )
        error = f"{type(rejection).__module__}.{type(rejection).__qualname__}: {reason}"
        delivery.reject(queue, message.receipt, error=error)
    for message, exc in done.failed:
        log_failure(queue, message, exc)
        messages.nack(queue, message.receipt, error=describe_error(exc))


def _run_one_by_one(
    entry: Handler,
    batch: list[Any],
    lost: list[Any],
    leases: LeaseExtender,
    stopping: Callable[[], bool],
) -> list[Outcome]:
    """After a lost lease rolled the batch back: run each message still held on its own."""
    gone = {m.msg_id for m in lost}
    logger.warning(
        "event=batch_lease_lost queue=%s lost=%s rerun=%s",
        entry.queue,
        ",".join(str(m.msg_id) for m in lost),
        len(batch) - len(gone),
    )
    outcomes = [Outcome.LEASE_LOST] * len(gone)
    held = [m for m in batch if m.msg_id not in gone]
    for i, message in enumerate(held):
        if stopping():
            _release(entry.queue, held[i:])
            break
        leases.started(message)
        outcomes.append(execute(entry, message))
    return outcomes


def _release(queue: str, unstarted: list[Any]) -> None:
    if not unstarted:
        return
    try:
        released = delivery.release_leases(queue, [m.receipt for m in unstarted])
        logger.info("event=leases_released queue=%s count=%s", queue, len(released))
    except Exception:
        # Their leases expire and they come back; the worker carries on.
        logger.exception("event=release_failed queue=%s", queue)
