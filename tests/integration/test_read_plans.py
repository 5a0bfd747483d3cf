"""Reads find a queue's messages through its index, however few queues a project has.

The read statements look their queue's id up by name in the same statement, so the planner
knows it only as "some queue_id" and sizes that queue as the partition's rows divided by the
number of distinct queue_ids ANALYZE saw. With two queues that is half the rows, and a read of a
partition of a few thousand messages was planned as a scan of the whole partition and a sort
(1-7 ms per read instead of 0.1 ms). Live partitions are planned as holding many queues
(``partitions.QUEUE_ID_DISTINCT``). These tests ANALYZE a partition holding two queues'
messages and check the planner's estimate for one queue, and that the read and pop walk the
index in both plans (on this small, fresh range PostgreSQL picks the index either way; the
bench database, whose index had grown with millions of acks, showed the scan and sort).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test import override_settings
from psycopg import sql

import pgq_django as pgq
from pgq_django import partitions
from pgq_django.store.managers.operations import statement_text as _text
from pgq_django.store.sql import messages
from tests.conftest import (
    custom_plan,
    generic_plan,
    sequence_kept,
    set_sequence,
    top_of_ranges,
)


def _scans(plan: dict[str, Any], table: str) -> list[str]:
    """The scan node types of a plan that read ``table``."""
    found = [plan["Node Type"]] if plan.get("Relation Name") == table else []
    for child in plan.get("Plans", []):
        found += _scans(child, table)
    return found


def _holding(msg_id: int) -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tableoid::regclass::text FROM pgq_message WHERE msg_id = %s", [msg_id]
        )
        return str(cursor.fetchone()[0])


def _bloat_ready_index(table: str) -> None:
    """Make the range's ready index as large as a busy one grows (a B-tree keeps the pages
    of the entries acks delete): rebuilt with its pages a tenth full."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT i.indexrelid::regclass::text FROM pg_index i JOIN pg_attribute a "
            "ON a.attrelid = i.indrelid AND a.attnum = i.indkey[1] "
            "WHERE i.indrelid = %s::regclass AND a.attname = 'priority'",
            [table],
        )
        index = sql.Identifier(cursor.fetchone()[0])
        cursor.execute(
            sql.SQL("ALTER INDEX {} SET (fillfactor = 10)").format(index).as_string(None)
        )
        cursor.execute(sql.SQL("REINDEX INDEX {}").format(index).as_string(None))


def _analyze(table: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(table)).as_string(None))


@pytest.fixture
def two_queue_partition(db: Any) -> Any:
    """3,000 messages of two queues, sent in turns into a range of their own (as in a young
    project with two queues), which ANALYZE has measured. Rolled back after."""
    size = 10_000
    with sequence_kept(), override_settings(PGQ={"PARTITION_SIZE": size}):
        set_sequence(top_of_ranges() - 1)
        assert partitions.premake_partitions(1)
        pgq.create_queue("planned")
        pgq.create_queue("beside")
        body = {"event": "order.created", "order_id": 12345, "note": "x" * 64}
        ids = []
        for _ in range(15):
            ids += pgq.send_batch("planned", [body] * 100)
            ids += pgq.send_batch("beside", [body] * 100)
        table = _holding(ids[0])
        assert _holding(ids[-1]) == table != "pgq_message_p0"
        _bloat_ready_index(table)
        _analyze(table)
        yield table


@pytest.mark.parametrize("qty", [1, 100])
def test_a_read_uses_the_queue_index_in_either_plan(two_queue_partition: str, qty: int) -> None:
    table = two_queue_partition
    statement = _text(messages.READ, False, "")
    params = {"queue": "planned", "qty": qty, "vt": None, "max_bytes": 10**9}
    for plan in (custom_plan(statement, params), generic_plan(statement, params)):
        scans = _scans(plan, table)
        assert "Seq Scan" not in scans, scans
        assert "Index Scan" in scans, scans


def test_the_planner_sizes_one_queue_as_a_small_share_of_a_range(
    two_queue_partition: str,
) -> None:
    """What ANALYZE measured (two queues: half of the rows each) is replaced by the
    setting, so a read expects a few rows of its queue and walks the index for them."""
    table = two_queue_partition
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples FROM pg_class WHERE oid = %s::regclass", [table])
        rows = cursor.fetchone()[0]
    assert rows == 3000
    lookup = (
        f"SELECT 1 FROM {table} m "
        "WHERE m.queue_id = (SELECT id FROM pgq_queue WHERE name = %(queue)s)"
    )
    plan = custom_plan(lookup, {"queue": "planned"})
    assert plan["Plan Rows"] <= rows / partitions.QUEUE_ID_DISTINCT + 1, plan["Plan Rows"]


def test_a_pop_uses_the_queue_index(two_queue_partition: str) -> None:
    table = two_queue_partition
    statement = _text(messages.POP, False, "")
    scans = _scans(
        generic_plan(statement, {"queue": "planned", "qty": 1, "max_bytes": 10**9}), table
    )
    assert "Seq Scan" not in scans and "Index Scan" in scans, scans


def _queue_id_distinct(table: str) -> str | None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT array_to_string(attoptions, ',') FROM pg_attribute "
            "WHERE attrelid = %s::regclass AND attname = 'queue_id'",
            [table],
        )
        return cursor.fetchone()[0]


def test_every_live_partition_new_or_old_is_planned_as_holding_many_queues(db: Any) -> None:
    wanted = f"n_distinct={partitions.QUEUE_ID_DISTINCT}"
    ranges = [p.name for p in partitions.list_partitions("pgq_message")]
    assert ranges
    for part in ranges:
        assert _queue_id_distinct(part) == wanted, part
    # The DEFAULT partition is planned from what ANALYZE measures (empty but for repairs).
    assert _queue_id_distinct("pgq_message_default") is None
    with sequence_kept(), override_settings(PGQ={"PARTITION_SIZE": 100}):
        set_sequence(top_of_ranges() - 1)
        assert partitions.premake_partitions(2)
        lower = top_of_ranges() - 100
        assert _queue_id_distinct(f"pgq_message_r{lower}") == wanted
        assert _queue_id_distinct(f"pgq_archived_message_r{lower}") is None  # live only

        with connection.cursor() as cursor:
            cursor.execute(
                f"ALTER TABLE pgq_message_r{lower} ALTER COLUMN queue_id RESET (n_distinct)"
            )
        tuned = [a for a in partitions.tune_live_partitions() if "queue_id" in a]
        assert tuned == [f"tune pgq_message_r{lower} (queue_id {wanted})"]
        assert _queue_id_distinct(f"pgq_message_r{lower}") == wanted
        assert not [a for a in partitions.tune_live_partitions() if "queue_id" in a]
