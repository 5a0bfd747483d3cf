"""Sending, leasing and acknowledging messages (DESIGN.md sections 3 and 4)."""

from __future__ import annotations

import time

import pytest

import pgq_django as pgq
from pgq_django.models import ArchivedMessage, Message, Receipt
from pgq_django.validation import MAX_SECONDS
from tests.conftest import time_passes


def test_send_returns_increasing_ids_and_stores_every_field(queue):
    first = pgq.send(queue, {"n": 1})
    second = pgq.send(
        queue.name,
        {"n": 2},
        headers={"content_type": "application/json", "trace": "t1"},
        attributes={"color": "red"},
        label="paint",
        priority=-5,
        group=None,
        max_retries=2,
        retry_delay=1.5,
    )
    assert second > first
    m = Message.objects.get(msg_id=second)
    assert (m.message, m.headers["trace"], m.attributes, m.label, m.priority) == (
        {"n": 2},
        "t1",
        {"color": "red"},
        "paint",
        -5,
    )
    assert (m.max_retries, m.retry_delay, m.read_ct) == (2, 1.5, 0)
    assert m.expires_at > m.enqueued_at


def test_send_batch_returns_ids_in_input_order(queue):
    ids = pgq.send_batch(queue, [{"i": i} for i in range(50)])
    assert ids == sorted(ids) and len(set(ids)) == 50
    bodies = dict(Message.objects.filter(msg_id__in=ids).values_list("msg_id", "message"))
    assert [bodies[i]["i"] for i in ids] == list(range(50))
    assert pgq.send_batch(queue, []) == []


def test_messages_the_api_answers_know_their_queue_without_a_query(
    queue, django_assert_num_queries
):
    msg_id = pgq.send(queue, "named")
    [leased] = pgq.read(queue, vt=30)
    answers = [leased, pgq.read_by_id(queue, msg_id), pgq.set_vt(queue, leased.receipt, 30)]
    with django_assert_num_queries(0):
        assert [m.queue_name for m in answers] == [queue.name] * 3


def test_read_leases_a_message_until_its_visibility_timeout(queue):
    msg_id = pgq.send(queue, "hello")
    [m] = pgq.read(queue, vt=0.3)
    assert (m.msg_id, m.message, m.read_ct, m.queue_name) == (msg_id, "hello", 1, queue.name)
    assert pgq.read(queue) == []
    time_passes(queue, 0.4)
    [again] = pgq.read(queue, vt=30)
    assert (again.msg_id, again.read_ct) == (msg_id, 2)


def test_read_uses_the_queue_visibility_timeout_by_default(make_queue):
    q = make_queue(visibility_timeout=0.2)
    pgq.send(q, 1)
    assert len(pgq.read(q)) == 1
    assert pgq.read(q) == []
    time_passes(q, 0.3)
    assert len(pgq.read(q)) == 1


def test_messages_come_out_by_priority_then_msg_id(queue):
    low = pgq.send(queue, "low", priority=5)
    first = pgq.send(queue, "first")
    urgent = pgq.send(queue, "urgent", priority=-1)
    second = pgq.send(queue, "second")
    got = [m.msg_id for m in pgq.read(queue, qty=10)]
    assert got == [urgent, first, second, low]


def test_qty_limits_how_many_are_leased(queue):
    pgq.send_batch(queue, list(range(10)))
    assert len(pgq.read(queue, qty=4)) == 4
    assert len(pgq.read(queue, qty=100)) == 6
    assert pgq.read(queue, qty=1) == []


def test_delay_hides_a_message_until_it_is_due(make_queue):
    q = make_queue(delivery_delay=0.3)
    pgq.send(q, "queue delay")
    soon = pgq.send(q, "no delay", delay=0)
    assert [m.msg_id for m in pgq.read(q, qty=5)] == [soon]
    time_passes(q, 0.4)
    assert [m.message for m in pgq.read(q, qty=5)] == ["queue delay"]


def test_an_expired_message_is_never_delivered_and_is_archived_as_expired(queue):
    gone = pgq.send(queue, "short-lived", expires_in=0.1)
    kept = pgq.send(queue, "kept")
    time_passes(queue, 0.2)
    assert [m.msg_id for m in pgq.read(queue, qty=5, vt=0)] == [kept]
    assert pgq.expire_messages(queue) == 1
    archived = ArchivedMessage.objects.get(msg_id=gone)
    assert (archived.outcome, archived.message) == ("expired", "short-lived")


def test_the_longest_retention_keeps_messages_until_taken_with_no_expiry(make_queue):
    """A queue kept 'forever' (the longest retention, as PGMQ's queues are) writes no expiry:
    its messages never expire and cost no entry in the expiry index; a shorter retention or
    an expires_in still gives one."""
    forever = make_queue(retention=MAX_SECONDS)
    kept = pgq.send(forever, "kept")
    batch = pgq.send_batch(forever, ["a", "b"])
    short = pgq.send(forever, "short", expires_in=60)
    expiry = dict(Message.objects.filter(queue=forever).values_list("msg_id", "expires_at"))
    assert [expiry[i] for i in (kept, *batch)] == [None, None, None]
    assert expiry[short] is not None
    ordinary = make_queue(retention=3600)
    assert Message.objects.get(msg_id=pgq.send(ordinary, "x")).expires_at is not None
    assert pgq.expire_messages(forever) == 0
    assert [m.msg_id for m in pgq.read(forever, qty=5, vt=0)] == [kept, *batch, short]


def test_pop_reads_and_deletes_at_once(queue):
    ids = pgq.send_batch(queue, ["a", "b", "c"])
    popped = pgq.pop(queue, qty=2)
    assert [m.msg_id for m in popped] == ids[:2]
    assert list(Message.objects.filter(queue=queue).values_list("msg_id", flat=True)) == ids[2:]


def test_delete_removes_and_reports_what_it_removed(queue):
    ids = pgq.send_batch(queue, [1, 2, 3])
    assert pgq.delete(queue, ids[0]) is True
    assert pgq.delete(queue, ids[0]) is False
    assert pgq.delete(queue, [ids[1], ids[2], 10**12]) == [ids[1], ids[2]]
    assert pgq.metrics(queue).queue_length == 0


def test_delete_only_touches_the_named_queue(make_queue):
    a, b = make_queue(), make_queue()
    msg_id = pgq.send(a, 1)
    assert pgq.delete(b, msg_id) is False
    assert Message.objects.filter(msg_id=msg_id).exists()


def test_archive_on_ack_keeps_acknowledged_messages_in_the_archive(make_queue):
    q = make_queue(archive_on_ack=True)
    msg_id = pgq.send(q, {"order": 7})
    pgq.delete(q, msg_id)
    row = ArchivedMessage.objects.get(msg_id=msg_id)
    assert (row.outcome, row.message) == ("acked", {"order": 7})
    popped = pgq.send(q, "popped")
    pgq.pop(q)
    assert ArchivedMessage.objects.get(msg_id=popped).outcome == "acked"


def test_archive_moves_messages_with_outcome_archived(queue):
    ids = pgq.send_batch(queue, ["x", "y"])
    assert pgq.archive(queue, ids) == ids
    assert pgq.archive(queue, ids[0]) is False
    rows = ArchivedMessage.objects.filter(msg_id__in=ids)
    assert {r.outcome for r in rows} == {"archived"} and rows.count() == 2
    assert pgq.metrics(queue).queue_length == 0


def test_a_stale_receipt_cannot_delete_a_message_leased_again(queue):
    pgq.send(queue, "job")
    [first] = pgq.read(queue, vt=0)
    [second] = pgq.read(queue, vt=30)
    assert first.receipt == Receipt(first.msg_id, 1)
    assert pgq.delete(queue, first.receipt) is False
    assert pgq.delete(queue, str(first.receipt)) is False
    assert pgq.set_vt(queue, first.receipt, 0) is None
    assert pgq.nack(queue, first.receipt) is False
    assert pgq.delete(queue, second.receipt) is True


def test_receipt_strings_round_trip_and_bad_ones_are_rejected(queue):
    assert Receipt.parse("12:3") == Receipt(12, 3)
    assert str(Receipt(12, 3)) == "12:3"
    with pytest.raises(pgq.InvalidArgument):
        pgq.delete(queue, "12:x")


def test_set_vt_extends_or_ends_a_lease(queue):
    msg_id = pgq.send(queue, "m")
    [m] = pgq.read(queue, vt=30)
    released = pgq.set_vt(queue, m.receipt, 0)
    assert released.msg_id == msg_id
    assert [x.msg_id for x in pgq.read(queue, vt=0.2)] == [msg_id]
    pgq.set_vt(queue, msg_id, 60)
    time_passes(queue, 0.3)
    assert pgq.read(queue) == []
    assert pgq.set_vt(queue, 10**12, 5) is None


def test_read_by_id_returns_a_message_without_leasing_it(queue):
    msg_id = pgq.send(queue, {"k": "v"}, headers={"h": 1})
    m = pgq.read_by_id(queue, msg_id)
    assert (m.message, m.headers, m.read_ct) == ({"k": "v"}, {"h": 1}, 0)
    assert pgq.read_by_id(queue, 10**12) is None
    assert len(pgq.read(queue)) == 1


def test_nack_with_delay_makes_the_message_visible_again_later(queue):
    msg_id = pgq.send(queue, "retry me")
    [m] = pgq.read(queue)
    assert pgq.nack(queue, m.receipt, delay=0.2) is True
    assert pgq.read(queue) == []
    time_passes(queue, 0.3)
    [again] = pgq.read(queue)
    assert (again.msg_id, again.read_ct) == (msg_id, 2)
    assert pgq.nack(queue, 10**12) is False


def test_nack_without_delay_uses_the_retry_delay_and_backoff(make_queue):
    q = make_queue(retry_delay=0.2, backoff="none", backoff_jitter=False)
    pgq.send(q, "x")
    [m] = pgq.read(q)
    pgq.nack(q, m.receipt)
    row = Message.objects.get(msg_id=m.msg_id)
    assert 0.1 < (row.vt - row.enqueued_at).total_seconds() < 5


def test_exponential_backoff_doubles_the_delay_per_attempt(make_queue):
    q = make_queue(retry_delay=100, backoff="exponential", backoff_jitter=False)
    msg_id = pgq.send(q, "x")
    delays = []
    for _ in range(3):
        pgq.set_vt(q, msg_id, 0)
        [m] = pgq.read(q)
        before = time.time()
        pgq.nack(q, m.receipt)
        vt = Message.objects.get(msg_id=msg_id).vt.timestamp()
        delays.append(round(vt - before, -1))
    assert delays == [100, 200, 400]


def test_a_message_out_of_retries_moves_to_the_dead_letter_queue(make_queue):
    dlq = make_queue()
    q = make_queue(max_retries=1, dead_letter_queue=dlq.name)
    msg_id = pgq.send(q, "poison")
    for _ in range(2):
        pgq.set_vt(q, msg_id, 0)
        [m] = pgq.read(q)
        pgq.nack(q, m.receipt, delay=0, error="boom")
    assert pgq.metrics(q).queue_length == 0
    [dead] = pgq.read(dlq)
    assert dead.msg_id == msg_id and dead.message == "poison"
    history = dead.headers["pgq_dead_letter"]
    assert (history["attempts"], history["last_error"], history["original_queue"]) == (
        2,
        "boom",
        q.name,
    )
    assert pgq.metrics(q).dead_letters == 1


def test_without_a_dead_letter_queue_a_spent_message_is_archived_as_dead(make_queue):
    q = make_queue(max_retries=0)
    msg_id = pgq.send(q, "poison")
    [m] = pgq.read(q)
    pgq.nack(q, m.receipt, error="bad input")
    row = ArchivedMessage.objects.get(msg_id=msg_id)
    assert (row.outcome, row.error, row.read_ct) == ("dead", "bad input", 1)


@pytest.mark.parametrize(
    "filters, expected",
    [
        ({"headers": {"kind": "a"}}, ["a1", "a2"]),
        ({"attributes": {"region": "eu"}}, ["a1", "b1"]),
        ({"label": "green"}, ["a2"]),
        ({"headers": {"kind": "a"}, "attributes": {"region": "eu"}}, ["a1"]),
        ({"headers": {"kind": "zzz"}}, []),
    ],
)
def test_filters_match_headers_and_attributes_by_containment_and_label_exactly(
    queue, filters, expected
):
    pgq.send(queue, "a1", headers={"kind": "a", "x": 1}, attributes={"region": "eu"})
    pgq.send(queue, "a2", headers={"kind": "a"}, attributes={"region": "us"}, label="green")
    pgq.send(queue, "b1", headers={"kind": "b"}, attributes={"region": "eu"})
    got = [m.message for m in pgq.read(queue, qty=10, filters=filters)]
    assert got == expected


def test_fifo_queue_leases_runs_of_each_group_in_order_and_blocks_the_group(db):
    q = pgq.create_queue("jobs.fifo")
    a1 = pgq.send(q, "a1", group="a")
    a2 = pgq.send(q, "a2", group="a")
    a3 = pgq.send(q, "a3", group="a")
    b1 = pgq.send(q, "b1", group="b")
    # One read takes a group's head and the messages behind it, in order, up to qty.
    assert [m.msg_id for m in pgq.read(q, qty=2)] == [a1, a2]
    # While any of them is leased, the rest of the group waits; other groups do not.
    assert [m.msg_id for m in pgq.read(q, qty=10)] == [b1]
    assert pgq.read(q, qty=10) == []
    pgq.delete(q, a1)
    assert pgq.read(q, qty=10) == []  # a2 is still leased
    pgq.delete(q, a2)
    assert [m.msg_id for m in pgq.read(q, qty=10)] == [a3]


def test_a_fifo_read_stops_a_group_at_its_first_message_not_yet_visible(db):
    q = pgq.create_queue("stops.fifo")
    a1 = pgq.send(q, "a1", group="a")
    pgq.send(q, "a2", group="a", delay=300)
    pgq.send(q, "a3", group="a")
    assert [m.msg_id for m in pgq.read(q, qty=10)] == [a1]  # a3 waits behind a2


def test_a_fifo_group_comes_back_whole_when_its_leases_run_out(db):
    q = pgq.create_queue("again.fifo")
    ids = pgq.send_batch(q, ["1", "2", "3"], group="g")
    assert [m.msg_id for m in pgq.read(q, vt=0, qty=3)] == ids
    again = pgq.read(q, qty=3)
    assert [(m.msg_id, m.read_ct) for m in again] == [(i, 2) for i in ids]


def test_xml_bodies_are_checked_and_stored_as_strings(queue):
    xml = {"content_type": "application/xml"}
    msg_id = pgq.send(queue, "<order id='1'><item/></order>", headers=xml)
    assert pgq.read_by_id(queue, msg_id).message == "<order id='1'><item/></order>"
    with pytest.raises(pgq.InvalidMessage):
        pgq.send(queue, "<order><item></order>", headers=xml)
    with pytest.raises(pgq.InvalidMessage):
        pgq.send(queue, {"not": "xml"}, headers=xml)
    bomb = '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa">]><x>&a;</x>'
    with pytest.raises(pgq.InvalidMessage):
        pgq.send(queue, bomb, headers=xml)
    assert pgq.metrics(queue).queue_length == 1


def test_text_bodies_are_json_strings(queue):
    msg_id = pgq.send(queue, "plain words", headers={"content_type": "text/plain"})
    assert pgq.read_by_id(queue, msg_id).message == "plain words"
    with pytest.raises(pgq.InvalidMessage):
        pgq.send(queue, [1], headers={"content_type": "text/plain"})


def test_a_queue_recreated_as_fifo_is_read_in_group_order_by_the_same_process(db):
    # The process remembers "plain" for this name, then the queue comes back as FIFO: the
    # remembered shape must not deliver two messages of one group at once.
    pgq.create_queue("reborn", fifo=False)
    pgq.send("reborn", "plain")
    assert [m.message for m in pgq.read("reborn")] == ["plain"]
    pgq.drop_queue("reborn")
    pgq.create_queue("reborn", fifo=True)
    first = pgq.send("reborn", "g1", group="g")
    pgq.send("reborn", "g2", group="g")
    assert [m.msg_id for m in pgq.read("reborn")] == [first]
    assert pgq.read("reborn", qty=10) == []  # g2 waits while g1 is leased
    pgq.drop_queue("reborn")
    pgq.create_queue("reborn")
    ids = pgq.send_batch("reborn", ["a", "b"], group="g")
    assert [m.msg_id for m in pgq.pop("reborn", qty=10)] == ids


def test_switching_archive_on_ack_takes_effect_for_the_next_delete(make_queue):
    q = make_queue()
    first = pgq.send(q, "not kept")
    assert pgq.delete(q, first) is True
    pgq.alter_queue(q, archive_on_ack=True)
    kept = pgq.send(q, "kept")
    assert pgq.delete(q, kept) is True
    pgq.alter_queue(q, archive_on_ack=False)
    dropped = pgq.send(q, "dropped")
    assert pgq.delete(q, [dropped, 10**12]) == [dropped]
    archived = set(ArchivedMessage.objects.filter(queue=q).values_list("msg_id", flat=True))
    assert archived == {kept}
    assert pgq.delete(q, kept) is False
    with pytest.raises(pgq.QueueNotFound):
        pgq.delete("no_such_queue", first)
