"""Partition upkeep beside a long REPEATABLE READ reader: it leaves the tables the reader holds
for its next run instead of queueing an exclusive lock behind the reader (which would make
every send and read wait too), and does the work once the reader has gone."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.test import override_settings
from psycopg.conninfo import conninfo_to_dict

from pgq_django import partitions
from pgq_django.store.notify import connection_params
from tests.conftest import sequence_kept, set_sequence, top_of_ranges, wait_until

SIZE = 1000


def server_connection(*, autocommit: bool = False) -> psycopg.Connection[Any]:
    """A session on PostgreSQL itself, past the pooler when the run goes through one
    (.ci/test-pgbouncer): a reader's pid and its idle transaction are the server's, and a
    pooler reports a pid of its own; and a watcher that polls would have psycopg prepare its
    query on a pooled server connection, where another client's prepare then collides."""
    params = {**connection_params(), "autocommit": autocommit}
    direct = os.environ.get("DIRECT_DATABASE_URL")
    if direct:
        params.update((k, v) for k, v in conninfo_to_dict(direct).items() if k != "dbname")
    return psycopg.connect(**params)


@pytest.fixture
def near_the_last_boundary(db: Any) -> Iterator[int]:
    """The sequence just below the end of the highest range, as in test_partitions.py."""
    with sequence_kept():
        top = top_of_ranges()
        set_sequence(top - 10)
        with override_settings(PGQ={"PARTITION_SIZE": SIZE, "PARTITION_PREMAKE": 2}):
            yield top


@pytest.fixture
def long_reader(db: Any) -> Iterator[psycopg.Connection[Any]]:
    """A REPEATABLE READ transaction that scanned pgq_message and now sits idle in it, for
    longer than upkeep calls a while."""
    conn = server_connection()
    try:  # closed however the set-up ends: an open reader would block every later flush
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        conn.execute("SELECT count(*) FROM pgq_message").fetchone()
        pid = conn.info.backend_pid
        with server_connection(autocommit=True) as watcher:

            def idle_for_a_while() -> bool:
                row = watcher.execute(
                    "SELECT state = 'idle in transaction'"
                    " AND state_change < clock_timestamp() - interval '1 second'"
                    " FROM pg_stat_activity WHERE pid = %s",
                    [pid],
                ).fetchone()
                return bool(row and row[0])

            wait_until(idle_for_a_while, timeout=30, what="the reader idle in its transaction")
        yield conn
    finally:
        conn.close()


def test_premake_leaves_a_table_a_long_reader_holds_and_makes_its_ranges_after(
    near_the_last_boundary: int, long_reader: psycopg.Connection[Any]
) -> None:
    start = near_the_last_boundary
    before = partitions.list_partitions("pgq_message")
    actions = partitions.premake_partitions()
    # The archive, which the reader did not scan, gets its ranges; the live table waits.
    assert f"busy: create pgq_message_r{start} [{start}, {start + SIZE})" in actions[0]
    assert not [a for a in actions if a.startswith("create pgq_message_")]
    assert partitions.list_partitions("pgq_message") == before
    long_reader.commit()
    assert f"create pgq_message_r{start} [{start}, {start + SIZE})" in (
        partitions.premake_partitions()
    )


@pytest.fixture
def committed_ranges(transactional_db: Any) -> Iterator[int]:
    """Two ranges premade and committed past the highest one (other connections see them);
    the sequence put back afterwards."""
    with sequence_kept():
        top = top_of_ranges()
        set_sequence(top - 10)
        with override_settings(PGQ={"PARTITION_SIZE": SIZE, "PARTITION_PREMAKE": 2}):
            partitions.premake_partitions()
            yield top


def test_a_drained_range_waits_for_a_long_reader_to_end_before_it_is_dropped(
    committed_ranges: int,
) -> None:
    start = committed_ranges
    set_sequence(start + SIZE + 5)  # the range [start, start + SIZE) is passed and empty
    reader = server_connection()
    try:
        reader.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        reader.execute("SELECT count(*) FROM pgq_message").fetchone()
        with server_connection(autocommit=True) as watcher:
            wait_until(
                lambda: watcher.execute(
                    "SELECT state_change < clock_timestamp() - interval '1 second'"
                    " FROM pg_stat_activity WHERE pid = %s",
                    [reader.info.backend_pid],
                ).fetchone()[0],  # type: ignore[index]
                timeout=30,
                what="the reader idle in its transaction",
            )
        assert not [a for a in partitions.drop_drained_partitions() if f"_r{start} " in a]
        reader.commit()
        assert f"drop pgq_message_r{start} [{start}, {start + SIZE})" in (
            partitions.drop_drained_partitions()
        )
    finally:
        reader.close()
