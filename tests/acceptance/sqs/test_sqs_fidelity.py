"""The endpoint answers as Amazon SQS does: the codes, statuses and words of its errors, the
limits it checks per request or per entry, FIFO details and queue URLs, through boto3.

Code written and tested against SQS matches on these (an SDK's retry rules, an app's
``except`` on a message), so each answer here is SQS's own, word for word.
"""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

import pgq_django as pgq

pytestmark = pytest.mark.slow

NO_QUEUE = "The specified queue does not exist."


def _error(caught: pytest.ExceptionInfo[ClientError]) -> tuple[int, str, str]:
    response = caught.value.response
    return (
        int(response["ResponseMetadata"]["HTTPStatusCode"]),
        str(response["Error"]["Code"]),
        str(response["Error"]["Message"]),
    )


def _name(url: str) -> str:
    return url.rsplit("/", 1)[1]


@pytest.fixture
def queue_url(sqs: Any, new_name: Any) -> str:
    return str(sqs.create_queue(QueueName=new_name())["QueueUrl"])


@pytest.fixture
def fifo_url(sqs: Any, new_name: Any) -> str:
    return str(
        sqs.create_queue(QueueName=new_name(fifo=True), Attributes={"FifoQueue": "true"})[
            "QueueUrl"
        ]
    )


# -- error texts ---------------------------------------------------------------------------


def test_a_missing_queue_is_answered_in_sqs_words_by_every_path(sqs, queue_url):
    missing = queue_url + "x"
    with pytest.raises(sqs.exceptions.QueueDoesNotExist) as caught:
        sqs.get_queue_url(QueueName=_name(missing))
    assert _error(caught) == (400, "AWS.SimpleQueueService.NonExistentQueue", NO_QUEUE)
    with pytest.raises(sqs.exceptions.QueueDoesNotExist) as caught:
        sqs.send_message(QueueUrl=missing, MessageBody="x")
    assert _error(caught) == (400, "AWS.SimpleQueueService.NonExistentQueue", NO_QUEUE)
    with pytest.raises(sqs.exceptions.QueueDoesNotExist) as caught:
        sqs.get_queue_attributes(QueueUrl=missing, AttributeNames=["All"])
    assert _error(caught) == (400, "AWS.SimpleQueueService.NonExistentQueue", NO_QUEUE)
    assert not pgq.Queue.objects.filter(name=_name(missing)).exists()


@pytest.mark.parametrize(
    ("action", "entries", "entry_type"),
    [
        ("send_message_batch", [], "SendMessageBatchRequestEntry"),
        ("delete_message_batch", [], "DeleteMessageBatchRequestEntry"),
        ("change_message_visibility_batch", [], "ChangeMessageVisibilityBatchRequestEntry"),
    ],
)
def test_an_empty_batch_names_the_entry_type_of_its_action(
    sqs, queue_url, action, entries, entry_type
):
    pgq.send(_name(queue_url), "kept")
    with pytest.raises(sqs.exceptions.EmptyBatchRequest) as caught:
        getattr(sqs, action)(QueueUrl=queue_url, Entries=entries)
    assert _error(caught) == (
        400,
        "AWS.SimpleQueueService.EmptyBatchRequest",
        f"There should be at least one {entry_type} in the request.",
    )
    assert pgq.metrics(_name(queue_url)).queue_length == 1


@pytest.mark.parametrize(
    ("entries", "code", "message"),
    [
        (
            [{"Id": str(i), "MessageBody": "x"} for i in range(11)],
            "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
            "Maximum number of entries per request are 10. You have sent 11.",
        ),
        (
            [{"Id": "same", "MessageBody": "x"}, {"Id": "same", "MessageBody": "y"}],
            "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
            "Id same repeated.",
        ),
        (
            [{"Id": "has space", "MessageBody": "x"}],
            "AWS.SimpleQueueService.InvalidBatchEntryId",
            "A batch entry id can only contain alphanumeric characters, hyphens and "
            "underscores. It can be at most 80 letters long.",
        ),
        (
            # Each entry is within the queue's 1 MiB, together they are not: the request
            # fails as a whole, not the entry that tips it over.
            [{"Id": "a", "MessageBody": "x" * 600_000}, {"Id": "b", "MessageBody": "y" * 500_000}],
            "AWS.SimpleQueueService.BatchRequestTooLong",
            "Batch requests cannot be longer than 1048576 bytes. You have sent 1100000 bytes.",
        ),
        (
            # An entry over the message limit counts toward the batch's total all the same.
            [{"Id": "a", "MessageBody": "x"}, {"Id": "b", "MessageBody": "y" * 1_048_576}],
            "AWS.SimpleQueueService.BatchRequestTooLong",
            "Batch requests cannot be longer than 1048576 bytes. You have sent 1048577 bytes.",
        ),
    ],
)
def test_batch_limits_refuse_the_whole_request_in_sqs_words(sqs, queue_url, entries, code, message):
    with pytest.raises(ClientError) as caught:
        sqs.send_message_batch(QueueUrl=queue_url, Entries=entries)
    assert _error(caught) == (400, code, message)
    assert pgq.metrics(_name(queue_url)).queue_length == 0


@pytest.mark.parametrize(
    ("missing", "message"),
    [
        ("MessageGroupId", "The request must contain the parameter MessageGroupId."),
        (
            "MessageDeduplicationId",
            "The queue should either have ContentBasedDeduplication enabled or "
            "MessageDeduplicationId provided explicitly",
        ),
    ],
)
def test_a_fifo_batch_entry_without_its_group_or_dedup_id_fails_the_request(
    sqs, fifo_url, missing, message
):
    good = {"Id": "good", "MessageBody": "a", "MessageGroupId": "g", "MessageDeduplicationId": "1"}
    bad = {"Id": "bad", "MessageBody": "b", "MessageGroupId": "g", "MessageDeduplicationId": "2"}
    del bad[missing]
    with pytest.raises(ClientError) as caught:
        sqs.send_message_batch(QueueUrl=fifo_url, Entries=[good, bad])
    assert _error(caught) == (400, "InvalidParameterValue", message)
    assert pgq.metrics(_name(fifo_url)).queue_length == 0  # not even the good entry


def test_tag_queue_without_tags_and_untag_queue_without_keys_are_refused(sqs, queue_url):
    sqs.tag_queue(QueueUrl=queue_url, Tags={"team": "a"})
    with pytest.raises(ClientError) as caught:
        sqs.tag_queue(QueueUrl=queue_url, Tags={})
    assert _error(caught) == (
        400,
        "MissingParameter",
        "The request must contain the parameter Tags.",
    )
    with pytest.raises(ClientError) as caught:
        sqs.untag_queue(QueueUrl=queue_url, TagKeys=[])
    assert _error(caught) == (
        400,
        "InvalidParameterValue",
        "Tag keys must be between 1 and 128 characters in length.",
    )
    assert sqs.list_queue_tags(QueueUrl=queue_url)["Tags"] == {"team": "a"}


@pytest.mark.parametrize("handle", ["garbage", "1:0"])
def test_a_handle_that_is_no_receipt_is_answered_in_sqs_words(sqs, queue_url, handle):
    pgq.send(_name(queue_url), "kept")
    with pytest.raises(sqs.exceptions.ReceiptHandleIsInvalid) as caught:
        sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=handle)
    assert _error(caught) == (
        400,
        "ReceiptHandleIsInvalid",
        f'The input receipt handle "{handle}" is not a valid receipt handle.',
    )
    assert pgq.metrics(_name(queue_url)).queue_length == 1


@pytest.mark.parametrize(
    ("name", "attributes", "message"),
    [
        (
            "bad name",
            {},
            "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length",
        ),
        (
            "plain",
            {"FifoQueue": "true"},
            "The name of a FIFO queue can only include alphanumeric characters, hyphens, or "
            "underscores, must end with .fifo suffix and be 1 to 80 in length.",
        ),
        (
            "wrong.fifo",
            {},
            "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length",
        ),
    ],
)
def test_queue_names_sqs_refuses_are_answered_in_its_words(sqs, name, attributes, message):
    with pytest.raises(ClientError) as caught:
        sqs.create_queue(QueueName=name, Attributes=attributes)
    assert _error(caught) == (400, "InvalidParameterValue", message)
    assert not pgq.Queue.objects.filter(name=name).exists()


@pytest.mark.parametrize(
    ("attributes", "message"),
    [
        (
            {"a": {"DataType": "Text", "StringValue": "x"}},
            "The type of message (user) attribute 'a' is invalid. You must use only the "
            "following supported type prefixes: Binary, Number, String.",
        ),
        (
            {"AWS.a": {"DataType": "String", "StringValue": "x"}},
            "You can't use message attribute names beginning with 'AWS.' or 'Amazon'. These "
            "strings are reserved for internal use.",
        ),
        (
            {"n": {"DataType": "Number", "StringValue": "one"}},
            "Can't cast the value of message (user) attribute 'n' to a number.",
        ),
    ],
)
def test_message_attribute_mistakes_are_answered_in_sqs_words(sqs, queue_url, attributes, message):
    with pytest.raises(ClientError) as caught:
        sqs.send_message(QueueUrl=queue_url, MessageBody="x", MessageAttributes=attributes)
    assert _error(caught) == (400, "InvalidParameterValue", message)
    assert pgq.metrics(_name(queue_url)).queue_length == 0


def test_a_dedup_id_on_a_standard_queue_is_refused_as_sqs_refuses_it(sqs, queue_url):
    with pytest.raises(ClientError) as caught:
        sqs.send_message(QueueUrl=queue_url, MessageBody="x", MessageDeduplicationId="d1")
    assert _error(caught) == (
        400,
        "InvalidParameterValue",
        "Value d1 for parameter MessageDeduplicationId is invalid. Reason: The request "
        "include parameter that is not valid for this queue type.",
    )
    assert pgq.metrics(_name(queue_url)).queue_length == 0


# -- FIFO and DelaySeconds=0 ---------------------------------------------------------------


def test_a_fifo_send_with_an_explicit_zero_delay_is_accepted(sqs, fifo_url):
    sent = sqs.send_message(
        QueueUrl=fifo_url,
        MessageBody="a",
        MessageGroupId="g",
        MessageDeduplicationId="a",
        DelaySeconds=0,
    )
    batch = sqs.send_message_batch(
        QueueUrl=fifo_url,
        Entries=[
            {
                "Id": f"e{i}",
                "MessageBody": body,
                "MessageGroupId": "g",
                "MessageDeduplicationId": body,
                "DelaySeconds": 0,
            }
            for i, body in enumerate("bc")
        ],
    )
    assert batch.get("Failed", []) == []
    assert len(batch["Successful"]) == 2
    assert pgq.metrics(_name(fifo_url)).queue_length == 3
    first = pgq.read(_name(fifo_url))[0]
    assert (first.message, first.msg_id) == ("a", int(sent["MessageId"]))


def test_a_fifo_send_with_a_delay_is_refused_single_and_per_entry(sqs, fifo_url):
    with pytest.raises(ClientError) as caught:
        sqs.send_message(
            QueueUrl=fifo_url,
            MessageBody="a",
            MessageGroupId="g",
            MessageDeduplicationId="a",
            DelaySeconds=5,
        )
    refusal = (
        400,
        "InvalidParameterValue",
        "Value 5 for parameter DelaySeconds is invalid. Reason: The request include parameter "
        "that is not valid for this queue type.",
    )
    assert _error(caught) == refusal
    batch = sqs.send_message_batch(
        QueueUrl=fifo_url,
        Entries=[
            {"Id": "late", "MessageBody": "b", "MessageGroupId": "g", "MessageDeduplicationId": "b"}
            | {"DelaySeconds": 5},
            {"Id": "now", "MessageBody": "c", "MessageGroupId": "g", "MessageDeduplicationId": "c"}
            | {"DelaySeconds": 0},
        ],
    )
    assert [(f["Id"], f["Code"], f["Message"]) for f in batch["Failed"]] == [
        ("late", refusal[1], refusal[2])
    ]
    assert [s["Id"] for s in batch["Successful"]] == ["now"]
    assert [m.message for m in pgq.read(_name(fifo_url), vt=0, qty=10)] == ["c"]


# -- queue URLs ------------------------------------------------------------------------------


def test_a_bare_queue_name_works_as_a_queue_url(sqs, queue_url):
    name = _name(queue_url)
    sent = sqs.send_message(QueueUrl=name, MessageBody="by name")
    got = sqs.receive_message(QueueUrl=name)["Messages"]
    assert got[0]["MessageId"] == sent["MessageId"]
    sqs.delete_message(QueueUrl=name, ReceiptHandle=got[0]["ReceiptHandle"])
    assert pgq.metrics(name).queue_length == 0
    assert sqs.get_queue_attributes(QueueUrl=name, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ].endswith(":" + name)


@pytest.mark.parametrize(
    "url",
    [
        "not a url",
        "ftp://example.test/000000000000/QNAME",
        "http://example.test/QNAME",
        "http://[::1/000000000000/QNAME",
        "https://sqs.us-east-1.amazonaws.com/123456789012/QNAME",  # another account's
    ],
)
def test_a_malformed_or_foreign_queue_url_names_no_queue(sqs, queue_url, url):
    name = _name(queue_url)
    with pytest.raises(sqs.exceptions.QueueDoesNotExist) as caught:
        sqs.send_message(QueueUrl=url.replace("QNAME", name), MessageBody="x")
    assert _error(caught) == (400, "AWS.SimpleQueueService.NonExistentQueue", NO_QUEUE)
    assert pgq.metrics(name).queue_length == 0


# -- high-throughput FIFO attributes ---------------------------------------------------------


def test_fifo_queues_answer_and_keep_their_high_throughput_attributes(sqs, new_name, queue_url):
    name = new_name(fifo=True)
    url = sqs.create_queue(QueueName=name, Attributes={"FifoQueue": "true"})["QueueUrl"]
    found = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (found["DeduplicationScope"], found["FifoThroughputLimit"]) == ("queue", "perQueue")
    sqs.set_queue_attributes(
        QueueUrl=url,
        Attributes={
            "DeduplicationScope": "messageGroup",
            "FifoThroughputLimit": "perMessageGroupId",
        },
    )
    found = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["DeduplicationScope", "FifoThroughputLimit"]
    )["Attributes"]
    assert found == {
        "DeduplicationScope": "messageGroup",
        "FifoThroughputLimit": "perMessageGroupId",
    }
    plain = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["All"])["Attributes"]
    assert "DeduplicationScope" not in plain and "FifoThroughputLimit" not in plain


def test_a_fifo_queue_is_created_with_high_throughput(sqs, new_name):
    name = new_name(fifo=True)
    attributes = {
        "FifoQueue": "true",
        "DeduplicationScope": "messageGroup",
        "FifoThroughputLimit": "perMessageGroupId",
    }
    url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
    queue = pgq.get_queue(name)
    assert (queue.deduplication_scope, queue.fifo_throughput_limit) == (
        "messageGroup",
        "perMessageGroupId",
    )
    # The same CreateQueue again answers the same queue, as SQS does.
    assert sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"] == url


@pytest.mark.parametrize(
    ("attributes", "code"),
    [
        ({"DeduplicationScope": "everywhere"}, "InvalidAttributeValue"),
        ({"FifoThroughputLimit": "perGroup"}, "InvalidAttributeValue"),
        ({"FifoThroughputLimit": "perMessageGroupId"}, "InvalidAttributeValue"),  # scope: queue
        (
            {"FifoThroughputLimit": "perMessageGroupId", "DeduplicationScope": "queue"},
            "InvalidAttributeValue",
        ),
    ],
)
def test_bad_high_throughput_settings_are_refused_and_change_nothing(
    sqs, fifo_url, attributes, code
):
    with pytest.raises(ClientError) as caught:
        sqs.set_queue_attributes(QueueUrl=fifo_url, Attributes=attributes)
    assert _error(caught)[:2] == (400, code)
    queue = pgq.get_queue(_name(fifo_url))
    assert (queue.deduplication_scope, queue.fifo_throughput_limit) == ("queue", "perQueue")


def test_high_throughput_attributes_are_unknown_on_a_standard_queue(sqs, queue_url):
    with pytest.raises(sqs.exceptions.InvalidAttributeName) as caught:
        sqs.set_queue_attributes(QueueUrl=queue_url, Attributes={"DeduplicationScope": "queue"})
    assert _error(caught) == (400, "InvalidAttributeName", "Unknown Attribute DeduplicationScope.")


def test_dedup_per_message_group_lets_groups_reuse_an_id(sqs, new_name):
    url = sqs.create_queue(
        QueueName=new_name(fifo=True),
        Attributes={"FifoQueue": "true", "DeduplicationScope": "messageGroup"},
    )["QueueUrl"]

    def send(group: str, body: str) -> str:
        return str(
            sqs.send_message(
                QueueUrl=url, MessageBody=body, MessageGroupId=group, MessageDeduplicationId="d1"
            )["MessageId"]
        )

    a = send("A", "first A")
    b = send("B", "first B")
    assert a != b  # the same id in another group is another message
    assert send("A", "again A") == a  # a repeat within its group is a duplicate
    got = sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["MessageDeduplicationId"]
    )["Messages"]
    assert [(m["Body"], m["Attributes"]["MessageDeduplicationId"]) for m in got] == [
        ("first A", "d1"),
        ("first B", "d1"),
    ]


def test_dedup_per_queue_is_the_default(sqs, fifo_url):
    first = sqs.send_message(
        QueueUrl=fifo_url, MessageBody="x", MessageGroupId="A", MessageDeduplicationId="d1"
    )
    other_group = sqs.send_message(
        QueueUrl=fifo_url, MessageBody="y", MessageGroupId="B", MessageDeduplicationId="d1"
    )
    assert other_group["MessageId"] == first["MessageId"]
    assert pgq.metrics(_name(fifo_url)).queue_length == 1


@pytest.mark.parametrize(
    ("parameter", "value", "rule"),
    [
        ("MaxNumberOfMessages", 11, "Must be between 1 and 10"),
        ("MaxNumberOfMessages", 0, "Must be between 1 and 10"),
        ("WaitTimeSeconds", 21, "Must be >= 0 and <= 20"),
        ("VisibilityTimeout", 43201, "Must be >= 0 and <= 43200"),
    ],
)
def test_receive_limits_are_refused_in_sqs_words_and_lease_nothing(
    sqs, queue_url, parameter, value, rule
):
    pgq.send(_name(queue_url), "kept")
    with pytest.raises(ClientError) as caught:
        sqs.receive_message(QueueUrl=queue_url, **{parameter: value})
    assert _error(caught) == (
        400,
        "InvalidParameterValue",
        f"Value {value} for parameter {parameter} is invalid. Reason: {rule}, if provided.",
    )
    assert [m.message for m in pgq.read(_name(queue_url))] == ["kept"]  # still visible
