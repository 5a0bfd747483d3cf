"""The data source's options are checked before anything runs (no Spark, no database needed)."""

from __future__ import annotations

from typing import Any

import pytest

from pgq_django.exceptions import InvalidArgument, InvalidName
from pgq_django.spark.options import ConsumeOptions, ReadOptions, WriteOptions
from pgq_django.store.sql.fragments import TRANSIENT_FIRST_ID


def test_read_options_are_typed_and_default_sensibly() -> None:
    opts = ReadOptions.parse(
        {"Queue": "orders", "SINCE": "2025-01-30", "outcome": "dead, acked"},
        default_dsn="dbname=x",
        default_partitions=3,
    )
    assert (opts.table, opts.queue, opts.partitions, opts.fetch_rows) == (
        "archive", "orders", 3, 10_000,
    )  # fmt: skip
    assert opts.since is not None and opts.since.isoformat() == "2025-01-30T00:00:00+00:00"
    assert opts.outcomes == ("dead", "acked") and opts.dsn == "dbname=x"


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({}, "Option dsn is missing"),
        ({"dsn": "x", "table": "messages", "outcome": "dead"}, "archive \\(table=archive\\) only"),
        ({"dsn": "x", "since": "2025-02-01", "until": "2025-01-01"}, "earlier than until"),
        ({"dsn": "x", "fetchSize": "lots"}, "fetchSize must be a whole number"),
    ],
)
def test_bad_read_options_say_what_is_allowed(options: dict[str, str], error: str) -> None:
    with pytest.raises(InvalidArgument, match=error):
        ReadOptions.parse(options, default_dsn=None, default_partitions=2)


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"dsn": "x"}, "give option queue"),
        ({"dsn": "x", "queue": "q", "since": "2025-01-01"}, "since applies to batch reads"),
        ({"dsn": "x", "queue": "q", "visibilityTimeout": "soon"}, "number of seconds"),
        ({"dsn": "x", "queue": "q", "visibilityTimeout": "\u0661\u0662"}, "number of seconds"),
        ({"dsn": "x", "queue": "q", "visibilityTimeout": "1_0"}, "number of seconds"),
        ({"dsn": "x", "queue": "q", "maxBatchSize": "20000"}, "from 1 to 1000"),
    ],
)
def test_consuming_a_queue_checks_its_options(options: dict[str, str], error: str) -> None:
    with pytest.raises(InvalidArgument, match=error):
        ConsumeOptions.parse(options, default_dsn=None)


def test_write_options_name_the_columns_they_accept() -> None:
    def parse(options: dict[str, Any], columns: list[str]) -> WriteOptions:
        return WriteOptions.parse(options, columns, default_dsn="x", channel="pgq")

    assert parse({"queue": "q"}, ["body", "headers", "dedup_id"]).queue == "q"
    assert parse({"exchange": "x"}, ["body", "routing_key"]).exchange == "x"
    with pytest.raises(InvalidArgument, match="routing_key is not one of them"):
        parse({"queue": "q"}, ["body", "routing_key"])
    with pytest.raises(InvalidArgument, match="bodyFormat is 'json' or 'text'"):
        parse({"queue": "q", "bodyFormat": "xml"}, ["body"])
    with pytest.raises(InvalidName):
        parse({"queue": "no such queue!"}, ["body"])


def _archive_stream(starting: str) -> Any:
    from pgq_django.spark.options import ArchiveStreamOptions
    from pgq_django.spark.source import ArchiveStreamReader

    opts = ArchiveStreamOptions.parse(
        {"table": "archive", "startingOffset": starting},
        default_dsn="dbname=x",
        default_partitions=1,  # one task: the slices below come out whole
    )
    return ArchiveStreamReader(opts)


# The stream reader is PySpark's class: these run with the Spark tests (marker ``spark``).
@pytest.mark.spark
@pytest.mark.parametrize(
    ("starting", "offset"),
    [
        ("earliest", {"msg_id": 0, "transient": TRANSIENT_FIRST_ID - 1}),
        ("41", {"msg_id": 41, "transient": TRANSIENT_FIRST_ID - 1}),
        (str(TRANSIENT_FIRST_ID + 7), {"msg_id": 0, "transient": TRANSIENT_FIRST_ID + 7}),
    ],
)
def test_an_archive_stream_starts_each_id_space_where_asked(
    starting: str, offset: dict[str, int]
) -> None:
    assert _archive_stream(starting).initialOffset() == offset


@pytest.mark.spark
def test_an_archive_stream_plans_each_id_space_and_reads_old_checkpoints() -> None:
    reader = _archive_stream("earliest")
    start = {"msg_id": 10, "transient": TRANSIENT_FIRST_ID + 4}
    end = {"msg_id": 13, "transient": TRANSIENT_FIRST_ID + 6}
    slices = [s for p in reader.partitions(start, end) for s in p.slices]
    assert [(lo, hi) for _, lo, hi in slices] == [
        (11, 13), (TRANSIENT_FIRST_ID + 5, TRANSIENT_FIRST_ID + 6),
    ]  # fmt: skip
    # A checkpoint from before non-durable queues has the durable position only: the other
    # space starts at its beginning.
    old = [s for p in reader.partitions({"msg_id": 10}, end) for s in p.slices]
    assert [(lo, hi) for _, lo, hi in old] == [
        (11, 13), (TRANSIENT_FIRST_ID, TRANSIENT_FIRST_ID + 6),
    ]  # fmt: skip
    assert reader.partitions(end, end) == []
