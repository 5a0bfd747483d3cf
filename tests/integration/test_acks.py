"""Batch acknowledgements: receipts and bare ids in one list, each fenced on its own."""

from __future__ import annotations

import pytest

import pgq_django as pgq
from pgq_django.models import ArchivedMessage, Message


@pytest.mark.parametrize("archive_on_ack", [False, True])
def test_a_batch_mixing_current_and_stale_receipts_and_ids_acts_on_the_right_ones(
    make_queue, archive_on_ack
):
    q = make_queue(archive_on_ack=archive_on_ack)
    ids = pgq.send_batch(q, [{"n": n} for n in range(6)])
    stale = pgq.read(q, qty=6, vt=0)  # leases run out at once
    current = {m.msg_id: m for m in pgq.read(q, qty=6, vt=30)}
    assert set(current) == set(ids)
    refs = [
        current[ids[0]].receipt,  # current: acted on
        stale[1].receipt,  # stale (read again since): skipped
        ids[2],  # a bare id: any delivery
        str(current[ids[3]].receipt),  # a current receipt as text
        stale[4].receipt,  # stale
        current[ids[4]].receipt,  # ... and current for the same message: acted on
    ]
    done = pgq.delete(q, refs)
    assert sorted(done) == [ids[0], ids[2], ids[3], ids[4]]
    left = set(Message.objects.filter(queue=q).values_list("msg_id", flat=True))
    assert left == {ids[1], ids[5]}
    archived = set(ArchivedMessage.objects.filter(queue=q).values_list("msg_id", flat=True))
    assert archived == (set(done) if archive_on_ack else set())


def test_archive_fences_receipts_like_delete(make_queue):
    q = make_queue()
    ids = pgq.send_batch(q, [{"n": n} for n in range(3)])
    stale = pgq.read(q, qty=3, vt=0)
    current = {m.msg_id: m for m in pgq.read(q, qty=3, vt=30)}
    moved = pgq.archive(q, [stale[0].receipt, current[ids[1]].receipt, ids[2]])
    assert sorted(moved) == [ids[1], ids[2]]
