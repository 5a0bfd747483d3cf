"""One start/stop base for the worker's background duties (River's ``BaseStartStop``).

The lease extender, the notifier listener and the leader each run on a thread of their own.
:class:`Service` gives them the same life cycle, so each can be started, stopped and tested
alone, and the worker composes them without knowing how any of them loops:

- ``start()`` starts the thread (named, so it shows in thread dumps); starting a running
  service does nothing, and a stopped one can be started again.
- ``stop()`` asks the thread to finish, waits up to the config's ``stop_timeout`` and says
  whether it did. A service sleeping between turns wakes at once: it sleeps on its stop
  event (:meth:`sleep`), never in ``time.sleep``.
- ``wait()`` waits for the thread to end; ``is_running`` says whether it is alive.

Each service has a small frozen config dataclass with its ``interval`` (time between turns)
and ``stop_timeout`` defaults, like River's per-service config structs.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Generic, TypeVar

from django.db import connections

logger = logging.getLogger("pgq_django.worker")


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
            self._thread = threading.Thread(target=self._main, name=self.thread_name, daemon=True)
            self._thread.start()

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
