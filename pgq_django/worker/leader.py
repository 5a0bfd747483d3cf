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
from typing import Any

import psycopg
from django.db import connections

from ..sql import leader as sql
from . import maintenance

logger = logging.getLogger("pgq_django.worker")


class Leader:
    """Elects itself when it can and runs the duties while it leads (start/stop)."""

    def __init__(
        self,
        duties: list[maintenance.Duty],
        *,
        tick: float = 1.0,
        alias: str | None = None,
    ) -> None:
        self.duties = duties
        self.tick = tick
        self.alias = alias
        self.is_leader = False
        self.elected = threading.Event()
        self._conn: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

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

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    if self.try_elect():
                        maintenance.run_due(self.duties)
                except psycopg.Error:
                    logger.exception("event=leader_connection_lost")
                    self._close()
                self._stop.wait(self.tick)
        finally:
            self._close()
            connections.close_all()

    def _close(self) -> None:
        if self._conn is not None and not self._conn.closed:
            try:
                if self.is_leader:
                    self._conn.execute(sql.LEADER_UNLOCK)
            finally:
                self._conn.close()
        self.is_leader = False
        self.elected.clear()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="pgq-leader", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
