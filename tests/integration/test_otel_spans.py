"""The spans, links and metrics of the OpenTelemetry messaging conventions, in this process.

The real SDK with its in-memory exporters (tests/otel_support.py); the worker's part runs
through ``pgq_django.testing.drain``, the worker's own handling of a message.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from django.contrib.auth import get_user_model
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode

import pgq_django as pgq
from pgq_django import telemetry, validation
from pgq_django.telemetry import carriers
from pgq_django.testing import drain
from pgq_django.worker.loop import Worker
from tests.otel_support import InMemory, hex_trace, in_memory, traceparent

pytestmark = pytest.mark.django_db(transaction=True)

HANDLER = "tests.otel_support.handle"


@pytest.fixture
def otel(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemory]:
    found, live = in_memory()
    monkeypatch.setattr(telemetry, "_live", live)
    yield found


def test_a_send_is_one_producer_span_whose_context_the_message_keeps(otel, make_queue):
    q = make_queue()
    with otel.tracer.start_as_current_span("GET /signup", kind=SpanKind.SERVER) as request:
        msg_id = pgq.send(q, {"to": "ada@example.com"})
    (send,) = otel.finished(f"send {q.name}")
    assert send.kind is SpanKind.PRODUCER
    assert send.parent.span_id == request.get_span_context().span_id
    assert dict(send.attributes) == {
        "messaging.system": "pgq_django",
        "messaging.operation.name": "send",
        "messaging.operation.type": "send",
        "messaging.destination.name": q.name,
        "messaging.message.id": str(msg_id),
    }
    stored = pgq.read_by_id(q, msg_id).headers["pgq_trace"]
    assert stored["traceparent"] == traceparent(send)


def test_a_batch_is_one_span_with_its_count_and_every_message_keeps_its_context(otel, make_queue):
    q = make_queue()
    ids = pgq.send_batch(q, [1, 2, 3], headers={"kind": "n"})
    (send,) = otel.finished()
    assert send.attributes["messaging.batch.message_count"] == 3
    assert "messaging.message.id" not in send.attributes
    for msg_id in ids:
        headers = pgq.read_by_id(q, msg_id).headers
        assert headers["kind"] == "n"
        assert headers["pgq_trace"]["traceparent"] == traceparent(send)


def test_without_an_sdk_a_send_stores_no_context_and_makes_no_span(make_queue):
    q = make_queue()
    assert telemetry._on() is None  # the suite never sets a global tracer provider
    msg_id = pgq.send(q, {"n": 1}, headers={"a": 1})
    assert pgq.read_by_id(q, msg_id).headers == {"a": 1}


def test_a_receive_links_to_each_creation_context_and_an_empty_one_makes_no_span(otel, make_queue):
    q = make_queue()
    pgq.send_batch(q, ["a", "b"])
    (send,) = otel.finished()
    assert pgq.read(q, qty=5) and pgq.read(q) == []
    (receive,) = otel.finished(f"receive {q.name}")
    assert receive.kind is SpanKind.CLIENT
    assert receive.attributes["messaging.batch.message_count"] == 2
    assert [link.context.span_id for link in receive.links] == [send.context.span_id] * 2
    consumed = otel.metric_points("messaging.client.consumed.messages")
    assert sum(p.value for p in consumed) == 2


def test_processing_links_to_the_send_and_settles_with_an_ack(otel, make_queue, caplog):
    q = make_queue()
    pgq.register_callback(q, HANDLER)
    with otel.tracer.start_as_current_span("view"):
        msg_id = pgq.send(q, {"n": 1})
    (send,) = otel.finished(f"send {q.name}")
    with caplog.at_level(logging.DEBUG, logger="pgq_django.worker.messages"):
        assert drain(q.name).processed == 1
    (process,) = otel.finished(f"process {q.name}")
    assert process.kind is SpanKind.CONSUMER
    assert process.parent is None  # a trace of its own, linked to the message's creation
    assert [link.context.span_id for link in process.links] == [send.context.span_id]
    assert process.attributes["messaging.message.id"] == str(msg_id)
    (ack,) = otel.finished(f"ack {q.name}")
    assert ack.parent.span_id == process.context.span_id
    assert ack.attributes["messaging.operation.type"] == "settle"
    # The worker's log line of the message carries the process span's ids.
    (line,) = [r for r in caplog.records if "event=message_acked" in r.getMessage()]
    assert line.trace_id == hex_trace(process)
    assert line.span_id == f"{process.context.span_id:016x}"
    assert otel.metric_points("messaging.process.duration")[0].count == 1


def test_processing_can_be_the_child_of_the_creation_context(otel, make_queue, settings):
    settings.PGQ = {**getattr(settings, "PGQ", {}), "TRACE_PROCESS_AS_CHILD": True}
    q = make_queue()
    pgq.register_callback(q, HANDLER)
    pgq.send(q, {"n": 1})
    drain(q.name)
    (send,) = otel.finished(f"send {q.name}")
    (process,) = otel.finished(f"process {q.name}")
    assert process.parent.span_id == send.context.span_id
    assert hex_trace(process) == hex_trace(send)


def test_a_follow_up_sent_by_a_handler_carries_the_process_context(otel, make_queue):
    first, second = make_queue(), make_queue()
    pgq.register_callback(first, HANDLER)
    pgq.send(first, {"then": second.name})
    drain(first.name)
    (process,) = otel.finished(f"process {first.name}")
    (follow_up,) = otel.finished(f"send {second.name}")
    assert follow_up.parent.span_id == process.context.span_id
    (m,) = pgq.read(second)
    assert m.headers["pgq_trace"]["traceparent"] == traceparent(follow_up)


def test_a_failure_is_recorded_then_the_dead_letter_keeps_the_creation_context(otel, make_queue):
    dlq = make_queue()
    q = make_queue(max_retries=0, dead_letter_queue=dlq.name)
    pgq.register_callback(q, HANDLER)
    msg_id = pgq.send(q, {"fail": True})
    (send,) = otel.finished(f"send {q.name}")
    assert drain(q.name).failed == 1
    (process,) = otel.finished(f"process {q.name}")
    assert process.status.status_code is StatusCode.ERROR
    assert process.attributes["error.type"] == "ValueError"
    assert [e.name for e in process.events] == ["exception"]
    (dead,) = otel.finished(f"dead_letter {q.name}")
    assert dead.attributes["messaging.operation.name"] == "dead_letter"
    assert dead.parent.span_id == process.context.span_id
    moved = pgq.read_by_id(dlq, msg_id)
    assert moved.headers["pgq_trace"]["traceparent"] == traceparent(send)
    errors = [p for p in otel.metric_points("messaging.process.duration") if p.attributes]
    assert errors[0].attributes["error.type"] == "ValueError"


def test_a_retry_is_a_nack_and_the_next_delivery_links_to_the_same_send(otel, make_queue):
    q = make_queue(max_retries=3, retry_delay=0)
    pgq.register_callback(q, HANDLER)
    pgq.send(q, {"fail": True})
    (send,) = otel.finished(f"send {q.name}")
    drain(q.name)
    nacks = otel.finished(f"nack {q.name}")
    processes = otel.finished(f"process {q.name}")
    assert len(nacks) >= 1 and len(processes) >= 2
    assert {p.links[0].context.span_id for p in processes} == {send.context.span_id}


def test_request_and_reply_share_a_conversation_id(otel, make_queue):
    q, replies = make_queue(), make_queue()
    pgq.register_callback(q, HANDLER)
    msg_id = pgq.send(q, {"n": 1}, reply_to=replies.name)
    drain(q.name)
    (process,) = otel.finished(f"process {q.name}")
    assert process.attributes["messaging.message.conversation_id"] == str(msg_id)
    (reply_send,) = otel.finished(f"send {replies.name}")
    assert reply_send.attributes["messaging.message.conversation_id"] == str(msg_id)
    assert reply_send.parent.span_id == process.context.span_id


def test_a_publish_is_one_send_span_to_the_exchange_and_each_copy_keeps_it(otel, make_queue):
    a, b = make_queue(), make_queue()
    name = "x_" + a.name
    pgq.create_exchange(name)
    pgq.bind_queue(a, name)
    pgq.bind_queue(b, name)
    ids = pgq.publish(name, {"n": 1})
    (send,) = otel.finished(f"send {name}")
    copies = [m for q in (a, b) for m in pgq.read(q)]
    assert sorted(m.msg_id for m in copies) == sorted(ids)
    for m in copies:
        assert m.headers["pgq_trace"]["traceparent"] == traceparent(send)


def test_a_forged_context_in_headers_or_body_never_becomes_the_message_context(otel, make_queue):
    q = make_queue()
    forged = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
    with pytest.raises(pgq.InvalidMessage):
        pgq.send(q, {"n": 1}, headers={"pgq_trace": {"traceparent": forged}})
    with pytest.raises(pgq.InvalidMessage):
        pgq.send_batch(q, [1], headers={"PGQ_TRACE": {}})
    pgq.register_callback(q, HANDLER)
    with otel.tracer.start_as_current_span("view"):
        pgq.send(q, {"traceparent": forged}, headers={"traceparent": forged})
    (send,) = otel.finished(f"send {q.name}")
    drain(q.name)
    (process,) = otel.finished(f"process {q.name}")
    assert [link.context.span_id for link in process.links] == [send.context.span_id]
    assert hex_trace(process) != "ab" * 16


def test_a_client_context_counts_only_for_its_own_message_without_a_server_one():
    own = "00-" + "12" * 16 + "-" + "34" * 8 + "-01"
    assert carriers.stored_context({"traceparent": own}) == {"traceparent": own}
    assert carriers.stored_context({}, {"traceparent": own}) == {"traceparent": own}
    assert carriers.stored_context({"traceparent": "00-zz"}) is None
    server = {"traceparent": "00-" + "56" * 16 + "-" + "78" * 8 + "-01"}
    assert carriers.stored_context({"traceparent": own, "pgq_trace": server}) == server


def test_the_send_span_records_a_refused_send(otel, make_queue):
    q = make_queue(max_length=1)
    pgq.send(q, 1)
    with pytest.raises(pgq.QueueFull):
        pgq.send(q, 2)
    failed = otel.finished(f"send {q.name}")[-1]
    assert failed.attributes["error.type"] == pgq.QueueFull("x").code
    assert failed.status.status_code is StatusCode.ERROR


def test_no_span_is_current_after_a_hook(otel, make_queue):
    q = make_queue()
    pgq.send(q, 1)
    pgq.read(q)
    assert not trace.get_current_span().get_span_context().is_valid


def test_a_batch_commit_gives_each_handler_its_process_span(otel, make_queue):
    q = make_queue()
    pgq.register_callback(q, HANDLER)
    ids = pgq.send_batch(q, [{"n": 1}, {"fail": True}, {"n": 3}])
    (send,) = otel.finished(f"send {q.name}")
    Worker([q.name], once=True, listen=False, lead=False, batch_size=10).drain()
    processes = otel.finished(f"process {q.name}")
    assert sorted(p.attributes["messaging.message.id"] for p in processes) == sorted(map(str, ids))
    assert {p.links[0].context.span_id for p in processes} == {send.context.span_id}
    (failed,) = [p for p in processes if p.status.status_code is StatusCode.ERROR]
    assert failed.attributes["messaging.message.id"] == str(ids[1])
    assert failed.attributes["error.type"] == "ValueError"


def test_the_admin_shows_a_messages_trace_id_and_links_it(otel, make_queue, client, settings):
    q = make_queue()
    pgq.send(q, {"n": 1})
    (send,) = otel.finished(f"send {q.name}")
    admin = get_user_model().objects.create_superuser("otel_admin", "a@example.com", "pw")
    client.force_login(admin)
    page = client.get(f"/admin/pgq_django/queue/{q.pk}/messages/")
    assert page.status_code == 200
    assert f"<code>{hex_trace(send)}</code>" in page.text
    settings.PGQ = {**settings.PGQ, "TRACE_URL": "https://jaeger.example/trace/{trace_id}"}
    page = client.get(f"/admin/pgq_django/queue/{q.pk}/messages/")
    assert f'href="https://jaeger.example/trace/{hex_trace(send)}"' in page.text


def test_a_settle_of_several_messages_counts_them(otel, make_queue):
    q = make_queue()
    pgq.send_batch(q, [1, 2, 3])
    leased = pgq.read(q, qty=3)
    assert pgq.delete(q, [m.receipt for m in leased]) and pgq.archive(q, [999_999_999]) == []
    (ack,) = otel.finished(f"ack {q.name}")
    assert ack.attributes["messaging.batch.message_count"] == 3
    assert "messaging.message.id" not in ack.attributes
    (archive,) = otel.finished(f"archive {q.name}")
    assert archive.attributes["messaging.batch.message_count"] == 1


def test_the_messaging_metrics_count_sends_and_time_operations(otel, make_queue):
    q = make_queue()
    pgq.send(q, 1)
    pgq.send_batch(q, [2, 3])
    (sent,) = otel.metric_points("messaging.client.sent.messages")
    assert sent.value == 3
    assert dict(sent.attributes) == {
        "messaging.system": "pgq_django",
        "messaging.operation.name": "send",
        "messaging.destination.name": q.name,
    }
    (duration,) = otel.metric_points("messaging.client.operation.duration")
    assert duration.count == 2 and duration.sum > 0


def test_the_body_size_is_recorded_when_asked_for(otel, make_queue, settings):
    q = make_queue()
    pgq.register_callback(q, HANDLER)
    pgq.send(q, {"to": "zoë"})
    settings.PGQ = {**settings.PGQ, "TRACE_BODY_SIZE": True}
    pgq.send(q, {"to": "zoë"})
    plain, sized = otel.finished(f"send {q.name}")
    assert "messaging.message.body.size" not in plain.attributes
    size = len(validation.body({"to": "zoë"}, None).encode())
    assert size == len('{"to":"zoë"}'.encode())
    assert sized.attributes["messaging.message.body.size"] == size
    drain(q.name)
    for process in otel.finished(f"process {q.name}"):
        assert process.attributes["messaging.message.body.size"] == size


def test_a_groups_follow_up_carries_its_creators_context(otel, make_queue):
    q, after = make_queue(), make_queue()
    with otel.tracer.start_as_current_span("POST /import") as request:
        gid = pgq.group(q, ["one", "two"], then=(after.name, "done"))
    then_id = pgq.group_status(gid).then_msg_id
    (follow_up,) = otel.finished(f"send {after.name}")
    assert follow_up.parent.span_id == request.get_span_context().span_id
    stored = pgq.read_by_id(after, then_id).headers["pgq_trace"]
    assert stored["traceparent"] == traceparent(follow_up)
