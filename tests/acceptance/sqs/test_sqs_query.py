"""The Query protocol (form-encoded ``Action=…``, XML answers and errors) beside AWS JSON 1.0
on the same URL, driven by a real older client: botocore 1.31.0, whose SQS model is the
Query protocol's, in its own virtualenv (``make query-client``), run as a child process
(tests/sqs_query_client.py) against the live endpoint.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest

import pgq_django as pgq
from pgq_django.models import AccessKey
from pgq_django.sqs.digests import md5_of_attributes, md5_of_body
from tests.conftest import ROOT

pytestmark = pytest.mark.slow

QUERY_PYTHON = ROOT / ".venv-query" / "bin" / "python"
CLIENT = ROOT / "tests" / "sqs_query_client.py"

Run = Callable[..., list[dict[str, Any]]]


@pytest.fixture
def query(sqs_endpoint: str, user: Any) -> Run:
    """Run SQS calls through botocore 1.31.0 (Query protocol) as ``user``; one answer per
    call, ``{"ok": response}`` or ``{"error": {...}}``."""
    if not QUERY_PYTHON.exists():
        pytest.fail(f"{QUERY_PYTHON} is missing: `make query-client` creates it")
    key, secret = AccessKey.objects.create_key(user)

    def run(*calls: tuple[str, dict[str, Any]], **overrides: str) -> list[dict[str, Any]]:
        job = {
            "endpoint": sqs_endpoint,
            "region": "eu-west-1",
            "key": key.key_id,
            "secret": secret,
            "calls": [list(call) for call in calls],
            **overrides,
        }
        done = subprocess.run(
            [str(QUERY_PYTHON), str(CLIENT)],
            input=json.dumps(job),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            sys.stderr.write(done.stderr)
            pytest.fail(f"the Query client failed: {done.stderr[-2000:]}")
        return list(json.loads(done.stdout))

    return run


def _b(data: bytes) -> dict[str, str]:
    return {"$bytes": base64.b64encode(data).decode()}


def _ok(answer: dict[str, Any]) -> Any:
    assert "ok" in answer, answer
    return answer["ok"]


def test_every_queue_action_works_through_the_query_protocol(query, new_name):
    name = new_name()
    created, url_answer, listed, attributes = query(
        (
            "create_queue",
            {"QueueName": name, "Attributes": {"VisibilityTimeout": "45"}, "tags": {"t": "1"}},
        ),
        ("get_queue_url", {"QueueName": name}),
        ("list_queues", {"QueueNamePrefix": name}),
        ("get_queue_attributes", {"QueueUrl": name, "AttributeNames": ["All"]}),
    )
    url = _ok(created)["QueueUrl"]
    assert url.endswith("/000000000000/" + name)
    assert _ok(url_answer)["QueueUrl"] == url
    assert _ok(listed)["QueueUrls"] == [url]
    found = _ok(attributes)["Attributes"]
    assert found["VisibilityTimeout"] == "45"
    assert found["QueueArn"] == f"arn:aws:sqs:eu-west-1:000000000000:{name}"
    answers = query(
        ("set_queue_attributes", {"QueueUrl": url, "Attributes": {"DelaySeconds": "3"}}),
        ("tag_queue", {"QueueUrl": url, "Tags": {"team": "a", "x": "y"}}),
        ("untag_queue", {"QueueUrl": url, "TagKeys": ["x"]}),
        ("list_queue_tags", {"QueueUrl": url}),
        ("list_dead_letter_source_queues", {"QueueUrl": url}),
        ("purge_queue", {"QueueUrl": url}),
    )
    assert [_ok(a) for a in answers[:3]] == [{}, {}, {}]
    assert _ok(answers[3])["Tags"] == {"t": "1", "team": "a"}
    assert _ok(answers[4]).get("queueUrls", []) == []  # an empty list is no element
    queue = pgq.get_queue(name)
    assert (queue.visibility_timeout, queue.delivery_delay) == (45, 3)
    assert _ok(query(("delete_queue", {"QueueUrl": url}))[0]) == {}
    assert not pgq.Queue.objects.filter(name=name).exists()


def test_messages_round_trip_through_the_query_protocol_with_their_digests(query, new_name):
    name = new_name()
    body = "héllo\r\nwörld <&> 😀"
    attributes = {
        "text": {"DataType": "String", "StringValue": "a & b"},
        "n": {"DataType": "Number", "StringValue": "12.5"},
        "blob": {"DataType": "Binary", "BinaryValue": _b(bytes(range(256)))},
    }
    created, sent, received = query(
        ("create_queue", {"QueueName": name}),
        (
            "send_message",
            {"QueueUrl": name, "MessageBody": body, "MessageAttributes": attributes},
        ),
        (
            "receive_message",
            {
                "QueueUrl": name,
                "AttributeNames": ["All"],
                "MessageAttributeNames": ["All"],
                "WaitTimeSeconds": 1,
            },
        ),
    )
    _ok(created)
    answer = _ok(sent)
    assert answer["MD5OfMessageBody"] == md5_of_body(body)
    wire = {
        k: (
            {"DataType": v["DataType"], "BinaryValue": v["BinaryValue"]["$bytes"]}
            if "BinaryValue" in v
            else v
        )
        for k, v in attributes.items()
    }
    assert answer["MD5OfMessageAttributes"] == md5_of_attributes(wire)
    [message] = _ok(received)["Messages"]
    assert message["Body"] == body  # CR kept: written as a character reference
    assert message["MessageId"] == answer["MessageId"]
    assert message["MD5OfBody"] == hashlib.md5(body.encode()).hexdigest()
    assert message["MessageAttributes"] == attributes
    assert message["Attributes"]["ApproximateReceiveCount"] == "1"
    handle = message["ReceiptHandle"]
    changed, deleted = query(
        (
            "change_message_visibility",
            {"QueueUrl": name, "ReceiptHandle": handle, "VisibilityTimeout": 60},
        ),
        ("delete_message", {"QueueUrl": name, "ReceiptHandle": handle}),
    )
    assert (_ok(changed), _ok(deleted)) == ({}, {})
    assert pgq.metrics(name).queue_length == 0


def test_batches_answer_each_entry_through_the_query_protocol(query, new_name):
    name = new_name()
    _ok(query(("create_queue", {"QueueName": name}))[0])
    [batch] = query(
        (
            "send_message_batch",
            {
                "QueueUrl": name,
                "Entries": [
                    {"Id": "a", "MessageBody": "1"},
                    {"Id": "b", "MessageBody": "2", "DelaySeconds": 901},
                    {"Id": "c", "MessageBody": "3"},
                ],
            },
        )
    )
    answer = _ok(batch)
    assert [e["Id"] for e in answer["Successful"]] == ["a", "c"]
    assert [(f["Id"], f["Code"], f["SenderFault"]) for f in answer["Failed"]] == [
        ("b", "InvalidParameterValue", True)
    ]
    [received] = query(("receive_message", {"QueueUrl": name, "MaxNumberOfMessages": 10}))
    handles = [m["ReceiptHandle"] for m in _ok(received)["Messages"]]
    assert len(handles) == 2
    changed, deleted = query(
        (
            "change_message_visibility_batch",
            {
                "QueueUrl": name,
                "Entries": [
                    {"Id": "x", "ReceiptHandle": handles[0], "VisibilityTimeout": 0},
                    {"Id": "y", "ReceiptHandle": "nonsense", "VisibilityTimeout": 0},
                ],
            },
        ),
        (
            "delete_message_batch",
            {
                "QueueUrl": name,
                "Entries": [{"Id": str(i), "ReceiptHandle": h} for i, h in enumerate(handles)],
            },
        ),
    )
    assert [e["Id"] for e in _ok(changed)["Successful"]] == ["x"]
    assert [(f["Id"], f["Code"]) for f in _ok(changed)["Failed"]] == [
        ("y", "ReceiptHandleIsInvalid")
    ]
    assert [e["Id"] for e in _ok(deleted)["Successful"]] == ["0", "1"]
    assert pgq.metrics(name).queue_length == 0


def test_errors_come_as_xml_with_sqs_codes_and_words_and_change_nothing(query, new_name):
    name = new_name()
    _ok(query(("create_queue", {"QueueName": name}))[0])
    missing, empty, handle, attribute = query(
        ("send_message", {"QueueUrl": name + "x", "MessageBody": "x"}),
        ("send_message_batch", {"QueueUrl": name, "Entries": []}),
        ("delete_message", {"QueueUrl": name, "ReceiptHandle": "garbage"}),
        ("get_queue_attributes", {"QueueUrl": name, "AttributeNames": ["Bogus"]}),
    )
    assert missing["error"] == {
        "code": "AWS.SimpleQueueService.NonExistentQueue",
        "message": "The specified queue does not exist.",
        "status": 400,
        "exception": "QueueDoesNotExist",
    }
    assert empty["error"]["code"] == "AWS.SimpleQueueService.EmptyBatchRequest"
    assert empty["error"]["message"] == (
        "There should be at least one SendMessageBatchRequestEntry in the request."
    )
    assert empty["error"]["exception"] == "EmptyBatchRequest"
    assert handle["error"]["code"] == "ReceiptHandleIsInvalid"
    assert handle["error"]["exception"] == "ReceiptHandleIsInvalid"
    assert attribute["error"]["code"] == "InvalidAttributeName"
    assert pgq.metrics(name).queue_length == 0
    assert not pgq.Queue.objects.filter(name=name + "x").exists()


def test_the_query_protocol_is_signed_and_granted_as_json_is(query, new_name, make_user):
    name = new_name()
    _ok(query(("create_queue", {"QueueName": name}))[0])
    pgq.send(name, "kept")
    [forged] = query(("purge_queue", {"QueueUrl": name}), secret="not-the-secret")
    assert forged["error"]["code"] == "SignatureDoesNotMatch"
    assert forged["error"]["status"] == 403
    stranger_key, stranger_secret = AccessKey.objects.create_key(make_user(creator=False))
    stranger = query(
        ("purge_queue", {"QueueUrl": name}),
        ("receive_message", {"QueueUrl": name}),
        key=stranger_key.key_id,
        secret=stranger_secret,
    )
    assert [a["error"]["code"] for a in stranger] == ["AWS.SimpleQueueService.NonExistentQueue"] * 2
    assert [m.message for m in pgq.read(name, vt=0)] == ["kept"]


def test_an_unsupported_or_unknown_action_is_refused_in_xml(query, new_name):
    name = new_name()
    _ok(query(("create_queue", {"QueueName": name}))[0])
    [permission] = query(
        (
            "add_permission",
            {"QueueUrl": name, "Label": "x", "AWSAccountIds": ["1"], "Actions": ["SendMessage"]},
        )
    )
    assert permission["error"]["code"] == "AWS.SimpleQueueService.UnsupportedOperation"
    assert permission["error"]["exception"] == "UnsupportedOperation"


def test_a_long_poll_through_the_query_protocol_waits_and_answers_in_xml(query, new_name):
    name = new_name()
    _ok(query(("create_queue", {"QueueName": name}))[0])
    started = time.monotonic()
    [empty] = query(("receive_message", {"QueueUrl": name, "WaitTimeSeconds": 1}))
    assert _ok(empty).get("Messages", []) == []
    assert time.monotonic() - started >= 1  # it waited its second, then answered empty
    [bad] = query(("receive_message", {"QueueUrl": name, "WaitTimeSeconds": 21}))
    assert bad["error"]["message"] == (
        "Value 21 for parameter WaitTimeSeconds is invalid. Reason: Must be >= 0 and <= 20, "
        "if provided."
    )
