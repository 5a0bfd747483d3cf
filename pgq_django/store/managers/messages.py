"""``Message.objects``: the live-queue operations, one statement each.

Each public method runs one named statement of :mod:`pgq_django.store.sql.messages` (or, for the
delivery and counter methods it inherits, :mod:`pgq_django.store.sql.delivery` and
:mod:`pgq_django.store.sql.counters`) in one round trip and hands the functional API what it
found. Callers validate arguments before they get here; values always travel as parameters.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Callable, Sequence
from typing import Any

from ...conf import settings
from .. import db, tallies, wakeups
from ..sql import messages as sql
from ..sql.fragments import MESSAGE_COLUMNS, SEND_OPTION_DEFAULTS
from ..sql.params import (
    delete_one_params,
    delete_params,
    read_filters,
    read_params,
    receipt_params,
    send_one_params,
    send_params,
)
from .base import MessageRef, SqlManager
from .counters import CounterMethods
from .delivery import DeliveryMethods
from .operations import statement_text
from .queryset import MessageQuerySet

# Queue name -> its shape as last seen by this process: FIFO (see _leasing), archives on
# ack (see ack). A stale entry costs one extra query, never a wrong result.
_FIFO_QUEUES: dict[str, bool] = {}
_ARCHIVES_ON_ACK: dict[str, bool] = {}
# Queue name -> whether it had max_length when last sent to without options (see
# _send_plain).
_BOUNDED_QUEUES: dict[str, bool] = {}
# Queue name -> whether it had a rate or concurrency limit when last read (see _leasing).
_LIMITED_QUEUES: dict[str, bool] = {}

_MessageManagerBase = SqlManager.from_queryset(MessageQuerySet)
_DELIVERY_ORDER = operator.itemgetter(
    MESSAGE_COLUMNS.index("priority"), MESSAGE_COLUMNS.index("msg_id")
)


class MessageManager(DeliveryMethods, CounterMethods, _MessageManagerBase):
    """``Message.objects``: the lease/ack operations as single statements."""

    def send_bodies(self, queue: str, bodies: Sequence[str], *, size: int, **options: Any) -> Any:
        """Insert JSON-encoded bodies; returns (queue_id or None, [msg_id, …], full).

        ``options`` are the send options as statement parameters (see
        :func:`pgq_django.validation.send_options`); any left out take their defaults.
        """
        alias = self._db_alias()
        # Autocommit: the statement commits as it returns, so its count can join this
        # process's sums (pgq_django.store.tallies) instead of costing a row in the statement, and
        # its wake-up can be throttled (pgq_django.store.wakeups).
        deferred = tallies.deferred(alias)
        since = time.monotonic()
        notify = wakeups.leading(alias, queue, autocommit=deferred)
        channel = settings.NOTIFY_CHANNEL
        if len(bodies) == 1 and (not options or options == SEND_OPTION_DEFAULTS):
            # The usual send: one body, no options (their defaults are in the text).
            params = send_one_params(queue, bodies[0], size=size, channel=channel, notify=notify)
            queue_id, msg_ids, notified, full = self._send_plain(params, alias, deferred)
        else:
            params = send_params(
                queue, bodies, size=size, channel=channel, notify=notify, options=options
            )
            if deferred:  # counted by this process's sums (above)
                row = db.run_one(sql.SEND_UNCOUNTED, params, alias)
            else:
                [row] = self._ops().send([params])
            queue_id, msg_ids, full = row.found_queue_id, row.msg_ids, row.queue_full
            notified = bool(row.notified)
        if msg_ids and deferred:  # committed (autocommit)
            tallies.add(alias, queue_id, "sent", len(msg_ids))
            if not notify:
                wakeups.owe(alias, queue)  # wake after the interval, unless a later send does
            elif notified:
                wakeups.covered(alias, queue, since)  # this send woke for the earlier ones
        return queue_id, msg_ids, full

    @staticmethod
    def _send_plain(
        params: dict[str, Any], alias: str, deferred: bool
    ) -> tuple[Any, list[int], bool, bool]:
        """(queue_id or None, [msg_id] or [], notified, full) of the usual send.

        SEND_ONE (one INSERT, no room check; SEND_ONE_COUNTED inside the caller's
        transaction, with its counter row) unless the queue was last seen with max_length;
        SEND_PLAIN (SEND_PLAIN_COUNTED) when it was, or when the first did not send, to
        check for room and say why. A stale entry costs a round trip, never a send past
        max_length: SEND_ONE only sends into a queue whose max_length is NULL as it runs.
        """
        queue = params["queue"]
        if not _BOUNDED_QUEUES.get(queue):
            lean = sql.SEND_ONE if deferred else sql.SEND_ONE_COUNTED
            sent = db.run_one_alone(lean, params, alias)
            if sent is not None:
                return sent.queue_id, [sent.msg_id], sent.notified, False
        row = db.run_one(sql.SEND_PLAIN if deferred else sql.SEND_PLAIN_COUNTED, params, alias)
        if row.found_queue_id is not None:
            _BOUNDED_QUEUES[queue] = row.bounded
        return row.found_queue_id, row.msg_ids, bool(row.notified), row.queue_full

    def lease(
        self, queue: str, *, qty: int, vt: float | None, filters: dict[str, Any] | None = None
    ) -> tuple[list[Any], Any]:
        """Lease up to ``qty`` messages (``SELECT … FOR UPDATE SKIP LOCKED`` + UPDATE).

        Returns (messages, queue state): the state (see :meth:`queue_state`) is looked up
        only when nothing was leased, so the caller can tell an empty queue from a missing
        or paused one without a query of its own. Each message knows its ``queue_name``.
        """
        clause, values = read_filters(filters)
        params = read_params(
            queue, qty=qty, vt=vt, max_bytes=settings.READ_MAX_BYTES, filter_values=values
        )
        ops = self._ops()

        def leasing(fifo: bool, limited: bool) -> list[Any]:
            return ops.lease(params, fifo=fifo, limited=limited, clause=clause)

        return self._leasing(leasing, queue, limitable=True)

    def pop(self, queue: str, *, qty: int) -> tuple[list[Any], Any]:
        """Like :meth:`lease`, but the messages leave the queue (archived with archive_on_ack)."""
        params = {"queue": queue, "qty": qty, "max_bytes": settings.READ_MAX_BYTES}

        def popping(fifo: bool, limited: bool) -> list[Any]:
            return self._all(statement_text(sql.POP, fifo, ""), params, named=False)

        return self._leasing(popping, queue)

    def _leasing(
        self,
        run: Callable[[bool, bool], list[Any]],
        queue: str,
        *,
        limitable: bool = False,
    ) -> tuple[list[Any], Any]:
        """Run a lease (``run(fifo, limited)``: plain rows) of the queue's shape, remembered
        per process by queue name.

        A guess that no longer holds (a queue dropped and re-created as the other shape)
        matches no queue, so an empty result checks the shape once and runs the other one.
        ``limitable`` (a read): a queue with a rate or concurrency limit is a shape too
        (see :meth:`Operations.lease <pgq_django.store.managers.operations.Operations.lease>`).
        """
        fifo = _FIFO_QUEUES.get(queue, False)
        limited = limitable and _LIMITED_QUEUES.get(queue, False)
        # Plain tuples: the rows become Message instances at once (see _instances).
        rows = run(fifo, limited)
        state = None
        if not rows:
            state = self.queue_state(queue)
            if state is not None and (
                state.fifo != fifo or (limitable and state.limited != limited)
            ):
                fifo = _FIFO_QUEUES[queue] = state.fifo
                if limitable:
                    limited = _LIMITED_QUEUES[queue] = state.limited
                rows = run(fifo, limited)
        # Delivery order (priority, then msg_id: columns 6 and 0), sorted as plain tuples.
        rows.sort(key=_DELIVERY_ORDER)
        return self._instances(rows, queue_name=queue), state

    def queue_state(self, queue: str) -> Any:
        """The queue's (id, paused, max_message_size, fifo, archive_on_ack, max_length,
        limited), or None when there is no such queue."""
        return self._ops().queue_state(queue)

    def read_by_id(self, queue: str, msg_id: int) -> tuple[int | None, Any]:
        row = self._one(sql.READ_BY_ID, {"queue": queue, "msg_id": msg_id})
        if row is None:
            return None, None
        found = self._instances([row], offset=1, queue_name=queue)
        return row.found_queue_id, found[0] if found else None

    def ack(self, queue: str, refs: Sequence[MessageRef], *, result: str | None = None) -> Any:
        """Delete (or archive as acked); returns (queue_id or None, [deleted ids])."""
        alias = self._db_alias()
        deferred = tallies.deferred(alias)  # see send_bodies
        shapes: dict[bool, str] | None
        if len(refs) == 1:
            params = delete_one_params(queue, refs[0], result=result)
            shapes = sql.DELETE_ONE_UNCOUNTED if deferred else sql.DELETE_ONE
        else:
            params = delete_params(queue, refs, result=result)
            shapes = sql.DELETE_UNCOUNTED if deferred else None  # None: Operations.ack
        archives = _ARCHIVES_ON_ACK.get(queue, False)
        if deferred and len(refs) == 1 and not archives:
            # The usual ack: one DELETE that answers only when it deleted; the shapes below
            # say why it did not (or archive, when the queue archives on ack by now).
            deleted = self._one(sql.ACK_ONE, params)
            if deleted is not None:
                tallies.add(alias, deleted.queue_id, "acked", 1)
                return deleted.queue_id, [deleted.msg_id]
        row = self._deleting(shapes, archives, params)
        if row.found_queue_id is None:
            state = self.queue_state(queue)
            if state is not None and state.archive_on_ack != archives:
                archives = _ARCHIVES_ON_ACK[queue] = state.archive_on_ack
                row = self._deleting(shapes, archives, params)
        if deferred and row.msg_ids:
            tallies.add(alias, row.found_queue_id, "acked", len(row.msg_ids))
        return row.found_queue_id, row.msg_ids

    def _deleting(
        self, shapes: dict[bool, str] | None, archives: bool, params: dict[str, Any]
    ) -> Any:
        """The row of an ack's statement: of ``shapes`` for the queue's kind, or (None) the
        counted ack of many, which the Spark pipeline runs too."""
        if shapes is None:
            return self._ops().ack(params, archives=archives)
        return self._one(shapes[archives], params)

    def archive(
        self,
        queue: str,
        refs: Sequence[MessageRef],
        *,
        outcome: str = "archived",
        result: str | None = None,
        error: str | None = None,
    ) -> Any:
        """Move messages to the archive; returns (queue_id or None, [archived ids])."""
        params = {
            "queue": queue,
            "outcome": outcome,
            "result": result,
            "error": error,
            **receipt_params(refs),
        }
        row = self._one(sql.ARCHIVE, params)
        return row.found_queue_id, row.msg_ids

    def set_vt(self, queue: str, ref: MessageRef, vt: float) -> tuple[int | None, Any]:
        params = {"queue": queue, "msg_id": ref[0], "ct": ref[1], "vt": vt}
        row = self._one(sql.SET_VT, params)
        found = self._instances([row], offset=1, queue_name=queue)
        return row.found_queue_id, found[0] if found else None

    def nack(
        self, queue: str, ref: MessageRef, *, delay: float | None, error: str | None = None
    ) -> tuple[int | None, str | None]:
        """Returns (queue_id or None, 'retry' | 'dead_lettered' | 'dead' | None)."""
        params = {
            "queue": queue,
            "msg_id": ref[0],
            "ct": ref[1],
            "delay": delay,
            "error": error,
            "channel": settings.NOTIFY_CHANNEL,
        }
        row = self._one(sql.NACK, params)
        return row.found_queue_id, row.outcome

    def purge(self, queue: str) -> tuple[int | None, int]:
        """Delete every message of the queue; returns (queue_id or None, how many)."""
        row = self._one(sql.PURGE, {"queue": queue})
        return row.found_queue_id, row.purged
