"""The migrations run forwards and backwards on a real database, and match the models."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.conftest import manage_on

pytestmark = pytest.mark.slow


def _tables(database_url: str) -> set[str]:
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT relname FROM pg_class WHERE relname LIKE 'pgq\\_%' AND relkind IN ('r', 'p')"
        ).fetchall()
    return {r[0] for r in rows}


def test_migrations_apply_unapply_and_apply_again(fresh_database: Any) -> None:
    manage_on(fresh_database, "migrate")
    created = _tables(fresh_database)
    assert {
        "pgq_queue",
        "pgq_message",
        "pgq_message_p0",
        "pgq_message_default",
        "pgq_archived_message",
        "pgq_queue_counter",
    } <= created

    manage_on(fresh_database, "migrate", "pgq_django", "zero")
    assert _tables(fresh_database) == set()

    manage_on(fresh_database, "migrate")
    assert _tables(fresh_database) == created
    with psycopg.connect(fresh_database) as conn:
        ids = conn.execute(
            "WITH q AS (INSERT INTO pgq_queue (name, fifo, visibility_timeout, delivery_delay,"
            " retention, max_retries, retry_delay, backoff, backoff_cap, backoff_jitter,"
            " max_message_size, archive_on_ack, paused, callback, created_at, updated_at)"
            " VALUES ('m', false, 30, 0, 60, 1, 1, 'none', 1, false, 100, false, false, '',"
            " now(), now()) RETURNING id)"
            " INSERT INTO pgq_message (queue_id, message) SELECT id, '1' FROM q RETURNING msg_id"
        ).fetchall()
    assert ids == [(1,)]  # the msg_id sequence came back too, starting at 1


def test_the_models_need_no_new_migration(fresh_database: Any) -> None:
    out = manage_on(fresh_database, "makemigrations", "--check", "--dry-run", "pgq_django")
    assert "No changes detected" in out
