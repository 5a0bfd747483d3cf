"""The pgq data source reads what SQL reads: same ids, every row once, across partitions."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest

import pgq_django as pgq
from tests.spark_support import drop_tables, spark_session, spread_over_partitions, sql_rows

pytestmark = [pytest.mark.spark, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def spark(django_db_setup: Any, django_db_blocker: Any) -> Iterator[Any]:
    with django_db_blocker.unblock():
        yield from spark_session()


@pytest.fixture
def spread(make_queue: Any) -> Iterator[dict[str, Any]]:
    """Two queues with live and archived messages (three outcomes), spread over a range
    partition, a new one above a gap and the default partition."""
    a = make_queue(archive_on_ack=True)
    b = make_queue(max_retries=0)
    for q in (a, b):
        pgq.send_batch(
            q.name,
            [{"n": i, "text": "é ✓", "price": 1.10} for i in range(40)],
            headers={"k": q.name},
            label="lbl",
            priority=3,
        )
    for m in pgq.read(a.name, qty=15, vt=60):
        pgq.delete(a.name, m.receipt)
    pgq.archive(a.name, [m.msg_id for m in pgq.read(a.name, qty=5, vt=60)])
    for m in pgq.read(b.name, qty=12, vt=60):
        pgq.nack(b.name, m.receipt, error="boom")
    made = spread_over_partitions()
    try:
        yield {"a": a.name, "b": b.name}
    finally:
        drop_tables(made)


def _ids(frame: Any) -> list[int]:
    return sorted(r.msg_id for r in frame.select("msg_id").collect())


def _sql_ids(table: str, where: str = "true", params: Any = None) -> list[int]:
    rows = sql_rows(
        f"SELECT m.msg_id FROM {table} m JOIN pgq_queue q ON q.id = m.queue_id WHERE {where}",
        params,
    )
    return sorted(r[0] for r in rows)


@pytest.mark.parametrize("parts", [1, 3, 7])
def test_batch_read_returns_exactly_the_ids_sql_sees_across_gaps_and_the_default_partition(
    spark: Any, spread: dict[str, Any], parts: int
) -> None:
    in_default = sql_rows("SELECT count(*) FROM pgq_archived_message_default")[0][0]
    in_extra = sql_rows("SELECT count(*) FROM pgq_archived_message_spark_test")[0][0]
    assert in_default > 0 and in_extra > 0  # the set-up really spread the rows

    for table, relation in (("archive", "pgq_archived_message"), ("messages", "pgq_message")):
        frame = (
            spark.read.format("pgq")
            .option("table", table)
            .option("numPartitions", str(parts))
            .load()
        )
        ids = _ids(frame)
        assert ids == _sql_ids(relation)
        assert len(ids) == len(set(ids)) == frame.count()


def test_filters_match_the_same_filters_in_sql(spark: Any, spread: dict[str, Any]) -> None:
    a, _b = spread["a"], spread["b"]

    def read() -> Any:  # a fresh reader each time: option() changes the reader it is called on
        return spark.read.format("pgq").option("table", "archive")

    assert _ids(read().option("queue", a).load()) == _sql_ids(
        "pgq_archived_message", "q.name = %s", [a]
    )
    assert _ids(read().option("outcome", "dead,archived").load()) == _sql_ids(
        "pgq_archived_message", "m.outcome IN ('dead', 'archived')"
    )
    middle = sql_rows("SELECT archived_at FROM pgq_archived_message ORDER BY archived_at")[10][0]
    window = (
        read()
        .option("since", middle.isoformat())
        .option("until", (middle + timedelta(hours=1)).isoformat())
        .load()
    )
    expected = _sql_ids(
        "pgq_archived_message",
        "m.archived_at >= %s AND m.archived_at < %s",
        [middle, middle + timedelta(hours=1)],
    )
    assert _ids(window) == expected and 0 < len(expected) < len(_sql_ids("pgq_archived_message"))


def test_rows_are_typed_and_bodies_are_the_database_json_text(
    spark: Any, spread: dict[str, Any]
) -> None:
    expected = sql_rows(
        "SELECT m.msg_id, q.name, m.message::text, m.headers::text, m.attributes::text, "
        "m.label, m.priority, m.read_ct, m.enqueued_at, m.vt, m.archived_at, m.outcome, m.error "
        "FROM pgq_archived_message m JOIN pgq_queue q ON q.id = m.queue_id ORDER BY m.msg_id"
    )
    frame = spark.read.format("pgq").option("table", "archive").load()
    types = dict(frame.dtypes)
    assert types["msg_id"] == "bigint" and types["priority"] == "int"
    assert types["enqueued_at"] == types["archived_at"] == "timestamp"
    got = [
        (
            r.msg_id,
            r.queue,
            r.message,
            r.headers,
            r.attributes,
            r.label,
            r.priority,
            r.read_ct,
            r.enqueued_at,
            r.vt,
            r.archived_at,
            r.outcome,
            r.error,
        )
        for r in frame.orderBy("msg_id").collect()
    ]

    # collect() gives naive datetimes in the local time zone: compare instants.
    def instants(row: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(v.timestamp() if isinstance(v, datetime) else v for v in row)

    assert [instants(r) for r in got] == [instants(r) for r in expected]
    assert json.loads(got[0][2])["price"] == 1.10
    assert {"dead", "acked", "archived"} == {r[11] for r in got}
    assert any(r[12] == "boom" for r in got)


def test_planning_covers_every_row_once_whatever_the_number_of_partitions(
    spread: dict[str, Any],
) -> None:
    from pgq_django.spark import default_dsn
    from pgq_django.spark.options import ReadOptions
    from pgq_django.spark.source import BatchReader

    spans = {
        name: (lo, hi)
        for name, lo, hi in (
            (r[0], *sql_rows(f"SELECT min(msg_id), max(msg_id) FROM {r[0]}")[0])
            for r in sql_rows(
                "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                "WHERE i.inhparent = 'pgq_archived_message'::regclass"
            )
        )
        if lo is not None
    }
    assert len(spans) == 3  # the first range, the new range, the default partition
    for parts in range(1, 12):
        options = ReadOptions.parse(
            {"table": "archive", "numPartitions": str(parts)},
            default_dsn=default_dsn(),
            default_partitions=2,
        )
        planned = BatchReader(options).partitions()
        assert len(planned) <= parts
        covered: dict[str, list[tuple[int, int]]] = {}
        for partition in planned:
            for table, lo, hi in partition.slices:
                covered.setdefault(table, []).append((lo, hi))
        for table, (lo, hi) in spans.items():
            pieces = sorted(covered.pop(table))
            assert pieces[0][0] == lo and pieces[-1][1] == hi
            assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(pieces))
        assert covered == {}


def test_plan_slices_cuts_spans_into_contiguous_groups() -> None:
    from pgq_django.spark.source import plan_slices

    assert plan_slices([], 4) == []
    assert plan_slices([("p", 1, 10)], 1) == [[("p", 1, 10)]]
    assert plan_slices([("p", 1, 10)], 2) == [[("p", 1, 5)], [("p", 6, 10)]]
    assert plan_slices([("p", 1, 4), ("d", 100, 105)], 2) == [
        [("p", 1, 4), ("d", 100, 100)],
        [("d", 101, 105)],
    ]
    assert len(plan_slices([("p", 1, 3)], 10)) == 3


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("table", "users", "table must be 'messages' or 'archive'"),
        ("numPartitions", "0", "numPartitions must be a whole number"),
        ("since", "last tuesday", "since must be an ISO 8601"),
        ("outcome", "lost", "lost is not one"),
        ("queue", "bad name!", "not a valid queue name"),
    ],
)
def test_bad_options_fail_with_a_message_that_says_what_is_allowed(
    spark: Any, option: str, value: str, says: str
) -> None:
    with pytest.raises(Exception, match=says):
        spark.read.format("pgq").option(option, value).load().collect()


def test_a_non_durable_queues_messages_are_read_from_their_unlogged_ranges(
    spark: Any, make_queue: Any
) -> None:
    """The plan cuts along every range partition, those of the second id space included."""
    from pgq_django.store.sql.fragments import TRANSIENT_FIRST_ID

    durable, transient = make_queue(), make_queue(durable=False)
    for q in (durable, transient):
        pgq.send_batch(q.name, [{"n": i} for i in range(30)])
    pgq.archive(transient.name, [m.msg_id for m in pgq.read(transient.name, qty=10, vt=60)])
    for table, relation, expected in (
        ("messages", "pgq_message", 20),
        ("archive", "pgq_archived_message", 10),
    ):
        for parts in (1, 3):
            frame = (
                spark.read.format("pgq")
                .option("table", table)
                .option("numPartitions", str(parts))
                .load()
            )
            assert _ids(frame) == _sql_ids(relation)
        only = spark.read.format("pgq").option("table", table).option("queue", transient.name)
        ids = _ids(only.load())
        assert ids == _sql_ids(relation, "q.name = %s", [transient.name])
        assert len(ids) == expected and min(ids) >= TRANSIENT_FIRST_ID
