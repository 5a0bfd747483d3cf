"""A send without options that commits on its own runs SEND_ONE, one INSERT whose option
values are constants in its text instead of parameters, and SEND_PLAIN only when that
INSERT could not send, to learn why (docs/performance.md). These pin down that it
stores what a send with the options spelled out stores, refuses what that send refuses, and
wakes and commits as SEND_PLAIN did. The per-test transaction of ``db`` would route every
send to SEND, so these tests commit (``transaction=True``).
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.db.models import Sum
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

import pgq_django as pgq
from pgq_django.models import Message, QueueCounter
from pgq_django.store import db, notify, server_functions
from pgq_django.store.sql import messages
from pgq_django.store.sql import server_functions as functions
from tests.conftest import statements_run

pytestmark = pytest.mark.django_db(transaction=True)
# The autocommit statements of a process that runs the store's services (a worker's).
RUNS_SERVICES = True

# Every column a send writes from its options or the queue's settings.
_FIELDS = (
    "headers",
    "attributes",
    "label",
    "priority",
    "read_ct",
    "group_id",
    "dedup_id",
    "max_retries",
    "retry_delay",
    "cancel_requested",
)


def _stored(msg_id: int) -> tuple[Any, ...]:
    m = Message.objects.get(msg_id=msg_id)
    return (
        m.message,
        *(getattr(m, f) for f in _FIELDS),
        round((m.vt - m.enqueued_at).total_seconds()),
        round((m.expires_at - m.enqueued_at).total_seconds()),
    )


@pytest.mark.parametrize("delivery_delay", [0, 7])
def test_a_send_without_options_stores_what_the_options_defaults_store(
    queue_name: str, delivery_delay: int
) -> None:
    q = pgq.create_queue(queue_name, delivery_delay=delivery_delay, retention=3600)
    with statements_run() as seen:
        plain = pgq.send(q, {"n": 1})
    assert seen == [messages.SEND_ONE]
    spelled = pgq.send(
        q,
        {"n": 1},
        headers={},
        attributes=None,
        label=None,
        priority=0,
        delay=None,
        group=None,
        max_retries=None,
        retry_delay=None,
    )
    with transaction.atomic(), statements_run() as seen:
        counted = pgq.send(q, {"n": 1})  # with its counter row, in the caller's transaction
    assert seen == [messages.SEND_ONE_COUNTED]
    with statements_run() as seen:
        delayed = pgq.send(q, {"n": 1}, delay=0)  # an option: SEND_UNCOUNTED
    assert seen == [messages.SEND_UNCOUNTED]
    assert _stored(plain) == _stored(spelled) == _stored(counted)
    assert _stored(plain)[-2:] == (delivery_delay, 3600)
    assert _stored(delayed)[-2] == 0
    assert plain < spelled < counted < delayed
    assert pgq.metrics(q).total_messages == 4


def test_a_send_without_options_refuses_what_any_send_refuses(
    queue_name: str, make_queue: Any
) -> None:
    """SEND_ONE answers nothing when it cannot send; SEND_PLAIN then says why (and the
    API's error may look the queue up once more to word it)."""
    refused = [messages.SEND_ONE, messages.SEND_PLAIN]
    with statements_run() as seen, pytest.raises(pgq.QueueNotFound):
        pgq.send(queue_name, "nowhere")
    assert seen[:2] == refused
    q = pgq.create_queue(queue_name, max_message_size=1024)
    with statements_run() as seen, pytest.raises(pgq.MessageTooLarge, match="1024"):
        pgq.send(q, "x" * 2000)
    assert seen[:2] == refused
    bounded = make_queue(max_length=1)
    first = pgq.send(bounded, "fits")
    with statements_run() as seen, pytest.raises(pgq.QueueFull):
        pgq.send(bounded, "no room")
    assert seen[:1] == [messages.SEND_PLAIN]  # known to have max_length: no SEND_ONE
    assert [m.msg_id for m in pgq.read(bounded, qty=10)] == [first]
    assert pgq.metrics(q).total_messages == 0
    assert pgq.metrics(bounded).total_messages == 1


def test_a_queue_given_max_length_later_is_not_overfilled_by_a_send_without_options(
    queue_name: str,
) -> None:
    """This process last sent to the queue without max_length, so its next send tries
    SEND_ONE first, which must not send into a queue that has one by now."""
    q = pgq.create_queue(queue_name)
    with statements_run() as seen:
        first = pgq.send(q, "unbounded")
    assert seen == [messages.SEND_ONE]
    pgq.alter_queue(q, max_length=1)
    with statements_run() as seen, pytest.raises(pgq.QueueFull):
        pgq.send(q, "no room")
    assert seen[:2] == [messages.SEND_ONE, messages.SEND_PLAIN]
    pgq.alter_queue(q, max_length=None)
    with statements_run() as seen:
        pgq.send(q, "room again")  # SEND_PLAIN, which sees max_length gone
    with statements_run() as seen_next:
        pgq.send(q, "and again")
    assert (seen, seen_next) == ([messages.SEND_PLAIN], [messages.SEND_ONE])
    assert pgq.metrics(q).total_messages == 3
    assert pgq.read(q, qty=10)[0].msg_id == first


def _sent_counted(queue: Any) -> int:
    """The 'sent' counter rows of a queue that only sends inside transactions (so no
    process tally of autocommit sends can add to them)."""
    rows = QueueCounter.objects.filter(queue=queue, kind="sent")
    return int(rows.aggregate(n=Sum("n"))["n"] or 0)


def test_a_send_inside_a_transaction_counts_itself_there_and_rolls_back_with_it(
    make_queue: Any,
) -> None:
    q = make_queue()
    with pytest.raises(RuntimeError), transaction.atomic():
        with statements_run() as seen:
            pgq.send(q, "rolled back")
        assert seen == [messages.SEND_ONE_COUNTED]
        assert _sent_counted(q) == 1  # written by the statement, in this transaction
        raise RuntimeError("roll back")
    assert (pgq.metrics(q).total_messages, _sent_counted(q)) == (0, 0)
    with transaction.atomic():
        kept = pgq.send(q, "kept")
    assert (pgq.metrics(q).total_messages, _sent_counted(q)) == (1, 1)
    assert pgq.read(q)[0].msg_id == kept


def test_a_send_inside_a_transaction_into_a_bounded_queue(make_queue: Any) -> None:
    """SEND_ONE_COUNTED never sends into a queue with max_length; SEND_PLAIN_COUNTED checks
    for room, and once the queue is known to be bounded runs alone."""
    q = make_queue(max_length=1)
    with transaction.atomic(), statements_run() as seen:
        first = pgq.send(q, "fits")
    assert seen == [messages.SEND_ONE_COUNTED, messages.SEND_PLAIN_COUNTED]
    with transaction.atomic(), statements_run() as seen, pytest.raises(pgq.QueueFull):
        pgq.send(q, "no room")
    assert seen[:1] == [messages.SEND_PLAIN_COUNTED]
    assert [m.msg_id for m in pgq.read(q, qty=10)] == [first]
    assert _sent_counted(q) == 1


def test_a_send_without_options_wakes_listeners_only_for_a_visible_message(
    queue_name: str, make_queue: Any
) -> None:
    """The wake-up SEND_ONE's RETURNING sends: for a message visible at once, not for one a
    queue's delivery_delay holds back (its readers find it by polling, as with SEND_PLAIN)."""
    delayed = make_queue(delivery_delay=30)
    at_once = pgq.create_queue(queue_name)
    listener = notify.Listener()
    try:
        with override_settings(PGQ={"NOTIFY_INTERVAL": 0}), statements_run() as seen:
            pgq.send(delayed, "later")
            pgq.send(at_once, "now")
        assert seen == [messages.SEND_ONE] * 2
        payloads: list[str] = []
        give_up = time.monotonic() + 60  # only guards against a hang
        while queue_name not in payloads and time.monotonic() < give_up:
            # Delivered in commit order: the delayed send's would have come first.
            payloads += [n.payload for n in listener.conn.notifies(timeout=5, stop_after=1)]
    finally:
        listener.close()
    assert queue_name in payloads
    assert delayed.name not in payloads


@pytest.mark.parametrize("durable", [True, False])
def test_send_one_relaxes_the_commit_of_a_non_durable_queue_only(
    make_queue: Any, durable: bool
) -> None:
    """Run by hand inside a transaction (the manager runs it only in autocommit) to see the
    setting its RETURNING leaves for the commit: off for a non-durable queue's message."""
    q = make_queue(durable=durable)
    params = {"queue": q.name, "size": 1, "channel": "unheard", "notify": False, "body": "1"}
    with transaction.atomic():
        row = db.run_one(messages.SEND_ONE, params)
        with connection.cursor() as cursor:
            cursor.execute("SHOW synchronous_commit")
            setting = cursor.fetchone()[0]
    assert (row.relaxed_commit, setting) == ((None, "on") if durable else ("off", "off"))
    assert row.notified is False
    assert pgq.read(q)[0].msg_id == row.msg_id


def test_a_send_without_options_into_a_non_durable_queue(queue_name: str) -> None:
    q = pgq.create_queue(queue_name, durable=False)
    msg_id = pgq.send(q, {"n": 1})
    [m] = pgq.read(q)
    assert (m.msg_id, m.message, m.headers, m.priority) == (msg_id, {"n": 1}, {}, 0)


def test_behind_a_pooler_a_send_without_options_runs_its_function(queue_name: str) -> None:
    server_functions.forget()
    q = pgq.create_queue(queue_name, retention=timedelta(hours=1))
    try:
        with (
            override_settings(PGQ={"PREPARED_STATEMENTS": False}),
            CaptureQueriesContext(connection) as queries,
        ):
            msg_id = pgq.send(q, {"n": 1})
    finally:
        server_functions.forget()
    name = functions.function_name(messages.SEND_ONE)
    assert [name in query["sql"] for query in queries.captured_queries] == [True]
    assert _stored(msg_id)[-1] == 3600
