"""The test harness's flush survives being the victim of a deadlock (tests/harness).

The deadlock is made for real: a second session holds the table the TRUNCATE locks last and
then asks for the one it locked first, with a longer ``deadlock_timeout`` than the flush's
session, so PostgreSQL cancels the flush. The command must run it again and empty the tables.
"""

from __future__ import annotations

import re
import threading
from typing import Any

import psycopg
import pytest
from django.core.management import call_command
from django.core.management.color import no_style
from django.core.management.sql import sql_flush
from django.db import connection

import pgq_django as pgq
from pgq_django.models import Queue
from tests.conftest import _conninfo, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def _deadlocks(conn: psycopg.Connection[Any]) -> int:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(
        "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_flush_cancelled_by_a_deadlock_runs_again_and_empties_the_tables() -> None:
    pgq.create_queue("flushed")
    (truncate,) = sql_flush(no_style(), connection, reset_sequences=False, allow_cascade=False)
    tables = re.findall(r'"([^"]+)"', truncate)
    first, last = tables[0], tables[-1]
    name = connection.settings_dict["NAME"]
    failures: list[BaseException] = []

    def flush() -> None:
        try:
            call_command("flush", interactive=False, verbosity=0, reset_sequences=False)
        except BaseException as exc:  # reported by the test below
            failures.append(exc)
        finally:
            connection.close()

    with (
        psycopg.connect(_conninfo(name), autocommit=True) as watcher,
        psycopg.connect(_conninfo(name)) as other,
    ):
        before = _deadlocks(watcher)
        other.execute("SET LOCAL deadlock_timeout = '30s'")
        other.execute(f'LOCK TABLE "{last}" IN ROW EXCLUSIVE MODE')
        thread = threading.Thread(target=flush)
        thread.start()

        def flush_waits_for_last() -> bool:
            row = watcher.execute(
                "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = %s::regclass",
                [last],
            ).fetchone()
            return row is not None and row[0] > 0

        wait_until(flush_waits_for_last, what="the TRUNCATE to wait for the held table")
        # Now each waits for the other; the flush's session detects it first (1 s) and is
        # cancelled, which grants this lock.
        other.execute(f'LOCK TABLE "{first}" IN ACCESS SHARE MODE')
        other.rollback()
        thread.join(timeout=60)
        assert not thread.is_alive()
        assert _deadlocks(watcher) > before
    assert failures == []
    assert not Queue.objects.exists()
