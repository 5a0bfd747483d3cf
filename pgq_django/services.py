"""One start/stop base for every background duty pgq_django runs (River's ``BaseStartStop``).

The worker's lease extender, notifier listener and leader, and the store's per-process
duties (the counter flusher, the trailing wake-ups and the LISTEN hub of
:mod:`pgq_django.store`), each run on a thread of their own. :class:`Service` gives them the
same life cycle, so each can be started, stopped and tested alone, and their owners compose
them without knowing how any of them loops:

- ``start()`` starts the thread (named, so it shows in thread dumps); starting a running
  service does nothing, and a stopped one can be started again.
- ``stop()`` asks the thread to finish, waits up to the config's ``stop_timeout`` and says
  whether it did. A service sleeping between turns wakes at once: it sleeps on its stop
  event (:meth:`sleep`), never in ``time.sleep``.
- ``wait()`` waits for the thread to end; ``is_running`` says whether it is alive.

Each service has a small frozen config dataclass with its ``interval`` (time between turns)
and ``stop_timeout`` defaults, like River's per-service config structs.

Process services (:class:`ProcessService`) are the ones a web process may start by itself,
on demand, the first time a send leaves them work. They are listed in one registry here, so
that fork handling (a child starts with none of its parent's state or threads) and shutdown
(the last work written when the interpreter exits) happen in one place for all of them;
:func:`process_services` lists them and :func:`stop_process_services` stops them.
Which processes run them is a matter of role: a worker runs them (:meth:`Worker.start
<pgq_django.worker.loop.Worker.start>` calls :func:`run_services`), a web process does not
unless it opts in with ``PGQ["BACKGROUND_SERVICES"] = True``. A thread a web server did not
ask for surprises it (uWSGI without ``enable-threads``, servers that import the application
before forking, thread dumps full of strangers), so by default a web process does the work
inline: each send and ack writes its counter row and notifies in its own statement
(:func:`services_run`; docs/operations.md, "Threads in a web process"). The LISTEN hub is
the exception: a caller that waits asks to be woken, so the first wait starts it in any
process (``PGQ["LISTEN"] = False`` keeps it off).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.db import connections

from .conf import settings

logger = logging.getLogger("pgq_django.services")


@dataclass(frozen=True)
class ServiceConfig:
    """Timings every service has; subclasses change the defaults and add their own."""

    #: Seconds between two turns of the service's loop.
    interval: float = 1.0
    #: Seconds ``stop()`` waits for the thread to finish.
    stop_timeout: float = 5.0


C = TypeVar("C", bound=ServiceConfig)


class Service(Generic[C]):
    """A duty that runs :meth:`run` on a named daemon thread until :meth:`stop`.

    Subclasses implement :meth:`run`, which loops ``while not self.sleep(interval)`` (or
    checks :attr:`stopping`) and returns when asked to stop. The thread closes its Django
    database connections when it ends, whatever ``run`` did.
    """

    #: The thread's name (``pgq-leases``, ``pgq-notifier`` …).
    thread_name = "pgq-service"

    def __init__(self, config: C) -> None:
        self.config = config
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # -- what a subclass provides ------------------------------------------------------------

    def run(self) -> None:
        """The service's loop, on its own thread; return when :attr:`stopping` is set."""
        raise NotImplementedError

    # -- life cycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Start the thread; nothing happens if it is already running."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop.clear()
            thread = threading.Thread(target=self._main, name=self.thread_name, daemon=True)
            thread.start()
            # Published once started: wait() and is_running read it without the lock, and
            # a thread not started yet cannot be joined.
            self._thread = thread

    def stop(self) -> bool:
        """Ask the thread to finish and wait up to ``stop_timeout``; True once it has ended.

        Stopping a service that never started, or stopped already, is not an error.
        """
        self._stop.set()
        return self.wait(self.config.stop_timeout)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the thread to end (at most ``timeout`` seconds); True if it has."""
        thread = self._thread
        if thread is None:
            return True
        thread.join(timeout)
        return not thread.is_alive()

    @property
    def is_running(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    @property
    def stopping(self) -> bool:
        """Whether :meth:`stop` was called since the last :meth:`start`."""
        return self._stop.is_set()

    def sleep(self, seconds: float) -> bool:
        """Wait ``seconds`` unless asked to stop first; True when the service should stop."""
        return self._stop.wait(seconds)

    def _main(self) -> None:
        try:
            self.run()
        except Exception:
            # A service that dies must say so: the worker goes on without it.
            logger.exception("event=service_failed service=%s", self.thread_name)
        finally:
            connections.close_all()


class ProcessService(Service[C]):
    """A service of the process itself rather than of a worker: started on demand by the
    code that leaves it work (:meth:`ensure_started`), reset in a forked child, and given a
    last turn (:meth:`shutdown`) when the interpreter exits."""

    def __init__(self, config: C) -> None:
        super().__init__(config)
        self.pid = os.getpid()
        self._live = False
        self._starting = threading.Lock()
        _REGISTRY.append(self)

    def stop(self) -> bool:
        self._live = False
        return super().stop()

    def _main(self) -> None:
        try:
            super()._main()
        finally:
            if not self._stop.is_set():  # ended unasked (its run failed): start anew
                self._live = False

    def start(self) -> None:
        _hook_exit()
        super().start()

    def retire(self) -> None:
        """Leave the registry (a service replaced by a new one: nothing left to do at exit)."""
        with contextlib.suppress(ValueError):
            _REGISTRY.remove(self)

    def ensure_started(self) -> None:
        """Start the thread unless it runs; a thread that has just decided to end (idle) is
        waited for first, so work handed over meanwhile is never left without a thread.

        Called on every send that leaves a service work, so the common answer ("it runs")
        is one attribute read: ``_live`` is set when the thread starts and cleared by
        :meth:`stop` or by a ``run`` that decides to end (before it lets go of its work's
        lock, so work handed over after that finds it cleared)."""
        if self._live:
            return
        with self._starting:  # one caller starts it; the others find it live
            if self._live:
                return
            self.wait()
            self.start()
            self._live = True

    def after_fork(self) -> None:
        """Forget the parent's state in a forked child (its work is the parent's to do)."""
        self.pid = os.getpid()
        self._live = False
        self._stop = threading.Event()
        self._thread = None
        self._lock = threading.Lock()
        self._starting = threading.Lock()

    def shutdown(self) -> None:
        """Stop the thread and do what is left, once, as the process ends."""
        self.stop()


_REGISTRY: list[ProcessService[Any]] = []

# The workers running in this process (see run_services): a set rather than a flag, so a
# worker started and stopped inside another program (a test, a management command) leaves
# the process as it found it.
_RUNNERS: set[int] = set()


def run_services(owner: object) -> None:
    """Let this process run the store's services while ``owner`` (a worker) runs."""
    _RUNNERS.add(id(owner))


def release_services(owner: object) -> None:
    """``owner`` has stopped: unless another worker runs here or the project opted in, new
    work is done inline again (services already running finish what they hold)."""
    _RUNNERS.discard(id(owner))


def services_run() -> bool:
    """Whether this process runs the store's services: a worker runs in it, or the project
    opted in (``PGQ["BACKGROUND_SERVICES"] = True``). Asked on every send and ack, so it
    reads a set and a cached setting, nothing more."""
    return bool(_RUNNERS) or bool(settings.BACKGROUND_SERVICES)


def process_services() -> list[ProcessService[Any]]:
    """The process services this process has (started or not)."""
    return list(_REGISTRY)


def stop_process_services() -> None:
    """Stop every process service, each doing its last work (at interpreter exit)."""
    for service in list(_REGISTRY):  # a hub leaves the registry as it closes
        if service.pid != os.getpid():
            continue
        try:
            service.shutdown()
        except Exception:
            logger.exception("event=service_shutdown_failed service=%s", service.thread_name)


def _after_fork_in_child() -> None:
    for service in list(_REGISTRY):
        service.after_fork()


_exit_hooked = False


def _hook_exit() -> None:
    """Stop the process services at exit, registered when the first one starts: after the
    project's settings (an embedded PostgreSQL attached there stops at exit too, and exit
    hooks run last-registered first, so ours run while its server is still up)."""
    global _exit_hooked
    if not _exit_hooked:
        _exit_hooked = True
        atexit.register(stop_process_services)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
