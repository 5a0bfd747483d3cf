"""Limits that keep one caller from exhausting the database or the process.

max_length backpressure (QueueFull, or waiting for room), the byte budgets of reads and
batches, capped waits, and limit settings out of range. Each refusal changes nothing. The
rate and concurrency limits themselves are in test_rate_limits.py.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection, connections, transaction
from django.test import override_settings

import pgq_django as pgq
from pgq_django.models import Message, QueueCounter
from pgq_django.rest.exceptions import http_status
from pgq_django.store.server_functions import statement_run_by
from tests.conftest import wait_until


def contents(queue: Any) -> tuple[list[Any], int]:
    messages = list(
        Message.objects.filter(queue=queue).order_by("msg_id").values_list("msg_id", "message")
    )
    return messages, QueueCounter.objects.filter(queue=queue).count()


# -- max_length -------------------------------------------------------------------------


def test_a_full_queue_refuses_sends_and_batches_and_changes_nothing(make_queue):
    q = make_queue(max_length=3)
    pgq.send_batch(q, [1, 2])
    before = contents(q)
    with pytest.raises(pgq.QueueFull) as caught:
        pgq.send_batch(q, [3, 4])  # only one would fit: none is sent
    assert caught.value.details == {"queue": q.name, "max_length": 3}
    assert http_status(caught.value) == 409  # what the REST API answers
    assert contents(q) == before
    assert pgq.send(q, 3) > 0
    with pytest.raises(pgq.QueueFull):
        pgq.send(q, 4)
    with pytest.raises(pgq.QueueFull):
        pgq.send(q, 4, dedup_id="d")
    [first] = pgq.read(q)
    with pytest.raises(pgq.QueueFull):
        pgq.send(q, 4)  # a leased message still counts…
    pgq.delete(q, first.receipt)
    assert pgq.send(q, 4) > 0  # …a deleted one does not
    assert pgq.metrics(q).queue_length == 3


def test_unbounded_queues_and_raising_the_limit_accept_more(make_queue):
    q = make_queue(max_length=1)
    pgq.send(q, 1)
    pgq.alter_queue(q, max_length=None)
    assert len(pgq.send_batch(q, list(range(50)))) == 50


def test_publish_to_a_full_bound_queue_sends_no_copy_anywhere(make_queue):
    roomy, full = make_queue(), make_queue(max_length=1)
    pgq.send(full, "already here")
    x = pgq.create_exchange("limits_fanout")
    pgq.bind_queue(roomy, x)
    pgq.bind_queue(full, x)
    with pytest.raises(pgq.QueueFull, match=full.name):
        pgq.publish(x, "hello")
    assert contents(roomy) == ([], 0)
    assert len(contents(full)[0]) == 1


@pytest.mark.django_db(transaction=True)
def test_send_with_wait_sends_as_soon_as_a_consumer_makes_room(queue_name):
    q = pgq.create_queue(queue_name, max_length=1)
    pgq.send(q, "first")
    with pytest.raises(pgq.QueueFull):
        pgq.send(q, "second")
    attempts = []

    def count_sends(execute, sql, params, many, context):
        if "INSERT INTO pgq_message" in statement_run_by(sql):  # a call of SEND's function too
            attempts.append(1)
        return execute(sql, params, many, context)

    def consumer():
        try:
            # The waiting send has found the queue full again (a deadline, not a guess).
            wait_until(lambda: len(attempts) >= 2, what="the waiting send's second try")
            [m] = pgq.read(q)
            pgq.delete(q, m.receipt)
        finally:
            connections.close_all()

    helper = threading.Thread(target=consumer)
    helper.start()
    with connection.execute_wrapper(count_sends):
        msg_id = pgq.send(q, "second", wait=20)
    helper.join(timeout=30)
    assert len(attempts) >= 3  # it waited and tried again
    assert [m for _id, m in contents(q)[0]] == ["second"]
    assert contents(q)[0][0][0] == msg_id


def test_send_wait_is_capped_and_refused_inside_atomic(make_queue):
    q = make_queue(max_length=1)
    with pytest.raises(pgq.InvalidArgument, match="at most 20"):
        pgq.send(q, 1, wait=21)
    with pytest.raises(pgq.InvalidArgument, match="atomic"), transaction.atomic():
        pgq.send(q, 1, wait=1)
    assert contents(q) == ([], 0)


@pytest.mark.parametrize(("setting", "bad"), [("rate_limit", 0), ("concurrency_limit", 0)])
def test_a_limit_out_of_range_is_refused_and_changes_nothing(make_queue, queue_name, setting, bad):
    q = make_queue()
    with pytest.raises(pgq.InvalidArgument):
        pgq.alter_queue(q, **{setting: bad})
    with pytest.raises(pgq.InvalidArgument):
        pgq.create_queue(queue_name, **{setting: bad})
    assert getattr(pgq.get_queue(q), setting) is None
    assert not pgq.Queue.objects.filter(name=queue_name).exists()
    assert getattr(pgq.alter_queue(q, **{setting: 2}), setting) == 2
    assert getattr(pgq.alter_queue(q, **{setting: None}), setting) is None


# -- byte budgets ------------------------------------------------------------------------


def test_read_and_pop_stop_at_the_byte_budget_of_the_largest_possible_bodies(make_queue):
    q = make_queue(max_message_size=1024 * 1024)
    pgq.send_batch(q, [{"n": i} for i in range(10)])
    with override_settings(PGQ={"READ_MAX_BYTES": 3 * 1024 * 1024}):
        assert len(pgq.read(q, qty=10)) == 3
        assert len(pgq.pop(q, qty=10)) == 3
    small = make_queue(max_message_size=1024)
    pgq.send_batch(small, list(range(10)))
    with override_settings(PGQ={"READ_MAX_BYTES": 3 * 1024 * 1024}):
        assert len(pgq.read(small, qty=10)) == 10  # small bodies: qty decides
    with pytest.raises(pgq.InvalidArgument, match="qty"):
        pgq.read(q, qty=1001)


def test_a_batch_over_the_byte_budget_is_refused_before_it_reaches_postgresql(queue):
    # 65 bodies of 1 MiB each: one more than the default 64 MiB budget of a batch.
    body = "x" * (1024 * 1024 - 2)
    with pytest.raises(pgq.MessageTooLarge, match="SEND_BATCH_MAX_BYTES"):
        pgq.send_batch(queue, [body] * 65)
    assert contents(queue) == ([], 0)
    with override_settings(PGQ={"SEND_BATCH_MAX_MESSAGES": 5}):
        with pytest.raises(pgq.InvalidArgument, match="at most 5 messages"):
            pgq.send_batch(queue, range(6))
        assert len(pgq.send_batch(queue, range(5))) == 5


@pytest.mark.django_db(transaction=True)
def test_read_with_poll_is_capped_and_refused_inside_atomic(queue_name):
    q = pgq.create_queue(queue_name)
    with pytest.raises(pgq.InvalidArgument, match="at most 20"):
        pgq.read_with_poll(q, max_poll_seconds=100 * 365 * 24 * 3600)
    pgq.send(q, "x")
    with transaction.atomic():
        with pytest.raises(pgq.InvalidArgument, match="atomic"):
            pgq.read_with_poll(q, max_poll_seconds=5)
        assert [m.message for m in pgq.read_with_poll(q, max_poll_seconds=0)] == ["x"]


def test_premake_is_capped(db):
    from django.core.management import CommandError, call_command

    from pgq_django import partitions

    with pytest.raises(pgq.InvalidArgument, match="premake"):
        partitions.premake_partitions(101, dry_run=True)
    with pytest.raises(CommandError, match="at most 100"):
        call_command("pgq_partitions", "--premake", "1000000", "--dry-run")


# -- metrics -----------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_metrics_beyond_the_exact_count_report_an_estimate_not_below_it(queue_name):
    q = pgq.create_queue(queue_name)
    pgq.send_batch(q, list(range(300)))
    leased = pgq.read(q, qty=7, vt=600)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE pgq_message")
    exact = pgq.metrics(q)
    assert (exact.queue_length, exact.in_flight) == (300, 7)
    with override_settings(PGQ={"METRICS_EXACT_COUNT": 50}):
        estimated = pgq.metrics(q)
        everyone = {m.queue_name: m for m in pgq.metrics_all()}
    assert 50 <= estimated.queue_length <= 600  # ANALYZE's estimate, bounded below
    assert estimated.in_flight == len(leased)  # leases sit at the head of the queue
    assert estimated.oldest_msg_age_sec == pytest.approx(exact.oldest_msg_age_sec, abs=5)
    assert everyone[q.name].queue_length == estimated.queue_length


def test_the_default_budget_keeps_a_read_of_100_whole_at_the_default_message_size(make_queue):
    q = make_queue()  # max_message_size defaults to 1 MiB
    pgq.send_batch(q, list(range(150)))
    assert len(pgq.read(q, qty=100)) == 100
    assert len(pgq.pop(q, qty=100)) == 50
