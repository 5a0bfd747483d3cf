"""Leader election by a PostgreSQL advisory lock: one maintenance runner per database.

Each worker's leader thread keeps trying ``pg_try_advisory_xact_lock`` on a dedicated
connection. A follower that misses it ends its transaction at once; the holder keeps its
transaction open while it leads and runs the maintenance duties (on Django's connection, not
this one). When its process dies the connection closes, the transaction ends, the lock is
released, and another worker takes over within a tick. The lock lives as long as that
transaction, so its statements (:mod:`pgq_django.store.sql.leader`) run on that connection,
through the runner's :func:`~pgq_django.store.db.run_dedicated`, not on Django's.

A transaction-scoped lock, not a session one, so that election works behind a
transaction-mode pooler (PgBouncer): the pooler keeps one server connection for a client for
exactly as long as its transaction, so the lock and its holder stay together. A session lock
would stay behind on a pooled server connection after its "session" moved on, held for
nobody and granted again to whichever client got that server connection next. The open
transaction takes no snapshot between statements and writes nothing, so it holds back no
vacuum (docs/howto/pgbouncer.md).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

import psycopg

from ..conf import settings
from ..services import Service, ServiceConfig
from ..store import availability, db
from ..store.notify import connection_params
from ..store.sql import leader as sql
from . import maintenance

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
        self._conn: psycopg.Connection[Any] | None = None
        self._alias = alias or settings.DATABASE

    @property
    def connection(self) -> psycopg.Connection[Any] | None:
        """The election's own connection (its open transaction holds the lock while this
        process leads); None before the first election. For inspection, e.g. its backend pid."""
        return self._conn

    def try_elect(self) -> bool:
        if self._conn is None or self._conn.closed:
            params = connection_params(self.alias)
            record = availability.of(self._alias)
            if not record.may_try():
                return False  # the database is out of reach: this is not our round
            try:
                self._conn = psycopg.connect(**params, prepare_threshold=None)
            except psycopg.OperationalError as exc:
                if not availability.noted(self._alias, exc, connecting=True):
                    raise
                return False
            record.back()
            self.is_leader = False
        if not self.is_leader:
            row = db.run_dedicated(self._conn, sql.TRY_LEADER_LOCK).fetchone()
            self.is_leader = bool(row and row[0])
            if self.is_leader:
                logger.info("event=leader_elected")
                self.elected.set()
            else:
                self._conn.rollback()  # a follower holds no transaction (nor pooled server)
        else:
            db.run_dedicated(self._conn, sql.LEADER_PING)  # in the transaction: still the holder
        return self.is_leader

    def run(self) -> None:
        try:
            while not self.stopping:
                try:
                    if self.try_elect():
                        maintenance.run_due(self.duties)
                except psycopg.Error as exc:
                    if availability.is_unreachable(exc):
                        # Its session ended (a restart, an outage): the next turn connects
                        # again, and an outage is reported once, by the process's record.
                        logger.debug(
                            "event=leader_connection_lost error=%r", availability.summary(exc)
                        )
                    else:
                        logger.exception("event=leader_connection_lost")
                    self.resign()
                if not availability.of(self._alias).up:
                    availability.of(self._alias).wait_turn(self._stop)
                self.sleep(self.config.interval)
        finally:
            self.resign()

    def resign(self) -> None:
        """Give up the lead (if held) and close the election connection."""
        if self._conn is not None and not self._conn.closed:
            try:
                self._conn.rollback()  # ends the transaction, and with it the lock
            except psycopg.Error:
                pass  # its session is gone already, and the lock with it
            finally:
                self._conn.close()
        self.is_leader = False
        self.elected.clear()
