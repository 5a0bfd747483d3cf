"""A hot SQS call costs two statements: the lookup, and the work.

Send, receive and delete requests are run through the endpoint's request cycle
(:func:`pgq_django.sqs.protocol.handle`, what the Django view and the lean ASGI path both
call) in this process, signed by botocore, and every statement they run is recorded: once
the process has verified the key (its signing key remembered), each runs exactly one
statement before its work — the queue, the caller's right and the key's state together —
and one for the work itself, as the Python API does.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from django.contrib.auth import get_user_model

import pgq_django as pgq
from pgq_django.models import AccessKey
from pgq_django.sqs import protocol
from tests.conftest import statements_run

ENDPOINT = "http://testserver/sqs/"


def _wire(key: AccessKey, secret: str, action: str, params: dict[str, Any]):
    body = json.dumps(params).encode()
    request = AWSRequest(
        method="POST",
        url=ENDPOINT,
        data=body,
        headers={
            "X-Amz-Target": f"AmazonSQS.{action}",
            "Content-Type": "application/x-amz-json-1.0",
        },
    )
    SigV4Auth(Credentials(key.key_id, secret), "sqs", "us-east-1").add_auth(request)
    headers = {name.lower(): value for name, value in request.headers.items()}
    headers["host"] = "testserver"
    return protocol.WireRequest(
        method="POST",
        raw_path=b"/sqs/",
        query="",
        headers=headers,
        body=body,
        endpoint_url=lambda: ENDPOINT,
    )


def _statements(request: protocol.WireRequest) -> tuple[Any, list[str]]:
    with statements_run() as seen:
        answer = protocol.handle(request)
    return answer, seen


@pytest.fixture
def caller(db):
    owner = get_user_model().objects.create_user("round_trips")
    key, secret = AccessKey.objects.create_key(owner)
    queue = pgq.create_queue("round_trips", owner=owner).name
    url = f"{ENDPOINT}000000000000/{queue}"
    # The first request reads the key's row and remembers its signing key.
    answer = protocol.handle(_wire(key, secret, "GetQueueUrl", {"QueueName": queue}))
    assert answer == {"QueueUrl": url}
    return key, secret, queue, url


def test_a_batch_send_is_one_lookup_and_one_insert(caller):
    key, secret, queue, url = caller
    entries = [{"Id": str(i), "MessageBody": f"m{i}"} for i in range(10)]
    answer, seen = _statements(
        _wire(key, secret, "SendMessageBatch", {"QueueUrl": url, "Entries": entries})
    )
    assert len(answer["Successful"]) == 10 and answer["Failed"] == []
    assert len(seen) == 2, seen
    assert "pgq_access_key" in seen[0] and "pgq_queue_grant" in seen[0]
    assert pgq.metrics(queue).queue_length == 10


def test_a_receive_and_a_batch_delete_are_one_lookup_and_one_statement_each(caller):
    key, secret, queue, url = caller
    pgq.send_batch(queue, [f"m{i}" for i in range(10)])
    got, seen = _statements(
        _wire(key, secret, "ReceiveMessage", {"QueueUrl": url, "MaxNumberOfMessages": 10})
    )
    assert len(got["Messages"]) == 10
    assert len(seen) == 2, seen
    entries = [
        {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got["Messages"])
    ]
    done, seen = _statements(
        _wire(key, secret, "DeleteMessageBatch", {"QueueUrl": url, "Entries": entries})
    )
    assert len(done["Successful"]) == 10
    assert len(seen) == 2, seen
    assert pgq.metrics(queue).queue_length == 0
