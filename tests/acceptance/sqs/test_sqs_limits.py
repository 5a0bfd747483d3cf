"""A queue's rate and concurrency limits hold for SQS consumers too: ReceiveMessage through
real boto3 gets no more than the limits leave, and no error."""

from __future__ import annotations

import pytest

import pgq_django as pgq

pytestmark = pytest.mark.slow


def test_receive_message_gets_no_more_than_a_concurrency_limit_leaves(sqs, new_name):
    url = sqs.create_queue(QueueName=new_name())["QueueUrl"]
    name = url.rsplit("/", 1)[1]
    pgq.alter_queue(name, concurrency_limit=2)
    for n in range(5):
        sqs.send_message(QueueUrl=url, MessageBody=f"m{n}")
    first = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert len(first) == 2
    assert sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []) == []
    sqs.delete_message(QueueUrl=url, ReceiptHandle=first[0]["ReceiptHandle"])
    again = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert len(again) == 1
    assert pgq.metrics(name).queue_length == 4  # nothing was dropped or failed
