"""Turn LISTEN/NOTIFY into wake-ups for idle worker threads.

One listening connection per worker process (River's shared notifier): a thread waits for
notifications on the pgq channel and, when one names a queue this worker serves, bumps a
generation counter that idle threads wait on. Threads also wake after the poll interval, so
a lost connection or a message that became visible without a notification (a delay, an
expired lease) is still picked up; polling is only the fallback.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from ..conf import settings
from ..services import Service, ServiceConfig
from ..store import availability

logger = logging.getLogger("pgq_django.worker")


class Wakeup:
    """A generation counter idle threads wait on; ``bump`` wakes them all."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.generation = 0

    def bump(self) -> None:
        with self._cond:
            self.generation += 1
            self._cond.notify_all()

    def wait(self, seen: int, timeout: float) -> bool:
        """Wait until the generation moves past ``seen``; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self.generation != seen, timeout=timeout)


@dataclass(frozen=True)
class NotifierConfig(ServiceConfig):
    #: Longest wait for one notification before the loop checks whether to stop.
    interval: float = 0.5
    #: Pause before reconnecting after the listening connection failed.
    retry_interval: float = 1.0


class Notifier(Service[NotifierConfig]):
    """A thread LISTENing for the served queues' notifications (a :class:`Service`)."""

    thread_name = "pgq-notifier"

    def __init__(
        self,
        queues: Iterable[str],
        wakeup: Wakeup,
        *,
        alias: str | None = None,
        config: NotifierConfig | None = None,
    ) -> None:
        super().__init__(config or NotifierConfig())
        self.queues = set(queues)
        self.wakeup = wakeup
        self.alias = alias
        self.ready = threading.Event()

    def run(self) -> None:
        from ..store.notify import Listener

        listener = None
        record = availability.of(self.alias or settings.DATABASE)
        try:
            while not self.stopping:
                connecting = listener is None
                try:
                    if listener is None:
                        if not record.may_try():
                            record.wait_turn(self._stop)  # not this process's round yet
                            continue
                        listener = Listener(self.alias)
                        record.back()
                        self.ready.set()
                        # Anything sent while we were not listening is found by this wake.
                        self.wakeup.bump()
                    if listener.wait(self.config.interval) & self.queues:
                        self.wakeup.bump()
                except Exception as exc:
                    if availability.noted(record.alias, exc, connecting=connecting):
                        # An outage (reported by the process's record) or a lost session:
                        # connect again on the process's next round, without a traceback.
                        if not connecting:
                            logger.debug("event=listener_lost error=%r", availability.summary(exc))
                    else:
                        logger.exception(
                            "event=listener_failed; retrying in %ss", self.config.retry_interval
                        )
                    if listener is not None:
                        listener.close()
                    listener = None
                    self.ready.clear()
                    self.sleep(self.config.retry_interval)
        finally:
            if listener is not None:
                listener.close()
