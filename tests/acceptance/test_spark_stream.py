"""Streams: the archive as an exactly-once msg_id stream, a live queue consumed at least once."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import pgq_django as pgq
from pgq_django.store.sql.fragments import TRANSIENT_FIRST_ID
from tests.conftest import ROOT, Child, subprocess_env
from tests.spark_support import spark_session, sql_rows

pytestmark = [pytest.mark.spark, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def spark(django_db_setup: Any, django_db_blocker: Any) -> Iterator[Any]:
    with django_db_blocker.unblock():
        yield from spark_session()


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def _archive_stream(spark: Any, checkpoint: Path, seen: list[int]) -> None:
    """Run the archive stream from ``checkpoint`` until it has nothing new, collecting ids."""

    def collect(frame: Any, batch_id: int) -> None:
        seen.extend(r.msg_id for r in frame.select("msg_id").collect())

    query = (
        spark.readStream.format("pgq")
        .option("table", "archive")
        .load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    # An availableNow query ends by itself once it has read what was there; on a loaded
    # machine its first batch alone can take minutes (JVM planning), so wait generously, and
    # fail saying so rather than assert on a stream stopped halfway.
    finished = query.awaitTermination(300)
    query.stop()
    assert finished, "the availableNow archive stream did not finish within 300 s"


def test_the_archive_streams_each_row_once_across_restarts_and_waits_for_live_ids(
    spark: Any, make_queue: Any, tmp_path: Path
) -> None:
    q = make_queue(archive_on_ack=True)
    first = pgq.send_batch(q.name, [{"n": i} for i in range(10)])
    pgq.delete(q.name, first)
    seen: list[int] = []
    _archive_stream(spark, tmp_path / "ck", seen)
    assert sorted(seen) == first

    (held,) = pgq.send_batch(q.name, [{"held": True}])  # stays live: later ids must wait
    later = pgq.send_batch(q.name, [{"n": i} for i in range(10, 15)])
    pgq.delete(q.name, later)
    _archive_stream(spark, tmp_path / "ck", seen)
    assert sorted(seen) == first  # nothing past the oldest live message

    pgq.delete(q.name, held)
    _archive_stream(spark, tmp_path / "ck", seen)
    assert sorted(seen) == sorted([*first, held, *later])  # each exactly once


def test_the_archive_stream_covers_non_durable_queues_each_space_held_only_by_its_own(
    spark: Any, make_queue: Any, tmp_path: Path
) -> None:
    """Non-durable queues draw ids from a second sequence far above the durable one: the
    stream delivers their archived messages too, and a live message of one kind of queue
    holds back only its own id space."""
    durable = make_queue(archive_on_ack=True)
    unlogged = make_queue(archive_on_ack=True, durable=False)
    (held,) = pgq.send_batch(durable.name, [{"held": True}])
    fast = pgq.send_batch(unlogged.name, [{"n": i} for i in range(6)])
    assert min(fast) >= TRANSIENT_FIRST_ID
    pgq.delete(unlogged.name, fast)
    seen: list[int] = []
    _archive_stream(spark, tmp_path / "ck", seen)
    assert sorted(seen) == fast  # the held durable message does not hold them back

    (stuck,) = pgq.send_batch(unlogged.name, [{"stuck": True}])
    later = pgq.send_batch(unlogged.name, [{"n": 9}])
    pgq.delete(unlogged.name, later)
    pgq.delete(durable.name, held)
    _archive_stream(spark, tmp_path / "ck", seen)
    assert sorted(seen) == sorted([held, *fast])  # now the non-durable one waits

    pgq.delete(unlogged.name, stuck)
    _archive_stream(spark, tmp_path / "ck", seen)
    assert sorted(seen) == sorted([held, *fast, stuck, *later])  # each exactly once


def _consume(spark: Any, queue: str, seen: list[int], until: Callable[[], bool], ck: Path) -> None:
    def collect(frame: Any, batch_id: int) -> None:
        seen.extend(r.msg_id for r in frame.select("msg_id").collect())

    query = (
        spark.readStream.format("pgq")
        .option("table", "messages")
        .option("queue", queue)
        .option("maxBatchSize", "7")
        .option("numPartitions", "2")
        .load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(ck))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        _wait_for(until, "the stream to drain the queue")
    finally:
        query.stop()


def _queued(queue: str) -> list[int]:
    return sorted(
        r[0]
        for r in sql_rows(
            "SELECT m.msg_id FROM pgq_message m JOIN pgq_queue q ON q.id = m.queue_id "
            "WHERE q.name = %s",
            [queue],
        )
    )


def test_a_stream_consumes_a_queue_and_acknowledges_what_spark_committed(
    spark: Any, make_queue: Any, tmp_path: Path
) -> None:
    q = make_queue()
    ids = pgq.send_batch(q.name, [{"n": i} for i in range(30)])
    seen: list[int] = []
    _consume(spark, q.name, seen, lambda: not _queued(q.name), tmp_path / "ck")
    assert sorted(seen) == ids  # every message once, and every one acknowledged


def test_killing_a_consuming_query_mid_batch_loses_nothing(
    spark: Any, make_queue: Any, tmp_path: Path
) -> None:
    q = make_queue()
    ids = pgq.send_batch(q.name, [{"n": i} for i in range(40)])
    out = tmp_path / "consumed.txt"
    child = Child(
        [os.sys.executable, "-m", "tests.spark_consume_child", q.name, str(out)],
        workdir=tmp_path,
        cwd=ROOT,
        env=subprocess_env(),
        start_new_session=True,
    )
    try:
        _wait_for(lambda: Path(str(out) + ".blocked").exists(), "the child's third batch", 180)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)  # the driver, its JVM and Python workers
        child.wait(timeout=30)
    recorded = [int(line.split()[1]) for line in out.read_text().splitlines()]
    batches = {int(line.split()[0]) for line in out.read_text().splitlines()}
    assert batches == {0, 1, 2} and len(recorded) == 15
    acked = sorted(set(ids) - set(_queued(q.name)))
    # Only committed batches were acknowledged: the one killed mid-batch was not.
    assert set(acked) <= set(recorded) and len(acked) == 10
    # Its leases run out and a new query gets the rest: nothing is lost.
    seen: list[int] = []
    _consume(spark, q.name, seen, lambda: not _queued(q.name), tmp_path / "ck2")
    assert sorted(set(seen) | set(acked)) == ids
    assert set(seen) & set(acked) == set()


def test_a_queue_streams_into_another_queue_through_the_streaming_sink(
    spark: Any, make_queue: Any, tmp_path: Path
) -> None:
    source, target = make_queue(), make_queue()
    ids = pgq.send_batch(source.name, [{"n": i} for i in range(25)], headers={"h": "v"})
    query = (
        spark.readStream.format("pgq")
        .option("table", "messages")
        .option("queue", source.name)
        .option("maxBatchSize", "10")
        .load()
        .selectExpr("message AS body", "headers")
        .writeStream.format("pgq")
        .option("queue", target.name)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        _wait_for(
            lambda: not _queued(source.name) and len(_queued(target.name)) >= len(ids),
            "the messages to move from one queue to the other",
        )
    finally:
        query.stop()
    moved = pgq.read(target.name, qty=100)
    assert sorted(m.message["n"] for m in moved) == list(range(25))  # each exactly once here
    assert {tuple(m.headers.items()) for m in moved} == {(("h", "v"),)}
