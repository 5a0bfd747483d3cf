"""``pgq.request``'s timeout says why no reply came: nobody took the request, or someone did
and did not answer. The first is almost always a queue no worker serves, and says so."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection

import pgq_django as pgq
from pgq_django.models import ArchivedMessage, Message

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_request_nobody_leases_says_no_worker_serves_its_queue(make_queue: Any) -> None:
    q, replies = make_queue(), make_queue()
    with pytest.raises(pgq.RequestTimeout) as timed_out:
        pgq.request(q, {"n": 1}, timeout=0.2, reply_to=replies.name)
    text = str(timed_out.value)
    assert f"no consumer leased it from {q.name!r}" in text, text
    assert f"pgq_worker --queue {q.name}" in text, text
    # The refusal leaves nothing behind, as before.
    (request,) = ArchivedMessage.objects.filter(queue=q)
    assert request.outcome == "cancelled"
    assert not Message.objects.filter(queue__in=[q, replies]).exists()


def test_a_request_leased_but_unanswered_says_it_was_taken(make_queue: Any) -> None:
    q, replies = make_queue(), make_queue()
    leased: list[int] = []

    def consumer_without_reply() -> None:
        try:
            found = pgq.read_with_poll(q.name, max_poll_seconds=20)
            leased.extend(m.msg_id for m in found)
        finally:
            connection.close()

    thread = threading.Thread(target=consumer_without_reply)
    thread.start()
    try:
        with pytest.raises(pgq.RequestTimeout) as timed_out:
            pgq.request(q, {"n": 1}, timeout=5, reply_to=replies.name)
    finally:
        thread.join(timeout=60)
    assert len(leased) == 1
    text = str(timed_out.value)
    assert "leased 1 time" in text and "no worker" not in text, text
