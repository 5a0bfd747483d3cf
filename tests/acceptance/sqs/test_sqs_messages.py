"""Message actions through the real boto3 client: send, receive, delete, visibility, batches,
attributes and their digests."""

from __future__ import annotations

import base64

import pytest
from botocore.exceptions import ClientError

import pgq_django as pgq
from pgq_django.sqs.digests import md5_of_attributes, md5_of_body

pytestmark = pytest.mark.slow


def _code(exc: pytest.ExceptionInfo[ClientError]) -> str:
    return str(exc.value.response["Error"]["Code"])


def _wire(attributes: dict) -> dict:
    """boto3's attribute dicts in wire shape (binary values base64), for the digest."""
    out = {}
    for name, value in attributes.items():
        if "BinaryValue" in value:
            out[name] = {
                "DataType": value["DataType"],
                "BinaryValue": base64.b64encode(value["BinaryValue"]).decode(),
            }
        else:
            out[name] = {"DataType": value["DataType"], "StringValue": value["StringValue"]}
    return out


@pytest.fixture
def queue_url(sqs, new_name):
    return sqs.create_queue(QueueName=new_name())["QueueUrl"]


def _name(url: str) -> str:
    return url.rsplit("/", 1)[1]


def test_send_receive_delete_round_trip(sqs, queue_url):
    body = "héllo 😀 <xml/> \t\n"
    sent = sqs.send_message(QueueUrl=queue_url, MessageBody=body)
    assert sent["MD5OfMessageBody"] == md5_of_body(body)
    assert "MD5OfMessageAttributes" not in sent
    got = sqs.receive_message(QueueUrl=queue_url, AttributeNames=["All"])["Messages"]
    assert len(got) == 1
    message = got[0]
    assert message["Body"] == body
    assert message["MessageId"] == sent["MessageId"]
    assert message["MD5OfBody"] == md5_of_body(body)
    assert message["Attributes"]["ApproximateReceiveCount"] == "1"
    assert int(message["Attributes"]["SentTimestamp"]) > 0
    assert message["Attributes"]["SenderId"].startswith("PGQ")
    assert sqs.receive_message(QueueUrl=queue_url).get("Messages", []) == []
    sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
    assert pgq.read_by_id(_name(queue_url), int(sent["MessageId"])) is None


ALL_TYPES = {
    "text": {"DataType": "String", "StringValue": "héllo"},
    "count": {"DataType": "Number", "StringValue": "-12.50e3"},
    "blob": {"DataType": "Binary", "BinaryValue": bytes(range(256))},
    "label": {"DataType": "String.custom_label", "StringValue": "x"},
    "ratio": {"DataType": "Number.float", "StringValue": "0.5"},
    "image": {"DataType": "Binary.gif", "BinaryValue": b"GIF89a"},
}


def test_message_attributes_of_every_type_round_trip_with_their_digest(sqs, queue_url):
    sent = sqs.send_message(QueueUrl=queue_url, MessageBody="x", MessageAttributes=ALL_TYPES)
    assert sent["MD5OfMessageAttributes"] == md5_of_attributes(_wire(ALL_TYPES))
    message = sqs.receive_message(QueueUrl=queue_url, MessageAttributeNames=["All"])["Messages"][0]
    assert message["MessageAttributes"] == ALL_TYPES
    assert message["MD5OfMessageAttributes"] == sent["MD5OfMessageAttributes"]
    # Stored for every other consumer: a String attribute is its plain string.
    stored = pgq.read_by_id(_name(queue_url), int(sent["MessageId"])).attributes
    assert stored["text"] == "héllo"
    assert stored["count"] == {"DataType": "Number", "StringValue": "-12.50e3"}


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        ([], set()),
        (["All"], set(ALL_TYPES)),
        ([".*"], set(ALL_TYPES)),
        (["text", "blob", "missing"], {"text", "blob"}),
        (["ra.*", "image"], {"ratio", "image"}),  # SQS's prefix: the characters before ".*"
        (["lab.*"], {"label"}),
    ],
)
def test_message_attribute_names_choose_what_comes_back(sqs, queue_url, names, expected):
    sqs.send_message(QueueUrl=queue_url, MessageBody="x", MessageAttributes=ALL_TYPES)
    message = sqs.receive_message(QueueUrl=queue_url, MessageAttributeNames=names)["Messages"][0]
    returned = message.get("MessageAttributes", {})
    assert set(returned) == expected
    if expected:
        subset = {k: v for k, v in ALL_TYPES.items() if k in expected}
        assert message["MD5OfMessageAttributes"] == md5_of_attributes(_wire(subset))
    else:
        assert "MD5OfMessageAttributes" not in message


def test_messages_sent_with_the_python_api_read_through_sqs(sqs, queue_url):
    pgq.send(_name(queue_url), {"order": 7}, attributes={"n": 5, "s": "x", "o": [1, 2]})
    message = sqs.receive_message(QueueUrl=queue_url, MessageAttributeNames=["All"])["Messages"][0]
    assert message["Body"] == '{"order":7}'
    assert message["MD5OfBody"] == md5_of_body('{"order":7}')
    assert message["MessageAttributes"] == {
        "n": {"DataType": "Number", "StringValue": "5"},
        "s": {"DataType": "String", "StringValue": "x"},
        "o": {"DataType": "String", "StringValue": "[1,2]"},
    }


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"MessageBody": "bad \x01 char"}, "InvalidMessageContents"),
        ({"MessageBody": "nul \x00"}, "InvalidMessageContents"),
        ({"MessageBody": "x" * 1025}, "InvalidParameterValue"),  # queue max is 1024 here
        (
            {
                "MessageBody": "x" * 1000,
                "MessageAttributes": {"a": {"DataType": "String", "StringValue": "y" * 30}},
            },
            "InvalidParameterValue",
        ),
        ({"MessageBody": "x", "DelaySeconds": 901}, "InvalidParameterValue"),
        ({"MessageBody": "x", "MessageDeduplicationId": "d"}, "InvalidParameterValue"),
        (
            {
                "MessageBody": "x",
                "MessageAttributes": {
                    f"a{i}": {"DataType": "String", "StringValue": "v"} for i in range(11)
                },
            },
            "InvalidParameterValue",
        ),
        (
            {
                "MessageBody": "x",
                "MessageAttributes": {"AWS.x": {"DataType": "String", "StringValue": "v"}},
            },
            "InvalidParameterValue",
        ),
        (
            {
                "MessageBody": "x",
                "MessageAttributes": {"a": {"DataType": "Number", "StringValue": "abc"}},
            },
            "InvalidParameterValue",
        ),
        (
            {
                "MessageBody": "x",
                "MessageAttributes": {"a": {"DataType": "String", "StringValue": ""}},
            },
            "InvalidParameterValue",
        ),
        (
            {
                "MessageBody": "x",
                "MessageAttributes": {"a": {"DataType": "Text", "StringValue": "v"}},
            },
            "InvalidParameterValue",
        ),
        (
            {
                "MessageBody": "x",
                "MessageAttributes": {"a": {"DataType": "String", "StringValue": "\x02"}},
            },
            "InvalidMessageContents",
        ),
    ],
)
def test_bad_messages_are_refused_and_nothing_is_sent(sqs, new_name, kwargs, code):
    name = new_name()
    url = sqs.create_queue(QueueName=name, Attributes={"MaximumMessageSize": "1024"})["QueueUrl"]
    with pytest.raises(ClientError) as caught:
        sqs.send_message(QueueUrl=url, **kwargs)
    assert _code(caught) == code
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert pgq.metrics(name).queue_length == 0


def test_a_message_at_the_size_limit_is_accepted(sqs, new_name):
    name = new_name()
    url = sqs.create_queue(QueueName=name, Attributes={"MaximumMessageSize": "1024"})["QueueUrl"]
    sqs.send_message(
        QueueUrl=url,
        MessageBody="x" * 1000,
        MessageAttributes={"ab": {"DataType": "String", "StringValue": "y" * 16}},  # 1024 bytes
    )
    assert pgq.metrics(name).queue_length == 1


def test_delay_seconds_hides_a_message_until_it_passes(sqs, queue_url):
    sqs.send_message(QueueUrl=queue_url, MessageBody="later", DelaySeconds=900)
    assert sqs.receive_message(QueueUrl=queue_url).get("Messages", []) == []
    counts = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["All"])["Attributes"]
    assert counts["ApproximateNumberOfMessagesDelayed"] == "1"


def test_a_stale_receipt_handle_deletes_nothing_and_cannot_change_visibility(sqs, queue_url):
    sqs.send_message(QueueUrl=queue_url, MessageBody="x")
    first = sqs.receive_message(QueueUrl=queue_url, VisibilityTimeout=0)["Messages"][0]
    second = sqs.receive_message(QueueUrl=queue_url, AttributeNames=["ApproximateReceiveCount"])[
        "Messages"
    ][0]
    assert second["Attributes"]["ApproximateReceiveCount"] == "2"
    assert first["ReceiptHandle"] != second["ReceiptHandle"]
    msg_id = int(first["MessageId"])
    # SQS: a DeleteMessage with an older handle succeeds but does not delete the message.
    sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=first["ReceiptHandle"])
    assert pgq.read_by_id(_name(queue_url), msg_id) is not None
    with pytest.raises(ClientError) as caught:
        sqs.change_message_visibility(
            QueueUrl=queue_url, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=0
        )
    assert _code(caught) == "InvalidParameterValue"  # as SQS answers an expired handle
    assert caught.value.response["Error"]["Message"] == (
        f"Value {first['ReceiptHandle']} for parameter ReceiptHandle is invalid. Reason: The "
        "receipt handle has expired."
    )
    sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=second["ReceiptHandle"])
    assert pgq.read_by_id(_name(queue_url), msg_id) is None


@pytest.mark.parametrize("handle", ["garbage", "1:0", "0:1", "99999999999999999999:1", "1:1:1", ""])
def test_malformed_receipt_handles_are_invalid(sqs, queue_url, handle):
    sqs.send_message(QueueUrl=queue_url, MessageBody="x")
    with pytest.raises(sqs.exceptions.ReceiptHandleIsInvalid) as caught:
        sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=handle)
    assert _code(caught) == "ReceiptHandleIsInvalid"
    assert pgq.metrics(_name(queue_url)).queue_length == 1


def test_change_message_visibility_ends_or_extends_a_lease(sqs, queue_url):
    sqs.send_message(QueueUrl=queue_url, MessageBody="x")
    message = sqs.receive_message(QueueUrl=queue_url)["Messages"][0]
    sqs.change_message_visibility(
        QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
    )
    again = sqs.receive_message(QueueUrl=queue_url, VisibilityTimeout=600)["Messages"]
    assert [m["MessageId"] for m in again] == [message["MessageId"]]
    with pytest.raises(ClientError) as caught:
        sqs.change_message_visibility(
            QueueUrl=queue_url, ReceiptHandle=again[0]["ReceiptHandle"], VisibilityTimeout=43201
        )
    assert _code(caught) == "InvalidParameterValue"


def test_receive_returns_up_to_max_number_of_messages(sqs, queue_url):
    sqs.send_message_batch(
        QueueUrl=queue_url,
        Entries=[{"Id": str(i), "MessageBody": f"m{i}"} for i in range(10)],
    )
    assert len(sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=4)["Messages"]) == 4
    assert len(sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10)["Messages"]) == 6
    with pytest.raises(ClientError) as caught:
        sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=11)
    assert _code(caught) == "InvalidParameterValue"


def test_send_message_batch_answers_each_entry(sqs, queue_url):
    entries = [
        {"Id": "plain1", "MessageBody": "a"},
        {"Id": "plain2", "MessageBody": "b"},
        {"Id": "bad", "MessageBody": "c", "DelaySeconds": 9999},
        {
            "Id": "attrs",
            "MessageBody": "d",
            "MessageAttributes": {"k": {"DataType": "String", "StringValue": "v"}},
        },
        {"Id": "delayed", "MessageBody": "e", "DelaySeconds": 600},
    ]
    result = sqs.send_message_batch(QueueUrl=queue_url, Entries=entries)
    assert [e["Id"] for e in result["Successful"]] == ["plain1", "plain2", "attrs", "delayed"]
    assert [(f["Id"], f["Code"], f["SenderFault"]) for f in result["Failed"]] == [
        ("bad", "InvalidParameterValue", True)
    ]
    by_id = {e["Id"]: e for e in result["Successful"]}
    assert by_id["plain2"]["MD5OfMessageBody"] == md5_of_body("b")
    assert by_id["attrs"]["MD5OfMessageAttributes"] == md5_of_attributes(
        {"k": {"DataType": "String", "StringValue": "v"}}
    )
    assert int(by_id["plain1"]["MessageId"]) < int(by_id["plain2"]["MessageId"])
    metrics = pgq.metrics(_name(queue_url))
    assert (metrics.queue_length, metrics.delayed) == (4, 1)


@pytest.mark.parametrize(
    ("entries", "code"),
    [
        (
            [{"Id": str(i), "MessageBody": "x"} for i in range(11)],
            "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
        ),
        (
            [{"Id": "same", "MessageBody": "x"}, {"Id": "same", "MessageBody": "y"}],
            "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
        ),
        ([{"Id": "has space", "MessageBody": "x"}], "AWS.SimpleQueueService.InvalidBatchEntryId"),
        ([], "AWS.SimpleQueueService.EmptyBatchRequest"),
        (
            [{"Id": str(i), "MessageBody": "x" * 200_000} for i in range(6)],
            "AWS.SimpleQueueService.BatchRequestTooLong",
        ),
    ],
)
def test_bad_batches_are_refused_whole(sqs, queue_url, entries, code):
    with pytest.raises(ClientError) as caught:
        sqs.send_message_batch(QueueUrl=queue_url, Entries=entries)
    assert _code(caught) == code
    assert pgq.metrics(_name(queue_url)).queue_length == 0


def test_delete_and_change_visibility_batches_answer_each_entry(sqs, queue_url):
    sqs.send_message_batch(
        QueueUrl=queue_url, Entries=[{"Id": str(i), "MessageBody": str(i)} for i in range(3)]
    )
    got = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=3)["Messages"]
    changed = sqs.change_message_visibility_batch(
        QueueUrl=queue_url,
        Entries=[
            {"Id": "a", "ReceiptHandle": got[0]["ReceiptHandle"], "VisibilityTimeout": 0},
            {"Id": "b", "ReceiptHandle": "nonsense", "VisibilityTimeout": 0},
        ],
    )
    assert [e["Id"] for e in changed["Successful"]] == ["a"]
    assert [(f["Id"], f["Code"]) for f in changed["Failed"]] == [("b", "ReceiptHandleIsInvalid")]
    deleted = sqs.delete_message_batch(
        QueueUrl=queue_url,
        Entries=[
            {"Id": "x", "ReceiptHandle": got[1]["ReceiptHandle"]},
            {"Id": "y", "ReceiptHandle": got[2]["ReceiptHandle"]},
            {"Id": "z", "ReceiptHandle": "nonsense"},
        ],
    )
    assert [e["Id"] for e in deleted["Successful"]] == ["x", "y"]
    assert [(f["Id"], f["Code"]) for f in deleted["Failed"]] == [("z", "ReceiptHandleIsInvalid")]
    remaining = pgq.read(_name(queue_url), qty=10)
    assert [m.msg_id for m in remaining] == [int(got[0]["MessageId"])]


def test_a_paused_queue_delivers_nothing(sqs, queue_url):
    sqs.send_message(QueueUrl=queue_url, MessageBody="x")
    pgq.pause_queue(_name(queue_url))
    assert sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=1).get("Messages", []) == []
    pgq.resume_queue(_name(queue_url))
    assert len(sqs.receive_message(QueueUrl=queue_url)["Messages"]) == 1
