"""The dashboard's "messages waiting" line, reconstructed from counters, with real messages.

Every test starts from queues that did not exist an hour ago, so the line must begin at 0
and end at the live depth, whatever moved between the queues in between.
"""

from __future__ import annotations

from typing import Any

import pgq_django as pgq
from pgq_django.admin.dashboard import series
from pgq_django.api import upkeep


def _depth(*queues: Any) -> list[int]:
    now = sum(pgq.metrics(q).queue_length for q in queues)
    return series([q.pk for q in queues], now)["depth"]


def _dead_letter_three(source: Any) -> None:
    pgq.send_batch(source, [{"n": i} for i in range(3)])
    for message in pgq.read(source, qty=3):
        assert pgq.nack(source, message.receipt, error="boom")


def test_dead_lettering_moves_messages_without_adding_phantom_ones(make_queue):
    dlq = make_queue()
    source = make_queue(max_retries=0, dead_letter_queue=dlq)
    _dead_letter_three(source)
    assert pgq.metrics(dlq).queue_length == 3

    both = _depth(source, dlq)
    assert (both[0], both[-1], max(both)) == (0, 3, 3)
    # Each queue alone too: the source lost three, the dead-letter queue gained three.
    assert _depth(source) == [0] * len(both)
    dlq_only = _depth(dlq)
    assert (dlq_only[0], dlq_only[-1]) == (0, 3)


def test_redrive_and_purge_are_counted(make_queue):
    dlq = make_queue()
    source = make_queue(max_retries=0, dead_letter_queue=dlq)
    _dead_letter_three(source)
    assert pgq.redrive(dlq) == 3
    assert _depth(dlq)[0] == 0
    back = _depth(source)
    assert (back[0], back[-1]) == (0, 3)

    assert pgq.purge_queue(source) == 3
    assert _depth(source, dlq) == [0] * len(back)


def test_leases_that_ran_out_on_the_last_attempt_are_counted_on_both_queues(make_queue):
    dlq = make_queue()
    source = make_queue(max_retries=0, dead_letter_queue=dlq)
    pgq.send_batch(source, [1, 2])
    assert len(pgq.read(source, qty=2, vt=0)) == 2  # the consumer "crashed": no ack, no nack
    assert upkeep.dead_letter_expired_leases() >= 2
    assert pgq.metrics(dlq).queue_length == 2
    both = _depth(source, dlq)
    assert (both[0], both[-1]) == (0, 2)
    assert _depth(source)[0] == 0
