"""Delivery guarantees of the functional API: dedup, cancel, result, redrive, rescue."""

from __future__ import annotations

import pytest
from django.db import connection

import pgq_django as pgq
from pgq_django.api import upkeep
from pgq_django.models import ArchivedMessage, Message
from pgq_django.store.sql.delivery import DEDUP_WINDOW_SECONDS


def _age_dedup_claims(seconds: int, queue: pgq.Queue) -> None:
    """Make ``seconds`` pass for ``queue``'s dedup claims (only its own: pgq_dedup is not a
    model's table, so claims other tests committed are still there)."""
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE pgq_dedup SET expires_at = expires_at - make_interval(secs => %s)"
            " WHERE queue_id = %s",
            [seconds, queue.pk],
        )


def test_a_repeated_dedup_id_returns_the_first_message_and_sends_nothing(queue):
    first = pgq.send(queue, {"n": 1}, dedup_id="order-7")
    again = pgq.send(queue, {"n": 2}, dedup_id="order-7")
    other = pgq.send(queue, {"n": 3}, dedup_id="order-8")
    assert again == first
    assert other != first
    bodies = [m.message for m in pgq.read(queue, qty=10)]
    assert bodies == [{"n": 1}, {"n": 3}]


def test_a_dedup_id_still_suppresses_after_the_first_message_was_acked(queue):
    first = pgq.send(queue, {"n": 1}, dedup_id="x")
    assert pgq.delete(queue, first)
    assert pgq.send(queue, {"n": 2}, dedup_id="x") == first
    assert pgq.read(queue) == []


def test_a_dedup_id_can_be_reused_after_its_five_minute_window(queue):
    first = pgq.send(queue, {"n": 1}, dedup_id="x")
    _age_dedup_claims(DEDUP_WINDOW_SECONDS + 1, queue)
    second = pgq.send(queue, {"n": 2}, dedup_id="x")
    assert second != first
    assert Message.objects.filter(queue=queue).count() == 2


def test_dedup_ids_are_per_queue(make_queue):
    a, b = make_queue(), make_queue()
    assert pgq.send(a, 1, dedup_id="same") != pgq.send(b, 2, dedup_id="same")


def test_dedup_send_rejects_batches_and_unknown_queues(queue):
    with pytest.raises(pgq.InvalidArgument):
        pgq.send_batch(queue, [1, 2], dedup_id="x")
    with pytest.raises(pgq.QueueNotFound):
        pgq.send("nope_nope", 1, dedup_id="x")
    assert Message.objects.filter(queue=queue).count() == 0


def test_prune_forgets_expired_dedup_claims_only(queue):
    pgq.send(queue, 1, dedup_id="old")
    _age_dedup_claims(DEDUP_WINDOW_SECONDS + 1, queue)
    pgq.send(queue, 2, dedup_id="new")
    # At least this queue's old claim; claims of earlier tests' queues expire meanwhile too.
    assert upkeep.prune()["dedup_pruned"] >= 1
    with connection.cursor() as cur:
        cur.execute("SELECT dedup_id FROM pgq_dedup WHERE queue_id = %s", [queue.pk])
        assert cur.fetchall() == [("new",)]


def test_cancel_archives_a_pending_message_as_cancelled(queue):
    msg_id = pgq.send(queue, {"job": 1})
    assert pgq.cancel(queue, msg_id) is True
    assert pgq.read(queue) == []
    assert ArchivedMessage.objects.get(msg_id=msg_id).outcome == "cancelled"
    assert pgq.result(msg_id).outcome == "cancelled"


def test_cancel_of_a_leased_message_flags_it_for_its_handler(queue):
    msg_id = pgq.send(queue, {"job": 1})
    (leased,) = pgq.read(queue, vt=30)
    assert pgq.cancel_requested(leased) is False
    assert pgq.cancel(queue, msg_id) is True
    assert pgq.cancel_requested(msg_id) is True
    assert pgq.result(msg_id).outcome == "leased"
    assert pgq.result(msg_id).cancel_requested is True


def test_cancel_of_an_unknown_message_is_false_and_an_unknown_queue_raises(queue):
    assert pgq.cancel(queue, 999_999_999) is False
    with pytest.raises(pgq.QueueNotFound):
        pgq.cancel("missing_q", 1)


def test_result_follows_a_message_from_pending_to_acked_with_its_value(make_queue):
    q = make_queue(archive_on_ack=True)
    msg_id = pgq.send(q, {"x": 1})
    assert pgq.result(msg_id).outcome == "pending"
    assert not pgq.result(msg_id).finished
    (m,) = pgq.read(q)
    assert pgq.result(msg_id).outcome == "leased"
    assert pgq.complete(q, m.receipt, result={"total": 42}) is True
    done = pgq.result(msg_id)
    assert (done.outcome, done.result, done.attempts, done.succeeded) == (
        "acked",
        {"total": 42},
        1,
        True,
    )
    assert done.finished_at is not None


def test_result_of_a_dead_message_carries_the_last_error(make_queue):
    q = make_queue(max_retries=0)
    msg_id = pgq.send(q, 1)
    (m,) = pgq.read(q)
    pgq.nack(q, m.receipt, error="ValueError: boom")
    found = pgq.result(msg_id)
    assert (found.outcome, found.error) == ("dead", "ValueError: boom")


def test_result_of_an_unknown_id_is_none(db):
    assert pgq.result(123_456_789) is None


def test_complete_rejects_a_result_that_is_not_json(queue):
    pgq.send(queue, 1)
    (m,) = pgq.read(queue)
    with pytest.raises(pgq.InvalidArgument):
        pgq.complete(queue, m.receipt, result=object())
    assert pgq.read_by_id(queue, m.msg_id) is not None


def _dead_letter(queue, dlq, bodies):
    ids = pgq.send_batch(queue, bodies)
    for m in pgq.read(queue, qty=len(bodies)):
        pgq.nack(queue, m.receipt, error="boom")
    assert pgq.metrics(dlq).queue_length == len(bodies)
    return ids


def test_redrive_moves_dead_letters_back_to_their_queue_with_a_fresh_start(make_queue):
    dlq = make_queue()
    q = make_queue(max_retries=0, dead_letter_queue=dlq)
    ids = _dead_letter(q, dlq, [1, 2, 3])
    assert pgq.redrive(dlq, limit=2) == 2
    assert pgq.redrive(dlq) == 1
    back = pgq.read(q, qty=10)
    assert [m.msg_id for m in back] == ids
    assert all(m.read_ct == 1 for m in back)
    history = back[0].headers["pgq_redriven"]
    assert "pgq_dead_letter" not in back[0].headers
    assert history[0]["original_queue"] == q.name and history[0]["attempts"] == 1


def test_redrive_to_another_queue(make_queue):
    dlq, elsewhere = make_queue(), make_queue()
    q = make_queue(max_retries=0, dead_letter_queue=dlq)
    _dead_letter(q, dlq, [1])
    assert pgq.redrive(dlq, to=elsewhere) == 1
    assert [m.message for m in pgq.read(elsewhere)] == [1]
    assert pgq.read(q) == []


def test_redrive_checks_its_arguments_and_changes_nothing_on_error(make_queue):
    dlq = make_queue()
    q = make_queue(max_retries=0, dead_letter_queue=dlq)
    _dead_letter(q, dlq, [1])
    with pytest.raises(pgq.QueueNotFound):
        pgq.redrive("no_such_dlq")
    with pytest.raises(pgq.QueueNotFound):
        pgq.redrive(dlq, to="no_such_target")
    with pytest.raises(pgq.InvalidArgument):
        pgq.redrive(dlq, limit=0)
    assert pgq.metrics(dlq).queue_length == 1


def test_redrive_skips_messages_whose_original_queue_is_gone(make_queue):
    dlq = make_queue()
    q = make_queue(max_retries=0, dead_letter_queue=dlq)
    _dead_letter(q, dlq, [1])
    # The DLQ keeps the message with its history; only the origin disappears.
    pgq.drop_queue(q)
    assert pgq.redrive(dlq) == 0
    assert pgq.metrics(dlq).queue_length == 1


def test_release_leases_makes_messages_visible_without_counting_the_delivery(queue):
    pgq.send_batch(queue, [1, 2])
    leased = pgq.read(queue, qty=2, vt=60)
    assert pgq.read(queue) == []
    assert sorted(pgq.release_leases(queue, leased)) == sorted(m.msg_id for m in leased)
    again = pgq.read(queue, qty=2)
    assert [m.read_ct for m in again] == [1, 1]
    with pytest.raises(pgq.InvalidArgument):
        pgq.release_leases(queue, [again[0].msg_id])


def test_a_lease_that_expires_after_the_last_attempt_is_dead_lettered(make_queue):
    dlq = make_queue()
    q = make_queue(max_retries=1, dead_letter_queue=dlq)
    msg_id = pgq.send(q, {"crash": True})
    for _ in range(2):  # two deliveries whose consumers "crashed" (lease left to expire)
        (m,) = pgq.read(q, vt=0)
        assert m.msg_id == msg_id
    assert upkeep.dead_letter_expired_leases() == 1
    (dead,) = pgq.read(dlq)
    assert dead.msg_id == msg_id
    assert dead.headers["pgq_dead_letter"]["attempts"] == 2
    assert "lease expired" in dead.headers["pgq_dead_letter"]["last_error"]
    assert pgq.dead_letter_origins(dlq) == {q.name: 1}
    pgq.release_leases(dlq, [dead])
    assert pgq.redrive(dlq) == 1
    assert pgq.read_by_id(q, msg_id) is not None


def test_redrive_origins_moves_only_messages_that_failed_on_those_queues(make_queue):
    dlq = make_queue()
    a = make_queue(max_retries=0, dead_letter_queue=dlq)
    b = make_queue(max_retries=0, dead_letter_queue=dlq)
    (from_a,) = _dead_letter(a, dlq, ["a"])
    pgq.send(dlq, "sent to the DLQ directly: no origin")
    pgq.send_batch(b, ["b1", "b2"])
    for m in pgq.read(b, qty=2):
        pgq.nack(b, m.receipt)
    assert pgq.dead_letter_origins(dlq) == {a.name: 1, b.name: 2}
    assert pgq.redrive(dlq, origins=[a.name]) == 1
    assert pgq.read_by_id(a, from_a) is not None
    assert pgq.redrive(dlq, origins=[]) == 0
    assert pgq.redrive(dlq) == 2  # the one without an origin stays
    assert pgq.metrics(dlq).queue_length == 1
    assert pgq.dead_letter_origins(dlq) == {}
    with pytest.raises(pgq.InvalidArgument):
        pgq.redrive(dlq, origins=a.name)
    with pytest.raises(pgq.InvalidName):
        pgq.redrive(dlq, origins=["not a name"])


def test_redrive_ignores_a_dead_letter_header_a_sender_wrote(make_queue):
    """The origin is server-side: a header naming a queue does not send anything there."""
    from django.db import connection

    dlq, victim = make_queue(), make_queue()
    msg_id = pgq.send(dlq, "injected")
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE pgq_message SET headers = jsonb_build_object('pgq_dead_letter', "
            "jsonb_build_object('original_queue', %s::text)) WHERE msg_id = %s",
            [victim.name, msg_id],
        )
    assert pgq.redrive(dlq) == 0
    assert pgq.metrics(victim).queue_length == 0


def test_replay_sends_copies_of_archived_messages_with_reserved_headers_replaced(make_queue):
    q, elsewhere = make_queue(), make_queue()
    dlq = make_queue()
    pgq.alter_queue(q, dead_letter_queue=dlq, max_retries=0)
    msg_id = pgq.send(q, {"n": 1}, headers={"trace": "t"}, label="l", priority=3)
    (m,) = pgq.read(q)
    pgq.nack(q, m.receipt, error="boom")  # dead-lettered: the copy carries pgq_dead_letter
    (dead,) = pgq.read(dlq)
    pgq.archive(dlq, dead.receipt)
    (copy_id,) = pgq.replay(dlq, [msg_id, 999_999_999], to=elsewhere)
    copy = pgq.read_by_id(elsewhere, copy_id)
    assert copy.message == {"n": 1} and copy.label == "l" and copy.priority == 3
    assert copy.headers == {"trace": "t", "pgq_replayed_from": msg_id}
    assert pgq.replay(dlq, []) == []
    for bad in ("1", [1.5], ["²"]):
        with pytest.raises(pgq.InvalidArgument):
            pgq.replay(dlq, bad)


def test_rescue_archives_as_dead_without_a_dlq_and_spares_live_leases(make_queue):
    q = make_queue(max_retries=0)
    held = pgq.send(q, 1)
    pgq.read(q, vt=60)  # still held by a live consumer
    expired = pgq.send(q, 2)
    pgq.read(q, vt=0)  # its consumer "crashed": the lease ran out at once
    assert upkeep.dead_letter_expired_leases() == 1
    assert ArchivedMessage.objects.get(msg_id=expired).outcome == "dead"
    assert pgq.read_by_id(q, held) is not None


def test_register_callback_validates_the_dotted_path(queue):
    pgq.register_callback(queue, "json.dumps")
    assert pgq.get_queue(queue).callback == "json.dumps"
    with pytest.raises(pgq.InvalidArgument):
        pgq.register_callback(queue, "no.such.module.func")
    with pytest.raises(pgq.InvalidArgument):
        pgq.register_callback(queue, "pgq_django.__version__")
    assert pgq.get_queue(queue).callback == "json.dumps"
    pgq.unregister_callback(queue)
    assert pgq.get_queue(queue).callback == ""


def test_result_returns_json_values_as_python_values_whatever_their_type(make_queue):
    q = make_queue(archive_on_ack=True)
    for body, value in [("text body", "done"), (["a", 1], {"k": [1, 2]}), (7, None)]:
        msg_id = pgq.send(q, body, headers={"h": "v"})
        [m] = pgq.read(q)
        assert pgq.complete(q, m.receipt, result=value) is True
        found = pgq.result(msg_id)
        assert (found.message, found.result, found.headers) == (body, value, {"h": "v"})
