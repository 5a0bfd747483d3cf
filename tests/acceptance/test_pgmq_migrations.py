"""With the PGMQ SQL interface on, migrations still run both ways: the interface leaves
before them (its views and functions depend on the tables they change) and comes back
after, queues and their views included."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from tests.conftest import manage_on

pytestmark = pytest.mark.slow


def _manage(database_url: str, *args: str) -> None:
    manage_on(database_url, *args, PGQ_TEST_PGQ=json.dumps({"PGMQ_SCHEMA": "pgmq"}))


def _one(database_url: str, query: str) -> Any:
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute(query).fetchone()
    return None if row is None else row[0]


def test_migrations_run_both_ways_under_the_interface(fresh_database: str) -> None:
    _manage(fresh_database, "migrate")
    _one(fresh_database, "SELECT pgmq.create('kept')")
    sent = _one(fresh_database, "SELECT * FROM pgmq.send('kept', '{\"n\": 1}')")

    # Back past the migration that added last_read_at (a column the views select) and on.
    _manage(fresh_database, "migrate", "pgq_django", "0012")
    assert _one(fresh_database, "SELECT to_regclass('pgq_message') IS NOT NULL")
    _manage(fresh_database, "migrate")
    assert _one(fresh_database, "SELECT msg_id FROM pgmq.q_kept") == sent
    assert _one(fresh_database, "SELECT count(*) FROM pgmq.read('kept', 30, 5)") == 1

    _manage(fresh_database, "migrate", "pgq_django", "zero")
    assert _one(fresh_database, "SELECT to_regnamespace('pgmq') IS NULL")
    _manage(fresh_database, "migrate")
    assert _one(fresh_database, "SELECT count(*) FROM pgmq.list_queues()") == 0
