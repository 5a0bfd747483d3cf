"""The worker loop: threads that lease and run messages, composed with the other parts.

``Worker(...).run()`` is what ``manage.py pgq_worker`` calls. Each worker thread leases a
batch from the served queues (round robin), runs each message through the executor, and when
nothing is visible waits for a NOTIFY wake-up or the poll interval. The main thread handles
signals, scales the thread count between min and max by backlog, and on SIGTERM/SIGINT stops
leasing, lets in-flight handlers finish within the grace period and releases the rest.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.db import close_old_connections, connections

from .. import validation as v
from ..api.delivery import release_leases
from ..api.messages import read
from ..api.schedules import ensure_periodic
from ..api.stats import metrics
from ..conf import settings
from ..exceptions import QueueNotFound, QueuePaused
from ..models import Queue
from ..readiness import unknown_queue_message, unknown_queues
from ..services import release_services, run_services
from ..store import availability
from . import maintenance
from .batch import run_batch
from .executor import Outcome, execute
from .leader import Leader
from .leases import LeaseExtender
from .notifier import Notifier, Wakeup
from .registry import Handler, batched, periodic_schedules, registered, resolve

logger = logging.getLogger("pgq_django.worker")

# Seconds between two ``worker_summary`` lines at DEBUG (``pgq_worker -v 2``).
SUMMARY_INTERVAL = 10.0
# A served queue's rate and concurrency limits are looked up again this often (seconds), so
# a limit set or removed while the worker runs changes how soon it tries again.
LIMITS_REFRESH = 5.0
# How soon a thread tries again after finding nothing, when a served queue has a
# concurrency limit: a lease elsewhere may end at any moment, and no notification says so.
CONCURRENCY_RETRY = 0.05
# The shortest wait between tries on a rate-limited queue (its next token comes in 1/rate s).
RATE_RETRY_MIN = 0.01


@dataclass
class _Slot:
    """One worker thread and what the main thread needs to know about it."""

    index: int
    thread: threading.Thread | None = None
    busy: bool = False
    idle_since: float = field(default_factory=time.monotonic)
    processed: int = 0
    failed: int = 0
    ack_failed: int = 0
    retiring: bool = False


class Worker:
    """Runs the handlers of ``queues`` (default: every queue that has one) until stopped.

    ``concurrency`` fixes the thread count; ``min_workers``/``max_workers`` let it grow
    while there is a backlog and shrink after ``idle_timeout`` seconds idle. ``once`` drains
    what is visible and returns, with exit code 1 if a handler failed (cron and CI read the
    code). ``grace`` bounds how long a stop waits for handlers; ``handler_timeout`` bounds one
    attempt of any handler without a ``timeout`` of its own. ``batch_size`` turns on batch
    commit for every atomic handler (see :mod:`.batch`): that many messages leased at a time,
    run in one transaction and acknowledged together. ``processed`` and ``failed`` count the
    messages handled successfully and unsuccessfully so far. At DEBUG, :meth:`run` logs
    them as a ``worker_summary`` line every ``summary_interval`` seconds in which messages
    were handled (and at the stop), so a busy worker at ``-v 2`` writes a line per interval,
    not a line per message.
    """

    def __init__(
        self,
        queues: list[str] | None = None,
        *,
        concurrency: int = 1,
        min_workers: int | None = None,
        max_workers: int | None = None,
        idle_timeout: float = 60.0,
        once: bool = False,
        grace: float = 30.0,
        poll_interval: float = 1.0,
        listen: bool = True,
        lead: bool = True,
        maintenance_interval: float = 60.0,
        handlers: dict[str, Handler] | None = None,
        handler_timeout: float | None = None,
        batch_size: int | None = None,
        summary_interval: float = SUMMARY_INTERVAL,
    ) -> None:
        self.handlers = handlers if handlers is not None else resolve(queues)
        self.batch_size = v.integer(
            batch_size, "batch_size", minimum=1, maximum=1000, allow_none=True
        )
        if self.batch_size is not None:
            self.handlers = batched(self.handlers, self.batch_size)
        self.min_workers = min_workers if min_workers is not None else concurrency
        self.max_workers = max(max_workers or self.min_workers, self.min_workers)
        self.idle_timeout = idle_timeout
        self.once = once
        self.grace = grace
        self.poll_interval = poll_interval
        self.listen = listen and not once and bool(settings.LISTEN)
        self.lead = lead and not once
        self.maintenance_interval = maintenance_interval
        self.handler_timeout = handler_timeout
        self.summary_interval = summary_interval
        # (when, processed, failed) as of the last summary line.
        self._summarized = (time.monotonic(), 0, 0)
        self.worker_id = f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.stopping = threading.Event()
        self.wakeup = Wakeup()
        self.leases = LeaseExtender()
        self.lease_lengths = self._lease_lengths()
        self.limited_retry: float | None = None
        self._limited: list[str] = []
        self._limits_checked = float("-inf")
        self.notifier: Notifier | None = None
        self.leader: Leader | None = None
        self._slots: list[_Slot] = []
        self._lock = threading.Lock()
        self._next = 0
        self._signals = 0

    # -- lifecycle ---------------------------------------------------------------------

    def _lease_lengths(self) -> dict[str, float]:
        timeouts = Queue.objects.visibility_timeouts(list(self.handlers))
        return {
            name: float(entry.vt if entry.vt is not None else timeouts.get(name, 30.0))
            for name, entry in self.handlers.items()
        }

    def _ensure_periodic(self) -> None:
        """Create or update the ``@pgq.periodic`` schedules of the served queues (and their
        queues, when missing), so declaring one in code is enough; a failure is logged and
        the worker runs on."""
        declared = [p for p in periodic_schedules().values() if p.queue in self.handlers]
        if not declared:
            return
        try:
            for saved in ensure_periodic(declared):
                logger.info(
                    "event=periodic_scheduled schedule=%s queue=%s cron=%r",
                    saved.name,
                    saved.queue.name,
                    saved.cron,
                )
        except Exception:
            logger.exception("event=periodic_schedule_failed")
        finally:
            close_old_connections()

    def refresh_limits(self, *, close: bool = True) -> None:
        """Look up the served queues' rate and concurrency limits: how soon an idle thread
        tries again (:attr:`limited_retry`; None: no served queue is limited).

        A lease over a limit gets no messages, and nothing notifies the worker when the
        limit leaves room again, so an idle thread retries a limited queue sooner than the
        poll interval: at the rate of the queue's tokens, or every CONCURRENCY_RETRY seconds
        under a concurrency limit. Queues without limits keep the poll interval and their
        notifications.
        """
        self._limits_checked = time.monotonic()
        if not availability.of(settings.DATABASE).up:
            return  # the limits known before the outage stand until it ends
        waits: list[float] = []
        limited: list[str] = []
        try:
            for name, rate, concurrency in Queue.objects.limits(list(self.handlers)):
                if rate:
                    waits.append(max(RATE_RETRY_MIN, 1.0 / rate))
                if concurrency:
                    waits.append(CONCURRENCY_RETRY)
                if rate or concurrency:
                    limited.append(name)
        except Exception as exc:
            if not self._unreachable(exc):
                logger.exception("event=limits_check_failed")
            return
        finally:
            if close:  # not in drain(): the caller's transaction holds that connection
                close_old_connections()
        self.limited_retry = min(waits) if waits else None
        self._limited = limited

    def held_back(self) -> bool:
        """Whether a served queue with a limit still holds visible messages back: ready
        (neither delayed nor leased), in a queue that is not paused. ``once`` and
        :meth:`drain` wait for the limits to let them through instead of stopping early."""
        if not self._limited:
            return False
        try:
            paused = Queue.objects.paused_among(self._limited)
            ready = (metrics(name) for name in self._limited if name not in paused)
            return any(m.queue_length - m.in_flight - m.delayed > 0 for m in ready)
        except Exception:
            logger.exception("event=limits_check_failed")
            return False

    def _idle_wait(self) -> float:
        """How long an idle thread waits for a wake-up before it tries again."""
        if self.limited_retry is None:
            return self.poll_interval
        return min(self.poll_interval, self.limited_retry)

    def start(self) -> None:
        """Start the shared services and the first threads (``run`` calls this)."""
        logger.info(
            "event=worker_started worker=%s queues=%s threads=%s-%s",
            self.worker_id,
            ",".join(sorted(self.handlers)),
            self.min_workers,
            self.max_workers,
        )
        # A worker runs the store's services (counter flush, wake-up throttle, LISTEN hub):
        # its acks and sends leave them work from here on (pgq_django.services).
        run_services(self)
        self._ensure_periodic()
        self._warn_of_unknown_queues()
        self.refresh_limits()
        self.leases.start()
        if self.listen:
            self.notifier = Notifier(self.handlers, self.wakeup)
            self.notifier.start()
        if self.lead:
            self.leader = Leader(maintenance.default_duties(self.maintenance_interval))
            self.leader.start()
        for _ in range(self.min_workers):
            self._add_slot()

    def _warn_of_unknown_queues(self) -> None:
        """A ``@pgq.handler`` for a queue nobody created waits forever in silence: say so.

        Only decorated handlers are asked about: a callback belongs to a queue that exists,
        and a task queue is created by its first ``enqueue``.
        """
        decorated = [name for name in self.handlers if name in registered()]
        for name, close in unknown_queues(decorated).items():
            logger.warning(
                "event=handler_queue_missing queue=%s close_names=%s hint=%r",
                name,
                ",".join(close) or "-",
                unknown_queue_message(name, close),
            )

    @property
    def processed(self) -> int:
        """Messages whose handler returned (and which were acknowledged) or were cancelled."""
        with self._lock:
            return sum(s.processed for s in self._slots)

    @property
    def failed(self) -> int:
        """Messages whose handler raised (nacked for a retry or dead-lettered)."""
        with self._lock:
            return sum(s.failed for s in self._slots)

    @property
    def ack_failed(self) -> int:
        """Messages whose handler returned but whose acknowledgement could not commit (the
        database was out of reach): neither processed nor failed, they come back when
        their leases run out."""
        with self._lock:
            return sum(s.ack_failed for s in self._slots)

    def _unreachable(self, exc: BaseException) -> bool:
        """Whether ``exc`` says the database cannot be reached. That is the process's outage,
        which :mod:`pgq_django.store.availability` reports (a line when it starts, one now
        and then, one when it ends), not a failure of the caller's to log with a traceback.
        """
        if not availability.noted(settings.DATABASE, exc):
            return False
        close_old_connections()
        return True

    def run(self) -> int:
        """Run until drained (``once``) or stopped by a signal; returns the exit code:
        1 when ``once`` and a handler failed, else 0."""
        installed = self._install_signals()
        try:
            self.start()
            while self._alive():
                if self.stopping.wait(0.5):
                    break
                self.scale()
                self._summarize()
                if time.monotonic() - self._limits_checked >= LIMITS_REFRESH:
                    self.refresh_limits()
            return self.shutdown()
        finally:
            for sig, previous in installed.items():
                signal.signal(sig, previous)

    def stop(self) -> None:
        """Stop leasing; in-flight handlers finish and unstarted leases are released."""
        self.stopping.set()
        self.wakeup.bump()

    def _install_signals(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}
        installed: dict[int, Any] = {}
        for sig in (signal.SIGTERM, signal.SIGINT):
            installed[sig] = signal.signal(sig, self._on_signal)
        return installed

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._signals += 1
        if self._signals == 1:
            logger.info(
                "event=stopping signal=%s grace=%s", signal.Signals(signum).name, self.grace
            )
            self.stop()
        else:
            logger.warning("event=forced_stop released=%s", self.leases.release_all())
            os._exit(1)

    def _alive(self) -> bool:
        with self._lock:
            return any(s.thread is not None and s.thread.is_alive() for s in self._slots)

    def shutdown(self) -> int:
        """Stop, let in-flight handlers finish within ``grace``, stop the services; the exit
        code :meth:`run` returns. With :meth:`start` and :meth:`scale`, for a program that
        drives the worker from its own loop instead of :meth:`run`."""
        deadline = time.monotonic() + self.grace
        self.stop()
        with self._lock:
            threads = [s.thread for s in self._slots if s.thread is not None]
        for thread in threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        stuck = [t for t in threads if t.is_alive()]
        if stuck:
            released = self.leases.release_all()
            logger.error(
                "event=grace_expired handlers_running=%s released=%s", len(stuck), released
            )
            # Handlers cannot be interrupted; their transactions roll back as we exit.
            os._exit(1)
        for service in (self.leader, self.notifier, self.leases):
            if service is not None and not service.stop():
                logger.warning(
                    "event=service_stop_timeout service=%s timeout=%s",
                    service.thread_name,
                    service.config.stop_timeout,
                )
        self._summarize(final=True)
        release_services(self)
        processed, failed = self.processed, self.failed
        logger.info(
            "event=worker_stopped worker=%s processed=%s failed=%s ack_failed=%s",
            self.worker_id,
            processed,
            failed,
            self.ack_failed,
        )
        return 1 if self.once and failed else 0

    def _summarize(self, *, final: bool = False) -> None:
        """At DEBUG, what was handled since the last summary, once ``summary_interval`` has
        passed (or at the stop); an interval in which nothing was handled logs nothing."""
        if not logger.isEnabledFor(logging.DEBUG):
            return
        since, processed_before, failed_before = self._summarized
        now = time.monotonic()
        if not final and now - since < self.summary_interval:
            return
        processed, failed = self.processed, self.failed
        self._summarized = (now, processed, failed)
        if (processed, failed) != (processed_before, failed_before):
            logger.debug(
                "event=worker_summary seconds=%.1f processed=%s failed=%s",
                now - since,
                processed - processed_before,
                failed - failed_before,
            )

    # -- threads -------------------------------------------------------------------------

    def _add_slot(self) -> None:
        with self._lock:
            slot = _Slot(len(self._slots))
            slot.thread = threading.Thread(
                target=self._thread_main,
                args=(slot,),
                name=f"pgq-worker-{slot.index}",
                daemon=True,
            )
            self._slots.append(slot)
        slot.thread.start()

    def _live_slots(self) -> list[_Slot]:
        with self._lock:
            return [s for s in self._slots if s.thread is not None and s.thread.is_alive()]

    @property
    def threads(self) -> int:
        """Handler threads alive now (between ``min_workers`` and ``max_workers``)."""
        return len(self._live_slots())

    def scale(self) -> None:
        """Add a thread while every thread is busy and messages are waiting.

        :meth:`run` calls this every half second; idle threads above ``min_workers`` retire
        by themselves after ``idle_timeout``.
        """
        live = self._live_slots()
        if self.once or len(live) >= self.max_workers or any(not s.busy for s in live):
            return
        if self._backlog() > 0:
            logger.info("event=scale_up threads=%s", len(live) + 1)
            self._add_slot()

    def _backlog(self) -> int:
        try:
            return sum(
                max(0, m.queue_length - m.in_flight) for m in (metrics(q) for q in self.handlers)
            )
        except Exception as exc:
            if not self._unreachable(exc):
                logger.exception("event=backlog_check_failed")
            return 0
        finally:
            close_old_connections()

    def _should_retire(self, slot: _Slot) -> bool:
        if time.monotonic() - slot.idle_since < self.idle_timeout:
            return False
        with self._lock:
            live = [
                s
                for s in self._slots
                if s.thread is not None and s.thread.is_alive() and s is not slot and not s.retiring
            ]
            if len(live) + 1 <= self.min_workers:
                return False
            slot.retiring = True
        logger.info("event=scale_down threads=%s", len(live))
        return True

    def _thread_main(self, slot: _Slot) -> None:
        try:
            while not self.stopping.is_set():
                seen = self.wakeup.generation
                if self.work_once(slot):
                    slot.idle_since = time.monotonic()
                    continue
                if self.once and self.held_back():
                    self.wakeup.wait(seen, self._idle_wait())  # the limits let more through
                    continue
                if self.once or self._should_retire(slot):
                    break
                self.wakeup.wait(seen, self._idle_wait())
        finally:
            connections.close_all()

    def _queue_order(self) -> list[str]:
        names = sorted(self.handlers)
        with self._lock:
            start = self._next % len(names)
            self._next += 1
        return names[start:] + names[:start]

    def drain(self) -> tuple[int, int]:
        """Run batches in the calling thread, on its connection, until nothing visible is
        left; returns how many messages were handled (processed, failed). Used by
        :func:`pgq_django.testing.drain`, which must see the caller's uncommitted rows."""
        slot = _Slot(0)
        self.refresh_limits(close=False)
        while self.work_once(slot) or (self.held_back() and self._pause_for_limits()):
            pass
        return slot.processed, slot.failed

    def _pause_for_limits(self) -> bool:
        """Wait as an idle thread would before the limits let more through; True."""
        time.sleep(self._idle_wait())
        return True

    def work_once(self, slot: _Slot | None = None) -> bool:
        """Lease one batch from the first served queue that has visible messages and run it.

        Returns whether anything was leased. Public so tests and embedding code can drive a
        worker step by step in their own thread.
        """
        for queue in self._queue_order():
            entry = self.handlers[queue]
            try:
                messages = read(queue, vt=entry.vt, qty=entry.batch)
            except (QueuePaused, QueueNotFound):
                continue
            except Exception as exc:
                if self._unreachable(exc):
                    # Every queue is out of reach with the database: wait for the process's
                    # next reconnection round (or the end of the outage), not busily.
                    availability.of(settings.DATABASE).wait_turn(self.stopping)
                    return False
                logger.exception("event=lease_failed queue=%s", queue)
                close_old_connections()
                continue
            if messages:
                self._run_batch(entry, self._one_per_group(queue, messages), slot)
                return True
        return False

    def _one_per_group(self, queue: str, messages: list[Any]) -> list[Any]:
        """The batch a worker runs: at most one message of each FIFO group.

        A FIFO read may lease a run of one group (as SQS's ReceiveMessage does). A worker
        runs a group one message at a time instead, so a message that fails is retried
        before the next of its group runs: it keeps each group's first message and gives
        the others back at once, unstarted, behind it.
        """
        seen: set[str] = set()
        keep, later = [], []
        for message in messages:
            group = message.group_id
            if group is not None and group in seen:
                later.append(message)
            else:
                keep.append(message)
                if group is not None:
                    seen.add(group)
        if later:
            self._release(queue, later)
        return keep

    def _run_batch(self, entry: Handler, messages: list[Any], slot: _Slot | None) -> None:
        length = self.lease_lengths.get(entry.queue, 30.0)
        timeout = entry.timeout if entry.timeout is not None else self.handler_timeout
        for message in messages:
            self.leases.track(entry.queue, message, length, timeout)
        if slot is not None:
            slot.busy = True
        if entry.batch_commit and entry.atomic:
            self._run_batch_commit(entry, messages, slot)
            return
        try:
            for i, message in enumerate(messages):
                if self.stopping.is_set():
                    self._release(entry.queue, messages[i:])
                    return
                outcome = Outcome.FAILED
                try:
                    self.leases.started(message)
                    outcome = execute(entry, message)
                except Exception:
                    # Only bookkeeping can fail here; the lease expires and it comes back.
                    logger.exception(
                        "event=execute_failed queue=%s msg_id=%s", entry.queue, message.msg_id
                    )
                    close_old_connections()
                finally:
                    self.leases.untrack(message)
                if slot is not None:
                    _count(slot, [outcome])
        finally:
            if slot is not None:
                slot.busy = False

    def _run_batch_commit(self, entry: Handler, messages: list[Any], slot: _Slot | None) -> None:
        outcomes: list[Outcome] = []
        try:
            outcomes = run_batch(entry, messages, leases=self.leases, stopping=self.stopping.is_set)
        finally:
            for message in messages:
                self.leases.untrack(message)
            if slot is not None:
                _count(slot, outcomes)
                slot.busy = False

    def _release(self, queue: str, messages: list[Any]) -> None:
        try:
            released = release_leases(queue, [m.receipt for m in messages])
            logger.info("event=leases_released queue=%s count=%s", queue, len(released))
        except Exception as exc:
            # Their leases run out and they come back; the worker carries on.
            if not self._unreachable(exc):
                logger.exception("event=release_failed queue=%s", queue)
        for message in messages:
            self.leases.untrack(message)


def _count(slot: _Slot, outcomes: list[Outcome]) -> None:
    """Add messages' outcomes to a thread's counts (a lost lease, or a message the database
    went away under before its handler ran, counts nowhere)."""
    for outcome in outcomes:
        if outcome is Outcome.FAILED:
            slot.failed += 1
        elif outcome is Outcome.ACK_FAILED:
            slot.ack_failed += 1
        elif outcome not in (Outcome.LEASE_LOST, Outcome.NOT_RUN):
            slot.processed += 1
