"""The store's operations that need nothing but a connection: one method per statement.

The lease (with its limited-queue sequence), the acknowledgement, the sends and publishes
and a queue's state run on Django's connection for the managers (``Message.objects``,
``Exchange.objects``) and on the Spark executors' psycopg connections for the pipeline
(:mod:`.pipeline`): the same methods over the interface of
:mod:`pgq_django.store.connection`, so a sequence of statements is written once. Nothing here
reads Django's settings: what depends on them (the notify channel, the read's byte budget)
arrives in the parameters, built by :mod:`pgq_django.store.sql.params`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..connection import Connection
from ..sql.delivery import SEND_DEDUPLICATED
from ..sql.exchanges import PUBLISH, PUBLISH_DEDUPLICATED
from ..sql.messages import DELETE, READ, SEND
from ..sql.params import queue_state_params
from ..sql.queues import ADD_LIMIT, LOCK_LIMIT, QUEUE_STATE, READ_LIMITED


class Operations:
    """The operations of :mod:`pgq_django.store.sql` shared by Django's managers and the
    Spark pipeline, run on ``connection``."""

    __slots__ = ("connection",)

    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    def queue_state(self, queue: str) -> Any:
        """The queue's (id, paused, max_message_size, fifo, archive_on_ack, max_length,
        limited, …) by column name, or None when there is no such queue."""
        return self.connection.one(QUEUE_STATE, queue_state_params(queue))

    def lease(
        self, params: dict[str, Any], *, fifo: bool, limited: bool, clause: str = ""
    ) -> list[tuple[Any, ...]]:
        """Lease messages as :func:`pgq_django.read` does (``params`` from
        :func:`~pgq_django.store.sql.params.read_params`), as plain rows of MESSAGE_COLUMNS.

        READ of the queue's shape (``fifo``, and ``clause``: the filters' condition); a
        queue with a rate or concurrency limit (``limited``) through LOCK_LIMIT and
        READ_LIMITED in one transaction (the caller's, or one of its own), so every
        consumer counts against the limits alike: the lock makes the queue's leases take
        turns, and READ_LIMITED's snapshot, taken after it, counts the leases committed
        before it. A queue without a limit row gets one first. READ itself matches only a
        queue without limits, and a limited lease of a queue without one finds nothing.
        """
        if not limited:
            return self.connection.rows(statement_text(READ, fifo, clause), params)
        conn = self.connection
        # A transaction of its own commits without waiting for the WAL flush (LOCK_LIMIT).
        lock = {"queue": params["queue"], "relax": not conn.in_transaction()}
        with conn.transaction():
            if conn.one(LOCK_LIMIT, lock) is None:
                conn.run(ADD_LIMIT, lock)
                if conn.one(LOCK_LIMIT, lock) is None:
                    return []  # no such queue, or no limit any more: the state says which
            return conn.rows(statement_text(READ_LIMITED, fifo, clause), params)

    def ack(self, params: dict[str, Any], *, archives: bool) -> Any:
        """Delete (or, on a queue that archives on ack, archive as acked) the messages of
        ``params`` (:func:`~pgq_django.store.sql.params.delete_params`), counted; the row
        (found_queue_id, msg_ids)."""
        return self.connection.one(DELETE[archives], params)

    def send(self, param_sets: Sequence[dict[str, Any]]) -> list[Any]:
        """One SEND (of one or many bodies, counted) per parameter set; the row of each
        (found_queue_id, msg_ids, queue_full, notified, …)."""
        return self.connection.each(SEND, param_sets)

    def send_deduplicated(self, param_sets: Sequence[dict[str, Any]]) -> list[Any]:
        """One deduplicated send per parameter set; the row of each (found_queue_id, msg_id,
        inserted, notified, queue_full)."""
        return self.connection.each(SEND_DEDUPLICATED, param_sets)

    def publish(self, param_sets: Sequence[dict[str, Any]]) -> list[Any]:
        """One publish per parameter set; the row of each (exchange_id, msg_ids, too_large,
        queue_full)."""
        return self.connection.each(PUBLISH, param_sets)

    def publish_deduplicated(self, param_sets: Sequence[dict[str, Any]]) -> list[Any]:
        """One publish under a ``dedup_id`` per parameter set (each routed queue's copy
        claimed as a send's would be); rows as :meth:`publish`'s."""
        return self.connection.each(PUBLISH_DEDUPLICATED, param_sets)


# (statement shapes, FIFO?, filter clause) -> the statement's text. The same object every
# call, so the runner's per-statement caches (prepared statements, cursors, row types) find
# it by an identity-cheap lookup instead of a new string.
_TEXTS: dict[tuple[int, bool, str], str] = {}


def statement_text(shapes: dict[bool, str], fifo: bool, clause: str) -> str:
    """The text of a statement with a shape per queue kind and a ``{filters}`` slot."""
    key = (id(shapes), fifo, clause)
    found = _TEXTS.get(key)
    if found is None:
        found = _TEXTS[key] = shapes[fifo].format(filters=clause)
    return found
