"""A queue's rate_limit is bounded (from one message every 1,000 seconds to a million a
second), and a stored value outside the bounds (raw SQL, an older release) never turns a
limited read into an error: the lease reads it as the nearest bound."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.db import connection

import pgq_django as pgq
from pgq_django.exceptions import InvalidArgument

OUT_OF_BOUNDS = [5e-324, 1e-300, 0.000999, 0, -1, 1_000_000.5, 1e308]


@pytest.mark.parametrize("rate", OUT_OF_BOUNDS)
def test_a_rate_limit_out_of_bounds_is_refused_and_changes_nothing(
    queue: Any, queue_name: str, rate: float
) -> None:
    pgq.alter_queue(queue.name, rate_limit=20)
    with pytest.raises(InvalidArgument, match="rate_limit must be a number of messages per second"):
        pgq.alter_queue(queue.name, rate_limit=rate)
    assert pgq.get_queue(queue.name).rate_limit == 20
    with pytest.raises(InvalidArgument, match=re.escape("from 0.001 (one every 1,000 seconds)")):
        pgq.create_queue(queue_name + "_b", rate_limit=rate)
    assert not pgq.Queue.objects.filter(name=queue_name + "_b").exists()


@pytest.mark.parametrize("rate", [0.001, 1_000_000])
def test_the_bounds_themselves_are_accepted(queue: Any, rate: float) -> None:
    assert pgq.alter_queue(queue.name, rate_limit=rate).rate_limit == rate


@pytest.mark.parametrize("stored", ["5e-324", "-1", "0", "NaN", "Infinity", "1e300"])
def test_a_stored_rate_out_of_bounds_still_reads(queue: Any, stored: str) -> None:
    pgq.send_batch(queue.name, ["a", "b", "c"])
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE pgq_queue SET rate_limit = %s::float8 WHERE id = %s", [stored, queue.id]
        )
    first = pgq.read(queue.name, qty=3)
    second = pgq.read(queue.name, qty=3)
    # The bucket holds at least one token: the first read gets one message; a rate read
    # as the lowest bound has no second token for a long while, one read as the highest
    # has every one.
    assert len(first) >= 1
    if stored in ("5e-324", "-1", "0"):
        assert (len(first), second) == (1, [])
    else:
        assert len(first) + len(second) == 3
