"""A chain and a group finished over SQS DeleteMessage, through the real boto3 client and a
live server, with no worker running: the dependants are readable as soon as the delete
answers."""

from __future__ import annotations

import pytest

import pgq_django as pgq

pytestmark = pytest.mark.slow


def _receive_all(sqs, url: str, count: int) -> dict[str, str]:
    """Receive ``count`` messages: body -> receipt handle."""
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert len(got) == count
    return {m["Body"]: m["ReceiptHandle"] for m in got}


def test_a_chain_deleted_over_sqs_releases_its_dependant_at_once(sqs, new_name):
    name = new_name()
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    first = pgq.send(name, "first")
    second = pgq.send(name, "second", after=[first])
    handles = _receive_all(sqs, url, 1)
    assert set(handles) == {"first"}
    sqs.delete_message(QueueUrl=url, ReceiptHandle=handles["first"])
    assert [m.msg_id for m in pgq.read(name)] == [second]


def test_a_group_deleted_over_sqs_releases_its_follow_up_once(sqs, new_name):
    name, then = new_name(), new_name()
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    sqs.create_queue(QueueName=then)
    gid = pgq.group(name, ["a", "b"], then=(then, "after"))
    follow_up = pgq.group_status(gid).then_msg_id
    handles = _receive_all(sqs, url, 2)
    sqs.delete_message(QueueUrl=url, ReceiptHandle=handles["a"])
    assert pgq.read(then) == []
    answer = sqs.delete_message_batch(
        QueueUrl=url, Entries=[{"Id": "b", "ReceiptHandle": handles["b"]}]
    )
    assert [e["Id"] for e in answer["Successful"]] == ["b"]
    assert [m.msg_id for m in pgq.read(then, qty=10)] == [follow_up]
