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

from django.db import close_old_connections, connections

import pgq_django as pgq

logger = logging.getLogger("pgq_django.worker")


@dataclass
class _Lease:
    queue: str
    receipt: Any
    length: float
    deadline: float


class LeaseExtender:
    """Tracks held leases and extends them from a thread of its own (start/stop)."""

    def __init__(self, *, tick: float = 0.5) -> None:
        self.tick = tick
        self._leases: dict[int, _Lease] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def track(self, queue: str, message: Any, length: float) -> None:
        with self._lock:
            self._leases[message.msg_id] = _Lease(
                queue, message.receipt, length, time.monotonic() + length
            )

    def untrack(self, message: Any) -> None:
        with self._lock:
            self._leases.pop(message.msg_id, None)

    def held(self) -> dict[str, list[Any]]:
        """Receipts of every tracked lease, by queue."""
        with self._lock:
            out: dict[str, list[Any]] = {}
            for lease in self._leases.values():
                out.setdefault(lease.queue, []).append(lease.receipt)
            return out

    def release_all(self) -> int:
        """Make every tracked message visible again at once (a forced stop)."""
        count = 0
        for queue, receipts in self.held().items():
            try:
                count += len(pgq.release_leases(queue, receipts))
            except Exception:
                logger.exception("event=release_failed queue=%s", queue)
        with self._lock:
            self._leases.clear()
        return count

    def extend_due(self) -> int:
        """Extend the leases that are more than half used; returns how many."""
        now = time.monotonic()
        with self._lock:
            due = [
                (msg_id, lease)
                for msg_id, lease in self._leases.items()
                if lease.length > 0 and lease.deadline - now < lease.length / 2
            ]
        extended = 0
        for msg_id, lease in due:
            found = pgq.set_vt(lease.queue, lease.receipt, lease.length)
            with self._lock:
                if found is None:
                    # Acked meanwhile, or taken over: nothing to keep alive.
                    self._leases.pop(msg_id, None)
                elif msg_id in self._leases:
                    lease.deadline = time.monotonic() + lease.length
                    extended += 1
            if found is not None:
                logger.debug(
                    "event=lease_extended queue=%s msg_id=%s vt=%s",
                    lease.queue,
                    msg_id,
                    lease.length,
                )
        return extended

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.tick):
                try:
                    self.extend_due()
                except Exception:
                    logger.exception("event=lease_extension_failed")
                    close_old_connections()
        finally:
            connections.close_all()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="pgq-leases", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
