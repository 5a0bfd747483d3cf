"""Queue lifecycle: create, alter, drop, purge, list, pause/resume, metrics."""

from __future__ import annotations

from datetime import timedelta

import pytest

import pgq_django as pgq
from pgq_django.models import ArchivedMessage, Message, Queue


def test_create_queue_applies_defaults_and_options(db, queue_name):
    q = pgq.create_queue(queue_name, visibility_timeout=timedelta(minutes=2), max_retries=3)
    assert q.visibility_timeout == 120
    assert q.max_retries == 3
    assert q.retention == 14 * 24 * 3600
    assert q.max_message_size == 1024 * 1024
    assert not q.fifo


def test_a_fifo_suffix_makes_a_fifo_queue(db):
    assert pgq.create_queue("orders.fifo").fifo


def test_creating_an_existing_queue_raises_and_keeps_the_first(db, queue_name):
    pgq.create_queue(queue_name, visibility_timeout=5)
    with pytest.raises(pgq.QueueAlreadyExists):
        pgq.create_queue(queue_name, visibility_timeout=99)
    assert Queue.objects.get(name=queue_name).visibility_timeout == 5


@pytest.mark.parametrize(
    "name", ["", "has space", "x" * 81, "semi;colon", "a.b", "q.fifo.fifo", None, 42, "ünï"]
)
def test_invalid_queue_names_are_rejected_without_creating_anything(db, name):
    with pytest.raises(pgq.InvalidName):
        pgq.create_queue(name)
    assert Queue.objects.count() == 0


@pytest.mark.parametrize(
    "options",
    [
        {"visibility_timeout": -1},
        {"visibility_timeout": float("nan")},
        {"visibility_timeout": "30"},
        {"delivery_delay": True},
        {"retention": 0},
        {"max_retries": -1},
        {"max_message_size": 0},
        {"backoff": "quadratic"},
        {"archive_on_ack": "yes"},
        {"colour": "blue"},
        {"dead_letter_queue": "no_such_queue"},
    ],
)
def test_invalid_queue_settings_raise_a_pgq_error_and_create_nothing(db, queue_name, options):
    with pytest.raises(pgq.PgqError) as caught:
        pgq.create_queue(queue_name, **options)
    assert caught.value.message
    assert not Queue.objects.filter(name=queue_name).exists()


def test_alter_queue_changes_only_the_given_settings(queue):
    altered = pgq.alter_queue(queue.name, visibility_timeout=7, backoff="linear")
    fresh = Queue.objects.get(pk=queue.pk)
    assert (altered.visibility_timeout, fresh.visibility_timeout, fresh.backoff) == (7, 7, "linear")
    assert fresh.max_retries == queue.max_retries


def test_alter_queue_rejects_bad_values_and_unknown_queues(queue):
    with pytest.raises(pgq.InvalidArgument):
        pgq.alter_queue(queue.name, visibility_timeout=-3)
    with pytest.raises(pgq.InvalidArgument):
        pgq.alter_queue(queue.name, dead_letter_queue=queue.name)
    with pytest.raises(pgq.QueueNotFound):
        pgq.alter_queue("missing_queue", visibility_timeout=3)
    assert Queue.objects.get(pk=queue.pk).visibility_timeout == 30


def test_drop_queue_removes_its_messages_and_archive(queue):
    ids = pgq.send_batch(queue, [1, 2, 3])
    pgq.archive(queue, ids[0])
    assert pgq.drop_queue(queue.name) is True
    assert not Message.objects.filter(msg_id__in=ids).exists()
    assert not ArchivedMessage.objects.filter(msg_id__in=ids).exists()
    assert pgq.drop_queue(queue.name) is False
    with pytest.raises(pgq.QueueNotFound):
        pgq.send(queue.name, 1)


def test_purge_removes_pending_and_leased_messages_of_that_queue_only(make_queue):
    a, b = make_queue(), make_queue()
    pgq.send_batch(a, [1, 2, 3])
    pgq.send(b, "keep")
    pgq.read(a)
    assert pgq.purge_queue(a) == 3
    assert pgq.metrics(a).queue_length == 0
    assert pgq.metrics(b).queue_length == 1
    with pytest.raises(pgq.QueueNotFound):
        pgq.purge_queue("nope")


def test_list_queues_is_sorted_by_name(db):
    for name in ("b_q", "a_q", "c_q"):
        pgq.create_queue(name)
    assert [q.name for q in pgq.list_queues()] == ["a_q", "b_q", "c_q"]


def test_a_paused_queue_accepts_sends_but_refuses_reads_until_resumed(queue):
    pgq.pause_queue(queue)
    msg_id = pgq.send(queue, "while paused")
    with pytest.raises(pgq.QueuePaused):
        pgq.read(queue)
    with pytest.raises(pgq.QueuePaused):
        pgq.pop(queue)
    pgq.resume_queue(queue)
    assert [m.msg_id for m in pgq.read(queue)] == [msg_id]


def test_metrics_count_length_in_flight_and_totals(queue):
    pgq.send_batch(queue, ["a", "b", "c"])
    leased = pgq.read(queue)
    pgq.delete(queue, leased[0].msg_id)
    m = pgq.metrics(queue)
    assert (m.queue_name, m.queue_length, m.total_messages, m.in_flight) == (queue.name, 2, 3, 0)
    pgq.read(queue)
    m = pgq.metrics(queue.name)
    assert m.in_flight == 1
    assert m.oldest_msg_age_sec >= m.newest_msg_age_sec >= 0
    assert m.scrape_time is not None


def test_metrics_of_an_empty_queue_have_no_ages(queue):
    m = pgq.metrics(queue)
    assert (m.queue_length, m.oldest_msg_age_sec, m.newest_msg_age_sec) == (0, None, None)


def test_metrics_all_reports_every_queue(make_queue):
    a, b = make_queue(), make_queue()
    pgq.send(a, 1)
    found = {m.queue_name: m.queue_length for m in pgq.metrics_all()}
    assert found == {a.name: 1, b.name: 0}
    with pytest.raises(pgq.QueueNotFound):
        pgq.metrics("nope")


def test_compacting_counters_keeps_totals_and_per_minute_history(queue):
    from datetime import timedelta

    from django.utils import timezone

    from pgq_django.models import QueueCounter

    for _ in range(5):
        pgq.send(queue, "m")
    two_minutes_ago = timezone.now() - timedelta(minutes=2)
    QueueCounter.objects.filter(queue=queue).update(at=two_minutes_ago)
    pgq.send(queue, "this minute")
    before = pgq.metrics(queue).total_messages

    removed, written = Message.objects.compact_counters()
    assert (removed, written) == (5, 1)
    assert pgq.metrics(queue).total_messages == before == 6
    assert QueueCounter.objects.filter(queue=queue, kind="sent").count() == 2
    assert Message.objects.compact_counters() == (0, 0)


def test_dead_letter_cycles_are_refused_and_change_nothing(make_queue):
    a, b, c = make_queue(), make_queue(), make_queue()
    pgq.alter_queue(a, dead_letter_queue=b)
    pgq.alter_queue(b, dead_letter_queue=c)
    for queue, target in ((a, a), (b, a), (c, a), (c, b)):
        with pytest.raises(pgq.InvalidArgument, match="cycle"):
            pgq.alter_queue(queue, dead_letter_queue=target, visibility_timeout=7)
    assert [
        (q.dead_letter_queue_id, q.visibility_timeout)
        for q in (pgq.get_queue(a), pgq.get_queue(b), pgq.get_queue(c))
    ] == [(b.pk, a.visibility_timeout), (c.pk, b.visibility_timeout), (None, c.visibility_timeout)]
    # A chain without a cycle, and a DLQ shared by two queues, are fine.
    assert pgq.alter_queue(c, dead_letter_queue=make_queue()).dead_letter_queue_id is not None
    assert pgq.alter_queue(make_queue(), dead_letter_queue=c).dead_letter_queue == c


def test_concurrent_changes_cannot_close_a_dead_letter_cycle_together(transactional_db):
    """Two threads each point one queue at the other; one of them must be refused."""
    import threading

    from django.db import connections

    a, b = pgq.create_queue("cycle_a"), pgq.create_queue("cycle_b")
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def point(src, dst):
        try:
            barrier.wait()
            pgq.alter_queue(src, dead_letter_queue=dst)
        except pgq.InvalidArgument as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=point, args=p) for p in ((a, b), (b, a))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(errors) == 1
    links = {q.name: q.dead_letter_queue_id for q in pgq.list_queues()}
    assert not (links["cycle_a"] == b.pk and links["cycle_b"] == a.pk)


@pytest.mark.parametrize("name, fifo", [("kind_x.fifo", False), ("kind_y", True)])
def test_a_queues_kind_cannot_change_after_creation(db, name, fifo):
    queue = pgq.create_queue(name)
    with pytest.raises(pgq.InvalidArgument, match="kind cannot change"):
        pgq.alter_queue(queue, fifo=fifo, visibility_timeout=9)
    fresh = pgq.get_queue(name)
    assert (fresh.fifo, fresh.visibility_timeout) == (not fifo, queue.visibility_timeout)
    assert pgq.alter_queue(queue, fifo=not fifo).fifo is (not fifo)  # unchanged value: fine
