"""The pgq data source reads what SQL reads: same ids, every row once, across partitions."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .spark_support import spark_session

pytestmark = [pytest.mark.spark, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def spark(django_db_setup: Any, django_db_blocker: Any) -> Iterator[Any]:
    with django_db_blocker.unblock():
        yield from spark_session()


def test_smoke(spark: Any, queue: Any) -> None:
    import pgq_django as pgq

    ids = pgq.send_batch(queue.name, [{"n": i} for i in range(10)])
    df = spark.read.format("pgq").option("table", "messages").load()
    got = sorted(r.msg_id for r in df.collect())
    assert got == ids
