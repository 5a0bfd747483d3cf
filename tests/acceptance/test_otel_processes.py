"""One trace from a send to its processing, across real processes and every door.

The senders run here, with the real SDK and its in-memory exporter (tests/otel_support.py);
the live server (REST and SQS) and the ``pgq_worker`` processes configure the SDK from
``PGQ_TEST_OTEL_FILE`` and write their spans there as JSON lines, which the tests read back.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from django.test import override_settings
from opentelemetry.propagators.aws.aws_xray_propagator import AwsXRayPropagator
from opentelemetry.trace import SpanKind, get_current_span

import pgq_django as pgq
from pgq_django import telemetry
from tests.http_server import (
    PASSWORD,
    app_name_of,
    start_uvicorn,
    stop,
    wait_for_server_connections_to_close,
)
from tests.otel_support import ENV, InMemory, hex_trace, in_memory, spans_in, traceparent
from tests.pgmq_support import ours_sql, pgmq_sql  # noqa: F401  (a fixture)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

HANDLER = "tests.otel_support.handle"
WORKER = ("-m", "django", "pgq_worker", "--import", "tests.otel_support", "-v", "2")
TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_CONTEXT = f"00-{TRACE}-b7ad6b7169203331-01"


@pytest.fixture
def otel(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemory]:
    found, live = in_memory()
    monkeypatch.setattr(telemetry, "_live", live)
    yield found


@pytest.fixture(scope="module")
def server_spans(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("otel") / "server.jsonl"


@pytest.fixture(scope="module")
def server(server_spans: Path, django_db_setup: Any, django_db_blocker: Any) -> Iterator[str]:
    """A live server (REST at /, SQS at /sqs/) with the SDK configured."""
    proc, base, sock = start_uvicorn("tests.otel_asgi:application", **{ENV: str(server_spans)})
    yield base
    stop(proc, sock)
    with django_db_blocker.unblock():
        wait_for_server_connections_to_close(app_name_of(proc))


@pytest.fixture
def superuser(transactional_db: Any) -> Any:
    from django.contrib.auth import get_user_model

    user = get_user_model()(username="u_" + uuid.uuid4().hex[:8], is_superuser=True)
    user.set_password(PASSWORD)
    user.save()
    return user


def run_worker(spawn: Any, spans: Path, *queues: str, failures: bool = False, **env: str) -> None:
    """One ``pgq_worker --once`` over ``queues``, writing its spans to ``spans`` (it exits
    1 when a handler failed)."""
    args = [a for q in queues for a in ("--queue", q)]
    proc = spawn(*WORKER, *args, "--once", **{ENV: str(spans), **env})
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == (1 if failures else 0), err


def only(spans: list[dict[str, Any]], name: str) -> dict[str, Any]:
    found = [s for s in spans if s["name"] == name]
    assert len(found) == 1, (name, [s["name"] for s in spans])
    return found[0]


def link_of(span: Any) -> dict[str, str]:
    return {"trace_id": hex_trace(span), "span_id": f"{span.context.span_id:016x}"}


def test_a_send_in_a_view_and_its_processing_by_a_worker_form_one_linked_trace(
    otel, make_queue, spawn, tmp_path
):
    q = make_queue()
    pgq.register_callback(q, HANDLER)
    with otel.tracer.start_as_current_span("POST /signup", kind=SpanKind.SERVER) as view:
        msg_id = pgq.send(q, {"to": "ada@example.com"})
    run_worker(spawn, tmp_path / "worker.jsonl", q.name)
    (send,) = otel.finished(f"send {q.name}")
    assert hex_trace(send) == format(view.get_span_context().trace_id, "032x")
    worker = spans_in(tmp_path / "worker.jsonl")
    process = only(worker, f"process {q.name}")
    assert process["kind"] == "CONSUMER"
    assert process["links"] == [link_of(send)]
    assert process["attributes"]["messaging.message.id"] == str(msg_id)
    ack = only(worker, f"ack {q.name}")
    assert (ack["trace_id"], ack["parent"]) == (process["trace_id"], process["span_id"])


def test_the_worker_can_continue_the_senders_trace(otel, make_queue, spawn, tmp_path):
    q = make_queue()
    pgq.register_callback(q, HANDLER)
    pgq.send(q, {"n": 1})
    as_child = json.dumps({"TRACE_PROCESS_AS_CHILD": True})
    run_worker(spawn, tmp_path / "w.jsonl", q.name, PGQ_TEST_PGQ=as_child)
    (send,) = otel.finished(f"send {q.name}")
    process = only(spans_in(tmp_path / "w.jsonl"), f"process {q.name}")
    assert (process["trace_id"], process["parent"]) == (hex_trace(send), link_of(send)["span_id"])


def test_a_retry_then_a_dead_letter_keep_the_creation_context(otel, make_queue, spawn, tmp_path):
    dlq = make_queue()
    q = make_queue(max_retries=1, retry_delay=0, dead_letter_queue=dlq.name)
    pgq.register_callback(q, HANDLER)
    msg_id = pgq.send(q, {"fail": True})
    run_worker(spawn, tmp_path / "w.jsonl", q.name, failures=True)
    (send,) = otel.finished(f"send {q.name}")
    worker = spans_in(tmp_path / "w.jsonl")
    processes = [s for s in worker if s["name"] == f"process {q.name}"]
    assert len(processes) == 2
    assert all(p["links"] == [link_of(send)] and p["status"] == "ERROR" for p in processes)
    assert only(worker, f"nack {q.name}")["parent"] == processes[0]["span_id"]
    assert only(worker, f"dead_letter {q.name}")["parent"] == processes[1]["span_id"]
    moved = pgq.read_by_id(dlq, msg_id)
    assert moved.headers["pgq_trace"]["traceparent"] == traceparent(send)


def test_a_task_enqueued_in_a_view_is_processed_in_its_trace(otel, spawn, tmp_path):
    from django.conf import settings

    with override_settings(TASKS=settings.TEST_TASKS):
        from tests.otel_tasks import send_welcome_email

        pgq.create_queue("tasks_default", archive_on_ack=True)
        with otel.tracer.start_as_current_span("POST /signup", kind=SpanKind.SERVER):
            result = send_welcome_email.enqueue("ada@example.com")
        run_worker(spawn, tmp_path / "w.jsonl", "tasks_default", PGQ_TEST_TASKS="1")
        result.refresh()
        assert result.return_value == "welcome sent to ada@example.com"
    (send,) = otel.finished("send tasks_default")
    process = only(spans_in(tmp_path / "w.jsonl"), "process tasks_default")
    assert process["links"] == [link_of(send)]


def test_rest_takes_and_returns_a_traceparent_per_message(
    server, server_spans, superuser, make_queue, spawn, tmp_path
):
    q = make_queue()
    pgq.register_callback(q, HANDLER)
    api = requests.Session()
    api.auth = (superuser.username, PASSWORD)
    refused = api.post(
        f"{server}/v1/queues/{q.name}/messages",
        json={"body": 1, "traceparent": "00-abc"},
        timeout=30,
    )
    assert refused.status_code == 400, refused.text
    assert "traceparent" in refused.text and pgq.metrics(q).queue_length == 0
    sent = api.post(
        f"{server}/v1/queues/{q.name}/messages",
        json={"messages": [{"body": n, "traceparent": CLIENT_CONTEXT} for n in (1, 2)]},
        timeout=30,
    )
    assert sent.status_code == 201, sent.text
    consumed = api.get(f"{server}/v1/queues/{q.name}/messages?limit=1", timeout=30).json()
    (message,) = consumed["data"]
    send = only(spans_in(server_spans), f"send {q.name}")
    assert (send["parent_trace"], send["parent"]) == (TRACE, "b7ad6b7169203331")
    assert message["traceparent"] == f"00-{TRACE}-{send['span_id']}-01"
    run_worker(spawn, tmp_path / "w.jsonl", q.name)
    process = only(spans_in(tmp_path / "w.jsonl"), f"process {q.name}")
    assert process["links"] == [{"trace_id": TRACE, "span_id": send["span_id"]}]


def test_sqs_continues_the_x_ray_header_of_an_instrumented_boto3(
    otel, server, server_spans, superuser, make_queue, spawn, tmp_path
):
    import boto3
    from botocore.config import Config
    from opentelemetry.instrumentation.botocore import BotocoreInstrumentor

    from pgq_django.models import AccessKey

    q = make_queue()
    pgq.register_callback(q, HANDLER)
    key, secret = AccessKey.objects.create_key(superuser)
    sqs = boto3.client(
        "sqs",
        endpoint_url=server + "/sqs/",
        region_name="eu-west-1",
        aws_access_key_id=key.key_id,
        aws_secret_access_key=secret,
        config=Config(retries={"total_max_attempts": 1}),
    )
    url = sqs.get_queue_url(QueueName=q.name)["QueueUrl"]
    instrumentor = BotocoreInstrumentor()
    instrumentor.instrument(tracer_provider=otel.provider)
    try:
        with otel.tracer.start_as_current_span("POST /checkout", kind=SpanKind.SERVER):
            sqs.send_message(QueueUrl=url, MessageBody="to the worker")
            sqs.send_message(QueueUrl=url, MessageBody="received back")
    finally:
        instrumentor.uninstrument()
    assert not get_current_span().get_span_context().is_valid
    clients = otel.finished("SQS.SendMessage")
    assert len(clients) == 2
    # A receive asking for it answers the X-Ray header the instrumentation sent.
    (received,) = sqs.receive_message(
        QueueUrl=url, MessageSystemAttributeNames=["AWSTraceHeader"], MaxNumberOfMessages=1
    )["Messages"]
    header = received["Attributes"]["AWSTraceHeader"]
    carried = get_current_span(AwsXRayPropagator().extract({"X-Amzn-Trace-Id": header}))
    sent_by = {c.context.span_id: c for c in clients}[carried.get_span_context().span_id]
    assert carried.get_span_context().trace_id == sent_by.context.trace_id
    # The server's send spans are the children of the client spans; the worker's process
    # span links to the one of the message it handled, in the client's trace.
    sends = [s for s in spans_in(server_spans) if s["name"] == f"send {q.name}"]
    assert {(s["parent_trace"], s["parent"]) for s in sends} == {
        (hex_trace(c), f"{c.context.span_id:016x}") for c in clients
    }
    run_worker(spawn, tmp_path / "w.jsonl", q.name)
    process = only(spans_in(tmp_path / "w.jsonl"), f"process {q.name}")
    (link,) = process["links"]
    assert link in [{"trace_id": s["trace_id"], "span_id": s["span_id"]} for s in sends]
    assert link["trace_id"] == hex_trace(clients[0])


@pytest.mark.usefixtures("pgmq_sql")
def test_the_pgmq_door_honours_a_clients_traceparent_header(make_queue, spawn, tmp_path):
    q = make_queue()
    pgq.register_callback(q, HANDLER)
    headers = {"traceparent": CLIENT_CONTEXT}
    ours_sql("SELECT pgmq.send(%s, %s::jsonb, %s::jsonb)", [q.name, "{}", json.dumps(headers)])
    with pytest.raises(Exception, match="reserved"):
        forged = {"pgq_trace": {"traceparent": CLIENT_CONTEXT}}
        ours_sql("SELECT pgmq.send(%s, %s::jsonb, %s::jsonb)", [q.name, "{}", json.dumps(forged)])
    run_worker(spawn, tmp_path / "w.jsonl", q.name)
    process = only(spans_in(tmp_path / "w.jsonl"), f"process {q.name}")
    assert process["links"] == [{"trace_id": TRACE, "span_id": "b7ad6b7169203331"}]


def test_a_reply_carries_the_context_of_the_processing_that_sent_it(
    otel, make_queue, spawn, tmp_path
):
    q, replies = make_queue(), make_queue()
    pgq.register_callback(q, HANDLER)
    with otel.tracer.start_as_current_span("POST /quote", kind=SpanKind.SERVER):
        msg_id = pgq.send(q, {"n": 1}, reply_to=replies.name)
    run_worker(spawn, tmp_path / "w.jsonl", q.name)
    worker = spans_in(tmp_path / "w.jsonl")
    process = only(worker, f"process {q.name}")
    reply_send = only(worker, f"send {replies.name}")
    assert reply_send["parent"] == process["span_id"]
    conversation = "messaging.message.conversation_id"
    assert process["attributes"][conversation] == reply_send["attributes"][conversation]
    assert process["attributes"][conversation] == str(msg_id)
    (reply,) = pgq.read(replies)
    stored = reply.headers["pgq_trace"]["traceparent"]
    assert stored.startswith(f"00-{reply_send['trace_id']}-{reply_send['span_id']}-")


def test_a_rest_publish_is_sent_in_the_clients_context(server, server_spans, superuser, make_queue):
    q = make_queue()
    topic = "t_" + q.name
    pgq.create_exchange(topic)
    pgq.bind_queue(q, topic)
    api = requests.Session()
    api.auth = (superuser.username, PASSWORD)
    sent = api.post(
        f"{server}/v1/topics/{topic}/messages",
        json={"body": {"n": 1}, "traceparent": CLIENT_CONTEXT},
        timeout=30,
    )
    assert sent.status_code == 201, sent.text
    send = only(spans_in(server_spans), f"send {topic}")
    assert (send["parent_trace"], send["parent"]) == (TRACE, "b7ad6b7169203331")
    (copy,) = pgq.read(q)
    assert copy.headers["pgq_trace"]["traceparent"].startswith(f"00-{TRACE}-{send['span_id']}-")
