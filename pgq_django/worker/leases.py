"""Keep long handlers' leases alive, and hand back the ones a stopping worker holds.

Every leased message a worker holds (running or waiting in its fetched batch) is tracked
here. A background thread extends each lease when half of it has passed, so a handler that
runs longer than the visibility timeout is not delivered to a second consumer meanwhile.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from django.db import close_old_connections

from ..api import delivery, messages
from ..conf import settings
from ..services import Service, ServiceConfig
from ..store import availability

logger = logging.getLogger("pgq_django.worker")
# One line per lease extended goes here, not to ``logger``: ``pgq_worker -v 2`` shows the
# worker's DEBUG lines with a summary per interval, and only ``-v 3`` adds these.
message_logger = logging.getLogger("pgq_django.worker.messages")


@dataclass
class _Lease:
    queue: str
    receipt: Any
    length: float
    deadline: float
    timeout: float | None = None  # seconds one attempt may run (None: no limit)
    started_at: float | None = None  # when its handler started (None: still waiting)


# The error a nack records for an attempt cut short (dead-letter history, archive).
TIMED_OUT = "the handler ran past its timeout of {timeout:g} s; the attempt counts as failed"
CUT_BY_STOP = "the worker stopped before the handler finished; the attempt counts as failed"


@dataclass(frozen=True)
class LeaseExtenderConfig(ServiceConfig):
    #: How often leases are checked: a lease is extended when half of it is used, so this
    #: must stay well under the shortest visibility timeout served.
    interval: float = 0.5


class LeaseExtender(Service[LeaseExtenderConfig]):
    """Tracks held leases and extends them from a thread of its own (a :class:`Service`)."""

    thread_name = "pgq-leases"

    def __init__(self, config: LeaseExtenderConfig | None = None) -> None:
        super().__init__(config or LeaseExtenderConfig())
        self._leases: dict[int, _Lease] = {}
        self._lease_lock = threading.Lock()

    def track(self, queue: str, message: Any, length: float, timeout: float | None = None) -> None:
        with self._lease_lock:
            self._leases[message.msg_id] = _Lease(
                queue, message.receipt, length, time.monotonic() + length, timeout
            )

    def started(self, message: Any) -> None:
        """The message's handler starts now: from here on its attempt counts."""
        with self._lease_lock:
            lease = self._leases.get(message.msg_id)
            if lease is not None:
                lease.started_at = time.monotonic()

    def finished(self, message: Any) -> None:
        """Its handler returned but its outcome is not committed yet (batch commit): until
        then a forced stop releases it uncounted, as if it never started, since its writes
        roll back with the batch, and no timeout applies to it any more."""
        with self._lease_lock:
            lease = self._leases.get(message.msg_id)
            if lease is not None:
                lease.started_at = None

    def untrack(self, message: Any) -> None:
        with self._lease_lock:
            self._leases.pop(message.msg_id, None)

    def held(self) -> dict[str, list[Any]]:
        """Receipts of every tracked lease, by queue."""
        with self._lease_lock:
            out: dict[str, list[Any]] = {}
            for lease in self._leases.values():
                out.setdefault(lease.queue, []).append(lease.receipt)
            return out

    def release_all(self) -> int:
        """Give back every tracked message at once (a forced stop, or the grace period ran out).

        A message whose handler never started is released unstarted (visible now, the
        delivery not counted). One whose handler was cut off mid-attempt is nacked: that
        attempt counts, so a message that always outlives the grace period is dead-lettered
        after max_retries like any other failure instead of being retried forever.
        """
        with self._lease_lock:
            leases = list(self._leases.values())
            self._leases.clear()
        count = 0
        waiting: dict[str, list[Any]] = {}
        for lease in leases:
            if lease.started_at is None:
                waiting.setdefault(lease.queue, []).append(lease.receipt)
            elif self._nack(lease, CUT_BY_STOP):
                count += 1
        for queue, receipts in waiting.items():
            try:
                count += len(delivery.release_leases(queue, receipts))
            except Exception:
                logger.exception("event=release_failed queue=%s", queue)
        return count

    @staticmethod
    def _nack(lease: _Lease, error: str) -> bool:
        try:
            return bool(messages.nack(lease.queue, lease.receipt, error=error))
        except Exception:
            logger.exception("event=nack_failed queue=%s msg_id=%s", lease.queue, lease.receipt)
            return False

    def expire_timed_out(self) -> int:
        """Nack the attempts that ran past their handler's timeout; returns how many.

        Their leases are no longer extended. The handler thread cannot be stopped; if it
        finishes later its ack still goes through unless the message was leased again.
        """
        now = time.monotonic()
        with self._lease_lock:
            late = [
                (msg_id, lease)
                for msg_id, lease in self._leases.items()
                if lease.timeout is not None
                and lease.started_at is not None
                and now - lease.started_at > lease.timeout
            ]
            for msg_id, _lease in late:
                self._leases.pop(msg_id, None)
        for msg_id, lease in late:
            logger.warning(
                "event=handler_timeout queue=%s msg_id=%s timeout=%s",
                lease.queue,
                msg_id,
                lease.timeout,
            )
            self._nack(lease, TIMED_OUT.format(timeout=lease.timeout))
        return len(late)

    def extend_due(self, now: float | None = None) -> int:
        """Extend the leases that are more than half used; returns how many.

        ``now`` (a ``time.monotonic()`` reading, default the present) lets a caller ask which
        leases a later check would extend, without waiting for that moment.
        """
        now = time.monotonic() if now is None else now
        with self._lease_lock:
            due = [
                (msg_id, lease)
                for msg_id, lease in self._leases.items()
                if lease.length > 0 and lease.deadline - now < lease.length / 2
            ]
        extended = 0
        for msg_id, lease in due:
            found = messages.set_vt(lease.queue, lease.receipt, lease.length)
            with self._lease_lock:
                if found is None:
                    # Acked meanwhile, or taken over: nothing to keep alive.
                    self._leases.pop(msg_id, None)
                elif msg_id in self._leases:
                    lease.deadline = time.monotonic() + lease.length
                    extended += 1
            if found is not None:
                message_logger.debug(
                    "event=lease_extended queue=%s msg_id=%s vt=%s",
                    lease.queue,
                    msg_id,
                    lease.length,
                )
        return extended

    def run(self) -> None:
        while not self.sleep(self.config.interval):
            try:
                self.expire_timed_out()
                self.extend_due()
            except Exception as exc:
                close_old_connections()
                if not availability.noted(settings.DATABASE, exc):
                    logger.exception("event=lease_extension_failed")
                    continue
                # The process's outage (reported by its record): no lease can be extended
                # until it ends; wait for the next reconnection round.
                availability.of(settings.DATABASE).wait_turn(self._stop)
