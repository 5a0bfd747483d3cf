"""Leasing with any Django lookup: ``Message.objects.for_queue(q).filter(...).lease(...)``.

The composable lease must keep every promise of ``pgq.read``: receipts, read_ct, visibility,
order, FIFO group heads, paused and missing queues, and no message leased twice by
concurrent consumers (real processes on their own connections).
"""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest
from django.utils import timezone

import pgq_django as pgq
from pgq_django.models import Message
from pgq_django.store.notify import connection_params

pytestmark = pytest.mark.django_db(transaction=True)


def _of(queue):
    return Message.objects.for_queue(queue.name)


def test_lease_with_a_json_lookup_takes_only_matching_messages_best_first(make_queue):
    q = make_queue(visibility_timeout=45)
    first = pgq.send(q, {"customer": 7, "n": 1})
    pgq.send(q, {"customer": 8, "n": 2})
    urgent = pgq.send(q, {"customer": 7, "n": 3}, priority=-5)
    third = pgq.send(q, {"customer": 7, "n": 4})

    leased = _of(q).filter(message__customer=7).lease(qty=10, vt=30)

    assert [m.msg_id for m in leased] == [urgent, first, third]
    assert {m.read_ct for m in leased} == {1}
    now = timezone.now()
    assert all(now + timedelta(seconds=20) < m.vt <= now + timedelta(seconds=31) for m in leased)
    assert all(m.queue_name == q.name for m in leased)
    # Leased means hidden: neither another lease nor pgq.read sees them.
    assert _of(q).filter(message__customer=7).lease(qty=10) == []
    assert [m.message["customer"] for m in pgq.read(q, qty=10)] == [8]


def test_receipts_of_a_queryset_lease_acknowledge_and_fence_like_reads(make_queue):
    q = make_queue()
    msg_id = pgq.send(q, {"kind": "a"})
    [m] = _of(q).filter(message__kind="a").lease(vt=0)  # visible again at once
    [again] = _of(q).lease()
    assert (again.msg_id, again.read_ct) == (msg_id, 2)
    assert pgq.delete(q, m.receipt) is False  # a stale receipt changes nothing
    assert pgq.delete(q, again.receipt) is True
    assert pgq.metrics(q).queue_length == 0


def test_default_visibility_is_the_queues_and_qty_limits_the_batch(make_queue):
    q = make_queue(visibility_timeout=600)
    pgq.send_batch(q, list(range(5)))
    leased = _of(q).lease(qty=2)
    assert [m.message for m in leased] == [0, 1]
    assert all(m.vt > timezone.now() + timedelta(seconds=500) for m in leased)


def test_delayed_and_expired_messages_are_not_leased(make_queue):
    q = make_queue()
    pgq.send(q, "later", delay=3600)
    expired = pgq.send(q, "stale")
    Message.objects.filter(msg_id=expired).update(expires_at=timezone.now() - timedelta(1))
    ready = pgq.send(q, "now")
    assert [m.msg_id for m in _of(q).lease(qty=10)] == [ready]


def test_fifo_queues_lease_only_the_head_of_each_group(make_queue):
    q = make_queue(fifo=True)
    a1 = pgq.send(q, {"k": 1}, group="a")
    a2 = pgq.send(q, {"k": 1}, group="a")
    b1 = pgq.send(q, {"k": 1}, group="b")
    assert [m.msg_id for m in _of(q).filter(message__k=1).lease(qty=10)] == [a1, b1]
    assert _of(q).lease(qty=10) == []  # a2 waits behind a1, which is leased
    pgq.delete(q, [a1])
    assert [m.msg_id for m in _of(q).lease(qty=10)] == [a2]


def test_rows_locked_by_another_transaction_are_skipped_not_waited_for(make_queue):
    q = make_queue()
    locked, free = pgq.send_batch(q, ["locked", "free"])
    with psycopg.connect(**connection_params()) as other:
        other.execute("SELECT 1 FROM pgq_message WHERE msg_id = %s FOR UPDATE", [locked])
        assert [m.msg_id for m in _of(q).lease(qty=10)] == [free]
    assert [m.msg_id for m in _of(q).lease(qty=10)] == [locked]


def test_bad_requests_raise_and_change_nothing(make_queue):
    q = make_queue()
    pgq.send(q, 1)
    with pytest.raises(pgq.InvalidArgument, match="for_queue"):
        Message.objects.filter(queue=q).lease()
    with pytest.raises(pgq.InvalidArgument, match="sliced"):
        _of(q)[:1].lease()
    with pytest.raises(pgq.InvalidArgument):
        _of(q).lease(qty=0)
    with pytest.raises(pgq.InvalidArgument):
        _of(q).lease(vt=-1)
    with pytest.raises(pgq.QueueNotFound):
        Message.objects.for_queue("no_such_queue").lease()
    pgq.pause_queue(q)
    with pytest.raises(pgq.QueuePaused):
        _of(q).lease()
    pgq.resume_queue(q)
    [m] = _of(q).lease()
    assert m.read_ct == 1  # nothing above touched it


LEASER = """
import sys
import django
django.setup()
from pgq_django.models import Message
queue, seen, empty = sys.argv[1], [], 0
while empty < 3:
    batch = Message.objects.for_queue(queue).filter(message__even=True).lease(qty=7, vt=300)
    empty = 0 if batch else empty + 1
    seen += [m.msg_id for m in batch]
print(" ".join(map(str, seen)))
"""


@pytest.mark.slow
def test_concurrent_processes_never_lease_the_same_message(make_queue, spawn):
    q = make_queue()
    ids = pgq.send_batch(q, [{"n": n, "even": n % 2 == 0} for n in range(600)])
    children = [spawn("-c", LEASER, q.name) for _ in range(3)]
    leased: list[int] = []
    for child in children:
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0, err
        leased += [int(i) for i in out.split()]
    assert len(leased) == len(set(leased))  # nobody leased a message another one had
    assert sorted(leased) == ids[::2]  # every even one, no odd one
    assert {m.read_ct for m in Message.objects.filter(msg_id__in=leased)} == {1}
