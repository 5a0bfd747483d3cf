"""FIFO queues, dead-letter queues with redrive, and long polling, through real boto3."""

from __future__ import annotations

import json
import threading
import time

import pytest
from botocore.exceptions import ClientError
from django.db import connection

import pgq_django as pgq
from tests.conftest import wait_until

pytestmark = pytest.mark.slow


def _code(exc: pytest.ExceptionInfo[ClientError]) -> str:
    return str(exc.value.response["Error"]["Code"])


def _name(url: str) -> str:
    return url.rsplit("/", 1)[1]


def _arn(sqs, url: str) -> str:
    return sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]


@pytest.fixture
def fifo_url(sqs, new_name):
    return sqs.create_queue(QueueName=new_name(fifo=True), Attributes={"FifoQueue": "true"})[
        "QueueUrl"
    ]


def test_fifo_delivers_each_group_in_order_and_blocks_it_while_in_flight(sqs, fifo_url):
    sent = []
    for body, group in [("a1", "A"), ("b1", "B"), ("a2", "A"), ("a3", "A"), ("b2", "B")]:
        answer = sqs.send_message(
            QueueUrl=fifo_url, MessageBody=body, MessageGroupId=group, MessageDeduplicationId=body
        )
        sent.append(answer["SequenceNumber"])
    assert sent == sorted(sent)
    # As SQS: several messages of one group in one receive, in order, up to the maximum.
    first = sqs.receive_message(QueueUrl=fifo_url, MaxNumberOfMessages=2, AttributeNames=["All"])[
        "Messages"
    ]
    assert [m["Body"] for m in first] == ["a1", "a2"]
    a1 = first[0]
    assert a1["Attributes"]["MessageGroupId"] == "A"
    assert a1["Attributes"]["MessageDeduplicationId"] == "a1"
    assert a1["Attributes"]["SequenceNumber"] == sent[0]
    # While any of A's messages is in flight, nothing of A is delivered; B goes on.
    rest = sqs.receive_message(QueueUrl=fifo_url, MaxNumberOfMessages=10)["Messages"]
    assert [m["Body"] for m in rest] == ["b1", "b2"]
    assert sqs.receive_message(QueueUrl=fifo_url, MaxNumberOfMessages=10).get("Messages") is None
    sqs.delete_message(QueueUrl=fifo_url, ReceiptHandle=a1["ReceiptHandle"])
    assert sqs.receive_message(QueueUrl=fifo_url, MaxNumberOfMessages=10).get("Messages") is None
    sqs.delete_message(QueueUrl=fifo_url, ReceiptHandle=first[1]["ReceiptHandle"])
    last = sqs.receive_message(QueueUrl=fifo_url, MaxNumberOfMessages=10)["Messages"]
    assert [m["Body"] for m in last] == ["a3"]


def test_a_fifo_group_in_flight_comes_back_in_order_when_its_visibility_ends(sqs, fifo_url):
    for body in ("x1", "x2", "x3"):
        sqs.send_message(
            QueueUrl=fifo_url, MessageBody=body, MessageGroupId="X", MessageDeduplicationId=body
        )
    got = sqs.receive_message(QueueUrl=fifo_url, MaxNumberOfMessages=3)["Messages"]
    assert [m["Body"] for m in got] == ["x1", "x2", "x3"]
    sqs.change_message_visibility_batch(
        QueueUrl=fifo_url,
        Entries=[
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 0}
            for i, m in enumerate(got)
        ],
    )
    again = sqs.receive_message(
        QueueUrl=fifo_url, MaxNumberOfMessages=10, AttributeNames=["ApproximateReceiveCount"]
    )["Messages"]
    assert [(m["Body"], m["Attributes"]["ApproximateReceiveCount"]) for m in again] == [
        ("x1", "2"),
        ("x2", "2"),
        ("x3", "2"),
    ]


def test_fifo_deduplicates_by_id_and_by_content(sqs, new_name):
    url = sqs.create_queue(
        QueueName=new_name(fifo=True),
        Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"},
    )["QueueUrl"]
    first = sqs.send_message(
        QueueUrl=url, MessageBody="x", MessageGroupId="g", MessageDeduplicationId="d"
    )
    again = sqs.send_message(
        QueueUrl=url, MessageBody="y", MessageGroupId="g", MessageDeduplicationId="d"
    )
    assert again["MessageId"] == first["MessageId"]
    by_content = sqs.send_message(QueueUrl=url, MessageBody="same", MessageGroupId="g")
    repeated = sqs.send_message(QueueUrl=url, MessageBody="same", MessageGroupId="g")
    other = sqs.send_message(QueueUrl=url, MessageBody="different", MessageGroupId="g")
    assert repeated["MessageId"] == by_content["MessageId"] != other["MessageId"]
    assert pgq.metrics(_name(url)).queue_length == 3
    batch = sqs.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "1", "MessageBody": "same", "MessageGroupId": "g"},
            {"Id": "2", "MessageBody": "new", "MessageGroupId": "g", "MessageDeduplicationId": "n"},
        ],
    )
    assert batch["Successful"][0]["MessageId"] == by_content["MessageId"]
    assert pgq.metrics(_name(url)).queue_length == 4


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"MessageDeduplicationId": "d"}, "MissingParameter"),  # no MessageGroupId
        ({"MessageGroupId": "g"}, "InvalidParameterValue"),  # no dedup id, no content dedup
        (
            {"MessageGroupId": "g", "MessageDeduplicationId": "d", "DelaySeconds": 5},
            "InvalidParameterValue",
        ),
        ({"MessageGroupId": "has space", "MessageDeduplicationId": "d"}, "InvalidParameterValue"),
    ],
)
def test_fifo_sends_missing_their_rules_send_nothing(sqs, fifo_url, kwargs, code):
    with pytest.raises(ClientError) as caught:
        sqs.send_message(QueueUrl=fifo_url, MessageBody="x", **kwargs)
    assert _code(caught) == code
    assert pgq.metrics(_name(fifo_url)).queue_length == 0


def test_messages_move_to_the_dead_letter_queue_after_max_receive_count_and_back(sqs, new_name):
    dlq_url = sqs.create_queue(QueueName=new_name())["QueueUrl"]
    policy = json.dumps({"deadLetterTargetArn": _arn(sqs, dlq_url), "maxReceiveCount": 2})
    url = sqs.create_queue(QueueName=new_name(), Attributes={"RedrivePolicy": policy})["QueueUrl"]
    sent = sqs.send_message(QueueUrl=url, MessageBody="poison")
    for count in ("1", "2"):
        got = sqs.receive_message(
            QueueUrl=url, VisibilityTimeout=0, AttributeNames=["ApproximateReceiveCount"]
        )["Messages"]
        assert got[0]["Attributes"]["ApproximateReceiveCount"] == count
    # The third receive exceeds maxReceiveCount: the message moves instead of coming back.
    assert sqs.receive_message(QueueUrl=url).get("Messages") is None
    assert pgq.metrics(_name(url)).queue_length == 0
    dead = sqs.receive_message(QueueUrl=dlq_url, AttributeNames=["All"])["Messages"][0]
    assert dead["Body"] == "poison"
    assert dead["MessageId"] == sent["MessageId"]
    assert dead["Attributes"]["DeadLetterQueueSourceArn"] == _arn(sqs, url)
    assert dead["Attributes"]["ApproximateReceiveCount"] == "1"
    sqs.change_message_visibility(
        QueueUrl=dlq_url, ReceiptHandle=dead["ReceiptHandle"], VisibilityTimeout=0
    )

    task = sqs.start_message_move_task(SourceArn=_arn(sqs, dlq_url))
    assert task["TaskHandle"]
    back = sqs.receive_message(QueueUrl=url, AttributeNames=["ApproximateReceiveCount"])["Messages"]
    assert [m["Body"] for m in back] == ["poison"]
    assert back[0]["Attributes"]["ApproximateReceiveCount"] == "1"
    assert pgq.metrics(_name(dlq_url)).queue_length == 0


def test_a_move_task_needs_a_dead_letter_queue_that_exists(sqs, new_name):
    url = sqs.create_queue(QueueName=new_name())["QueueUrl"]
    with pytest.raises(ClientError) as caught:
        sqs.start_message_move_task(SourceArn=_arn(sqs, url))
    assert _code(caught) == "InvalidParameterValue"
    with pytest.raises(sqs.exceptions.ResourceNotFoundException):
        sqs.start_message_move_task(SourceArn="arn:aws:sqs:eu-west-1:000000000000:nope")


def _listening_backends() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND query ILIKE 'LISTEN%%' AND pid <> pg_backend_pid()"
        )
        return int(cursor.fetchone()[0])


def test_a_long_poll_returns_a_message_sent_from_another_connection_while_it_waits(sqs, new_name):
    name = new_name()
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    outcome: dict = {}

    def receive() -> None:
        outcome["started"] = time.time()
        outcome["answer"] = sqs.receive_message(
            QueueUrl=url, WaitTimeSeconds=20, AttributeNames=["SentTimestamp"]
        )
        outcome["ended"] = time.time()

    waiter = threading.Thread(target=receive)
    waiter.start()
    # The server is waiting once it listens for notifications.
    wait_until(lambda: _listening_backends() > 0, what="the long poll to listen")
    pgq.send(name, "wake up")  # this test's own connection, committed at once
    waiter.join(timeout=60)
    messages = outcome["answer"]["Messages"]
    assert [m["Body"] for m in messages] == ["wake up"]
    # The message did not exist when the receive began: the long poll picked it up.
    assert int(messages[0]["Attributes"]["SentTimestamp"]) >= int(outcome["started"] * 1000)
    print(f"long poll answered {outcome['ended'] - outcome['started']:.3f} s after it began")


def test_a_long_poll_on_an_empty_queue_answers_nothing_after_the_wait(sqs, new_name):
    url = sqs.create_queue(QueueName=new_name(), Attributes={"ReceiveMessageWaitTimeSeconds": "1"})[
        "QueueUrl"
    ]
    assert sqs.receive_message(QueueUrl=url).get("Messages") is None
    with pytest.raises(ClientError) as caught:
        sqs.receive_message(QueueUrl=url, WaitTimeSeconds=21)
    assert _code(caught) == "InvalidParameterValue"


def _dead_letters_from(origin: str, dlq: str, bodies: list[str]) -> None:
    """Dead-letter ``bodies`` from ``origin`` into ``dlq``: each fails its only delivery."""
    pgq.alter_queue(origin, dead_letter_queue=dlq, max_retries=0)
    pgq.send_batch(origin, bodies)
    for message in pgq.read(origin, qty=len(bodies)):
        pgq.nack(origin, message.receipt)
    assert pgq.metrics(origin).queue_length == 0


def test_a_move_task_refuses_to_send_dead_letters_back_to_a_queue_the_caller_may_not_write(
    client_for, make_user, sqs, new_name
):
    # The victim's queue used the dead-letter queue, then stopped; its dead letters stayed.
    victim, dlq = new_name(), new_name()
    pgq.create_queue(victim, owner=make_user())
    pgq.create_queue(dlq, owner=make_user())
    _dead_letters_from(victim, dlq, ["victim's 1", "victim's 2"])
    pgq.alter_queue(victim, dead_letter_queue=None)
    # The attacker manages the dead-letter queue and points a queue of their own at it.
    attacker_user = make_user()
    pgq.grant_queue_access(dlq, attacker_user, read=True, write=True, manage=True)
    attacker = client_for(attacker_user)
    dlq_url = attacker.get_queue_url(QueueName=dlq)["QueueUrl"]
    policy = json.dumps({"deadLetterTargetArn": _arn(attacker, dlq_url), "maxReceiveCount": 1})
    own = attacker.create_queue(QueueName=new_name(), Attributes={"RedrivePolicy": policy})
    _dead_letters_from(_name(own["QueueUrl"]), dlq, ["attacker's"])

    with pytest.raises(ClientError) as caught:
        attacker.start_message_move_task(SourceArn=_arn(attacker, dlq_url))
    assert _code(caught) == "AccessDenied"
    assert victim in caught.value.response["Error"]["Message"]
    # Nothing moved, not even the messages the attacker could have sent back.
    assert pgq.metrics(victim).queue_length == 0
    assert pgq.metrics(_name(own["QueueUrl"])).queue_length == 0
    assert pgq.dead_letter_origins(dlq) == {victim: 2, _name(own["QueueUrl"]): 1}

    # With the right to send to the victim's queue, the same task moves every message home.
    pgq.grant_queue_access(victim, attacker_user, read=False, write=True)
    attacker.start_message_move_task(SourceArn=_arn(attacker, dlq_url))
    assert sorted(m.message for m in pgq.read(victim, qty=10)) == ["victim's 1", "victim's 2"]
    assert [m.message for m in pgq.read(_name(own["QueueUrl"]), qty=10)] == ["attacker's"]
    assert pgq.metrics(dlq).queue_length == 0
