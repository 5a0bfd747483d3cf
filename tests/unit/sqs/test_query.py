"""The Query protocol's translation: a form into the JSON protocol's parameters, an answer
into SQS's XML. (The real older client drives it end to end in
tests/acceptance/sqs/test_sqs_query.py.)"""

from __future__ import annotations

from urllib.parse import urlencode
from xml.etree import ElementTree

import pytest

from pgq_django.sqs.errors import SqsError
from pgq_django.sqs.query import NAMESPACE, read, render, render_error

NS = {"sqs": NAMESPACE}


def test_flattened_maps_lists_and_numbers_become_the_json_parameters() -> None:
    body = urlencode(
        {
            "Action": "SendMessage",
            "Version": "2012-11-05",
            "QueueUrl": "q",
            "MessageBody": "x",
            "DelaySeconds": "5",
            "MessageAttribute.2.Name": "b",
            "MessageAttribute.2.Value.DataType": "Binary",
            "MessageAttribute.2.Value.BinaryValue": "AAE=",
            "MessageAttribute.1.Name": "a",
            "MessageAttribute.1.Value.DataType": "String",
            "MessageAttribute.1.Value.StringValue": "v",
        }
    ).encode()
    assert read(body) == (
        "SendMessage",
        {
            "QueueUrl": "q",
            "MessageBody": "x",
            "DelaySeconds": 5,
            "MessageAttributes": {
                "a": {"DataType": "String", "StringValue": "v"},
                "b": {"DataType": "Binary", "BinaryValue": "AAE="},
            },
        },
    )


def test_batch_entries_lists_and_tags_follow_their_action() -> None:
    body = urlencode(
        {
            "Action": "ChangeMessageVisibilityBatch",
            "QueueUrl": "q",
            "ChangeMessageVisibilityBatchRequestEntry.1.Id": "a",
            "ChangeMessageVisibilityBatchRequestEntry.1.ReceiptHandle": "1:1",
            "ChangeMessageVisibilityBatchRequestEntry.1.VisibilityTimeout": "0",
        }
    ).encode()
    assert read(body)[1]["Entries"] == [{"Id": "a", "ReceiptHandle": "1:1", "VisibilityTimeout": 0}]
    create = urlencode({"Action": "CreateQueue", "Tag.1.Key": "k", "Tag.1.Value": "v"}).encode()
    assert read(create)[1] == {"tags": {"k": "v"}}
    tag = urlencode({"Action": "TagQueue", "Tag.1.Key": "k", "Tag.1.Value": "v"}).encode()
    assert read(tag)[1] == {"Tags": {"k": "v"}}
    untag = urlencode({"Action": "UntagQueue", "TagKey.1": "a", "TagKey.2": "b"}).encode()
    assert read(untag)[1] == {"TagKeys": ["a", "b"]}
    empty = urlencode({"Action": "SendMessageBatch", "Entries": ""}).encode()
    assert read(empty)[1] == {"Entries": []}


@pytest.mark.parametrize(
    "body",
    [
        b"Action=SendMessage&QueueUrl=a&QueueUrl=b",  # a name twice
        b"Action=SendMessage&Attribute=1&Attribute.1.Name=x",  # a value and a structure
        b"Action=GetQueueAttributes&AttributeName.x=All",  # not an index
        b"Action=SendMessage&\xff=1",  # not UTF-8
        b"Action=SendMessage&%zz",  # not a form
    ],
)
def test_malformed_forms_are_invalid_parameter_values(body: bytes) -> None:
    with pytest.raises(SqsError) as caught:
        read(body)
    assert caught.value.code == "InvalidParameterValue"


def test_an_answer_is_xml_with_flattened_lists_and_maps_and_a_kept_cr() -> None:
    xml = render(
        "ReceiveMessage",
        {
            "Messages": [
                {
                    "MessageId": "1",
                    "Body": "a\r\n<b> & c",
                    "Attributes": {"ApproximateReceiveCount": "1"},
                    "MessageAttributes": {"n": {"DataType": "Number", "StringValue": "5"}},
                }
            ]
        },
        "req-1",
    )
    assert b"a&#xD;\n&lt;b&gt; &amp; c" in xml
    root = ElementTree.fromstring(xml)
    message = root.find("sqs:ReceiveMessageResult/sqs:Message", NS)
    assert message is not None
    assert message.findtext("sqs:Body", namespaces=NS) == "a\r\n<b> & c"
    assert message.findtext("sqs:Attribute/sqs:Name", namespaces=NS) == "ApproximateReceiveCount"
    assert message.findtext("sqs:MessageAttribute/sqs:Value/sqs:DataType", namespaces=NS) == (
        "Number"
    )
    assert root.findtext("sqs:ResponseMetadata/sqs:RequestId", namespaces=NS) == "req-1"


def test_batch_answers_name_their_entries_and_failures() -> None:
    xml = render(
        "DeleteMessageBatch",
        {
            "Successful": [{"Id": "a"}],
            "Failed": [{"Id": "b", "SenderFault": True, "Code": "X", "Message": "m"}],
        },
        "r",
    )
    root = ElementTree.fromstring(xml)
    result = root.find("sqs:DeleteMessageBatchResult", NS)
    assert result is not None
    assert result.findtext("sqs:DeleteMessageBatchResultEntry/sqs:Id", namespaces=NS) == "a"
    assert result.findtext("sqs:BatchResultErrorEntry/sqs:SenderFault", namespaces=NS) == "true"


def test_an_error_is_sqs_error_response() -> None:
    error = SqsError("AWS.SimpleQueueService.NonExistentQueue", "The specified queue <x>.")
    root = ElementTree.fromstring(render_error(error, "r"))
    assert root.findtext("sqs:Error/sqs:Code", namespaces=NS) == error.code
    assert root.findtext("sqs:Error/sqs:Type", namespaces=NS) == "Sender"
    assert root.findtext("sqs:Error/sqs:Message", namespaces=NS) == "The specified queue <x>."
    assert root.findtext("sqs:RequestId", namespaces=NS) == "r"
