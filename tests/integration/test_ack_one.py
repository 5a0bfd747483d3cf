"""An ack of one message that commits on its own runs ACK_ONE, one DELETE that answers only
when it deleted, and the DELETE_ONE shapes only when it did not, to learn why
(docs/performance.md). These pin down that it deletes what they delete, refuses
what they refuse, and leaves the archiving queues and the caller's transactions to them.
The per-test transaction of ``db`` would route every ack to DELETE_ONE, so these tests
commit (``transaction=True``).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction
from django.db.models import Sum

import pgq_django as pgq
from pgq_django.models import ArchivedMessage, Message, QueueCounter
from pgq_django.store import tallies
from pgq_django.store.sql import messages
from tests.conftest import statements_run

pytestmark = pytest.mark.django_db(transaction=True)
# ACK_ONE is the statement of a process that runs the store's services (a worker's).
RUNS_SERVICES = True


def test_an_ack_by_receipt_is_one_delete_and_is_counted(make_queue: Any) -> None:
    q = make_queue()
    pgq.send(q, "a")
    [m] = pgq.read(q)
    with statements_run() as seen:
        assert pgq.delete(q, m.receipt) is True
    assert seen == [messages.ACK_ONE]
    assert not Message.objects.filter(msg_id=m.msg_id).exists()
    tallies.flush()
    acked = QueueCounter.objects.filter(queue=q, kind="acked").aggregate(n=Sum("n"))["n"]
    assert acked == 1


def test_a_stale_receipt_deletes_nothing_and_the_fallback_says_so(make_queue: Any) -> None:
    q = make_queue()
    pgq.send(q, "a")
    [first] = pgq.read(q, vt=0)
    [again] = pgq.read(q, vt=30)  # leased again: the first receipt is stale
    with statements_run() as seen:
        assert pgq.delete(q, first.receipt) is False
    assert seen == [messages.ACK_ONE, messages.DELETE_ONE_UNCOUNTED[False]]
    assert Message.objects.filter(msg_id=again.msg_id).exists()
    assert pgq.delete(q, again.receipt) is True


def test_an_ack_on_a_missing_queue_raises_and_touches_nothing(make_queue: Any) -> None:
    q = make_queue()
    msg_id = pgq.send(q, "a")
    [m] = pgq.read(q)
    with pytest.raises(pgq.QueueNotFound):
        pgq.delete(q.name + "_gone", m.receipt)
    assert Message.objects.filter(msg_id=msg_id).exists()


def test_a_queue_that_archives_on_ack_is_acked_by_its_own_shape(make_queue: Any) -> None:
    """ACK_ONE never matches such a queue; once this process knows its shape, its acks go
    straight to the archiving one."""
    q = make_queue(archive_on_ack=True)
    pgq.send_batch(q, ["a", "b"])
    first, second = pgq.read(q, qty=2)
    with statements_run() as seen:
        assert pgq.complete(q, first.receipt, result={"ok": 1}) is True
    assert seen[0] == messages.ACK_ONE and seen[-1] == messages.DELETE_ONE_UNCOUNTED[True]
    with statements_run() as seen:
        assert pgq.delete(q, second.receipt) is True
    assert seen == [messages.DELETE_ONE_UNCOUNTED[True]]
    archived = ArchivedMessage.objects.filter(msg_id__in=[first.msg_id, second.msg_id])
    assert sorted(a.outcome for a in archived) == ["acked", "acked"]
    assert pgq.result(first.msg_id).result == {"ok": 1}


def test_an_ack_inside_the_callers_transaction_counts_itself_there(make_queue: Any) -> None:
    q = make_queue()
    pgq.send(q, "a")
    [m] = pgq.read(q)
    with transaction.atomic(), statements_run() as seen:
        assert pgq.delete(q, m.receipt) is True
    assert seen == [messages.DELETE_ONE[False]]
    assert not Message.objects.filter(msg_id=m.msg_id).exists()
