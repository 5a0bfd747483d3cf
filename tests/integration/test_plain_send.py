"""A send without options that commits on its own runs SEND_PLAIN, whose option values are
constants in its text instead of parameters (docs/performance.md, issue 13). These pin down
that it stores what a send with the options spelled out stores, and refuses what that send
refuses. The per-test transaction of ``db`` would route every send to SEND, so these tests
commit (``transaction=True``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

import pgq_django as pgq
from pgq_django import server_functions
from pgq_django.models import Message
from pgq_django.sql import messages
from pgq_django.sql import server_functions as functions
from tests.conftest import statements_run

pytestmark = pytest.mark.django_db(transaction=True)

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
    assert seen == [messages.SEND_PLAIN]
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
    with transaction.atomic():
        counted = pgq.send(q, {"n": 1})  # SEND, with the defaults as parameters
    with statements_run() as seen:
        delayed = pgq.send(q, {"n": 1}, delay=0)  # an option: SEND_UNCOUNTED
    assert seen == [messages.SEND_UNCOUNTED]
    assert _stored(plain) == _stored(spelled) == _stored(counted)
    assert _stored(plain)[-2:] == (delivery_delay, 3600)
    assert _stored(delayed)[-2] == 0
    assert plain < spelled < counted < delayed
    assert pgq.metrics(q).total_messages == 4


def test_a_send_without_options_refuses_what_any_send_refuses(queue_name: str) -> None:
    with pytest.raises(pgq.QueueNotFound):
        pgq.send(queue_name, "nowhere")
    q = pgq.create_queue(queue_name, max_message_size=1024, max_length=1)
    with pytest.raises(pgq.MessageTooLarge, match="1024"):
        pgq.send(q, "x" * 2000)
    first = pgq.send(q, "fits")
    with pytest.raises(pgq.QueueFull):
        pgq.send(q, "no room")
    assert [m.msg_id for m in pgq.read(q, qty=10)] == [first]


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
    name = functions.function_name(messages.SEND_PLAIN)
    assert [name in query["sql"] for query in queries.captured_queries] == [True]
    assert _stored(msg_id)[-1] == 3600
