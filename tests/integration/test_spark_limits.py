"""The Spark stream of a live queue leases within the queue's rate and concurrency limits.

The stream's reader is driven directly (``latestOffset`` leases a micro-batch on its own
connection), so no JVM starts: what is checked is the lease, which is the same statement
pair ``pgq.read`` runs for a limited queue.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import pgq_django as pgq
from tests.conftest import needs_extra

pytestmark = [pytest.mark.spark, pytest.mark.django_db(transaction=True), needs_extra("spark")]


@pytest.fixture
def streams() -> Iterator[list[Any]]:
    """Readers made by the test, stopped after it (which closes their lease connection)."""
    made: list[Any] = []
    yield made
    for stream in made:
        stream.stop()


def reader(streams: list[Any], queue: Any, batch: int) -> Any:
    from pgq_django.spark import default_dsn
    from pgq_django.spark.options import ConsumeOptions
    from pgq_django.spark.source import QueueStreamReader

    opts = ConsumeOptions.parse(
        {"queue": queue.name, "maxBatchSize": str(batch)}, default_dsn=default_dsn()
    )
    streams.append(QueueStreamReader(opts))
    return streams[-1]


def test_the_spark_stream_leases_no_more_than_a_concurrency_limit_leaves(make_queue, streams):
    q = make_queue(concurrency_limit=3)
    pgq.send_batch(q, list(range(10)))
    pgq.read(q)  # one lease elsewhere
    stream = reader(streams, q, 10)
    end = stream.latestOffset({"batch": 0, "receipts": ""})
    assert end["batch"] == 1
    assert pgq.metrics(q).in_flight == 3
    assert pgq.read(q, qty=10) == []  # the stream's leases count for everyone


def test_the_spark_stream_of_an_unlimited_queue_is_unchanged(make_queue, streams):
    q = make_queue()
    pgq.send_batch(q, list(range(10)))
    reader(streams, q, 4).latestOffset({"batch": 0, "receipts": ""})
    assert pgq.metrics(q).in_flight == 4
