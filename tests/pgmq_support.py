"""Fixtures and helpers of the PGMQ SQL interface's tests (tests/*/test_pgmq*.py).

- ``pgmq_sql``: our interface installed in the test database (``PGQ["PGMQ_SCHEMA"] =
  "pgmq"``) for one test, removed after it.
- ``reference_dsn``: a second database on the same server with real PGMQ 1.13.0 installed
  from the SQL the ``pgmq`` package bundles (``pgmq.install``), made once per module.
- :func:`client`: the official ``pgmq`` Python client on a DSN, with its extension
  initialisation turned off (neither database has, or may have, the extension).
- :func:`shape`: a client result with what legitimately differs between the two taken out
  (ids become their order of first appearance, timestamps become facts about them), so
  results compare with ``==``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import psycopg
import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import override_settings
from pgmq import PGMQueue
from pgmq.install import get_embedded_install_sql
from psycopg import sql
from psycopg_pool import ConnectionPool

from pgq_django.pgmq import install
from tests.conftest import _conninfo


def pgmq_settings(**extra: Any) -> dict[str, Any]:
    """The test run's PGQ with the interface on (and ``extra`` laid over it)."""
    return {**settings.PGQ, "PGMQ_SCHEMA": "pgmq", **extra}


@pytest.fixture
def pgmq_sql(transactional_db: Any) -> Iterator[str]:
    """Our PGMQ interface installed in the test database; its conninfo."""
    with override_settings(PGQ=pgmq_settings()):
        install.install()
        try:
            yield ours_dsn()
        finally:
            install.uninstall()


def ours_dsn() -> str:
    """The conninfo of the test database (where our interface is installed)."""
    return _conninfo(connection.settings_dict["NAME"])


def ours_sql(text: str | sql.Composable, params: Any = None) -> list[tuple[Any, ...]]:
    """Run one statement on the test database on a connection of its own (autocommit, as a
    PGMQ client runs); its rows, or [] for a statement that returns none."""
    with psycopg.connect(ours_dsn(), autocommit=True) as conn:
        cur = conn.execute(text, params)
        return cur.fetchall() if cur.description else []


@pytest.fixture(scope="module")
def reference_dsn(django_db_setup: Any, django_db_blocker: Any) -> Iterator[str]:
    """A database with real PGMQ 1.13.0 (the package's SQL), beside the test database."""
    name = connection.settings_dict["NAME"] + "_pgmqref_" + uuid.uuid4().hex[:6]
    admin = _conninfo(connection.settings_dict["NAME"])
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        dsn = _conninfo(name)
        with psycopg.connect(dsn) as conn:
            conn.execute(get_embedded_install_sql())  # type: ignore[arg-type]
        yield dsn
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@contextmanager
def client(dsn: str) -> Iterator[Any]:
    """The official PGMQ client on ``dsn``, its pool closed on exit."""
    pool = ConnectionPool(dsn, min_size=1, max_size=4, open=True)
    try:
        yield PGMQueue(pool=pool, init_extension=False)
    finally:
        pool.close()


def unique_queue(prefix: str = "pq") -> str:
    """A queue name no other test uses (PGMQ's rule: at most 47 characters)."""
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


class Shaper:
    """Turns results into comparable shapes: each msg_id becomes its order of first
    appearance (``#1``, ``#2``...), timestamps become facts (set or not; seconds between
    ``vt`` and the read or send that set it, to ten seconds)."""

    def __init__(self) -> None:
        self.ids: dict[int, str] = {}

    def id(self, value: int) -> str:
        if value not in self.ids:
            self.ids[value] = f"#{len(self.ids) + 1}"
        return self.ids[value]

    def __call__(self, value: Any) -> Any:
        kind = type(value).__name__
        if kind == "Message":
            start = value.last_read_at or value.enqueued_at
            return {
                "msg_id": self.id(value.msg_id),
                "read_ct": value.read_ct,
                "message": value.message,
                "headers": value.headers,
                "last_read_at": value.last_read_at is not None,
                # To ten seconds: the delays and timeouts of the scripts are whole tens, and
                # the runs on the two databases start their clocks a moment apart.
                "vt_after": round((value.vt - start).total_seconds() / 10) * 10,
            }
        if kind == "QueueMetrics":
            return {
                "queue_name": value.queue_name,
                "queue_length": value.queue_length,
                "queue_visible_length": getattr(value, "queue_visible_length", None),
                "total_messages": value.total_messages,
                "ages_known": value.oldest_msg_age_sec is not None,
            }
        if kind == "QueueRecord":
            return {
                "queue_name": value.queue_name,
                "is_partitioned": value.is_partitioned,
                "is_unlogged": value.is_unlogged,
            }
        if isinstance(value, bool) or value is None or isinstance(value, str):
            return value
        if isinstance(value, int):
            return self.id(value)
        if isinstance(value, datetime):
            return "timestamp"
        if isinstance(value, list | tuple):
            return [self(v) for v in value]
        if isinstance(value, dict):
            return {k: self(v) for k, v in value.items()}
        if hasattr(value, "__dataclass_fields__"):
            return {k: self(getattr(value, k)) for k in value.__dataclass_fields__}
        return value


def run_script(dsn: str, script: Callable[[Any, Shaper], list[Any]]) -> list[Any]:
    """Run ``script(client, shape)`` on ``dsn``; a step that raises records its error's
    SQLSTATE and primary message instead, as a client sees them."""
    shape = Shaper()
    with client(dsn) as queue_client:
        return script(queue_client, shape)


def outcome(call: Callable[[], Any], shape: Shaper, *, raw: bool = False) -> Any:
    """``call()``'s result shaped (as it is with ``raw``: a count), or its error as
    ("error", sqlstate, primary message)."""
    try:
        result = call()
    except psycopg.Error as exc:
        return ("error", exc.sqlstate, exc.diag.message_primary)
    return result if raw else shape(result)
