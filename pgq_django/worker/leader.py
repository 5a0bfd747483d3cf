"""Leader election by a PostgreSQL advisory lock: one maintenance runner per database.

Each worker's leader thread keeps trying ``pg_try_advisory_lock`` on a dedicated
connection. The holder runs the maintenance duties; when its process dies the connection
closes, the lock is released, and another worker takes over within a tick. The lock lives as
long as that session, so its statements (:mod:`pgq_django.sql.leader`) run on it directly
rather than through :mod:`pgq_django.db`.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

import psycopg

from ..sql import leader as sql
from . import maintenance
from .service import Service, ServiceConfig

logger = logging.getLogger("pgq_django.worker")


@dataclass(frozen=True)
class LeaderConfig(ServiceConfig):
    #: How often the leader runs the due duties, and a follower tries to take the lock.
    interval: float = 1.0
    #: A running duty is not interrupted: stop waits this long for it.
    stop_timeout: float = 10.0


class Leader(Service[LeaderConfig]):
    """Elects itself when it can and runs the duties while it leads (a :class:`Service`)."""

    thread_name = "pgq-leader"

    def __init__(
        self,
        duties: list[maintenance.Duty],
        *,
        alias: str | None = None,
        config: LeaderConfig | None = None,
    ) -> None:
        super().__init__(config or LeaderConfig())
        self.duties = duties
        self.alias = alias
        self.is_leader = False
        self.elected = threading.Event()
        self._conn: Any = None

    def try_elect(self) -> bool:
        from ..notify import connection_params

        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(**connection_params(self.alias), autocommit=True)
            self.is_leader = False
        if not self.is_leader:
            self.is_leader = bool(self._conn.execute(sql.TRY_LEADER_LOCK).fetchone()[0])
            if self.is_leader:
                logger.info("event=leader_elected")
                self.elected.set()
        else:
            self._conn.execute(sql.LEADER_PING)  # still connected, so still holding the lock
        return self.is_leader

    def run(self) -> None:
        try:
            while not self.stopping:
                try:
                    if self.try_elect():
                        maintenance.run_due(self.duties)
                except psycopg.Error:
                    logger.exception("event=leader_connection_lost")
                    self.resign()
                self.sleep(self.config.interval)
        finally:
            self.resign()

    def resign(self) -> None:
        """Give up the lead (if held) and close the election connection."""
        if self._conn is not None and not self._conn.closed:
            try:
                if self.is_leader:
                    self._conn.execute(sql.LEADER_UNLOCK)
            finally:
                self._conn.close()
        self.is_leader = False
        self.elected.clear()
