"""SQS queue attributes to queue settings and back (:mod:`pgq_django.sqs.attributes`), for
every attribute that needs no other queue looked up: whole-number ranges, flags, the
attributes that cannot be set, and how a queue's settings are answered as strings."""

from __future__ import annotations

import datetime

import pytest

from pgq_django.models import Queue
from pgq_django.sqs.attributes import NUMBERS, describe, matches, queue_changes
from pgq_django.sqs.auth import Caller
from pgq_django.sqs.errors import SqsError
from pgq_django.sqs.params import Call

CALL = Call(
    action="SetQueueAttributes",
    params={},
    caller=Caller(key_id="AKID", user=None, region="eu-west-1"),
    endpoint_url=lambda: "https://sqs.example.test/",
)


def refusal(attributes: dict[str, str], *, fifo: bool = False, creating: bool = False) -> SqsError:
    with pytest.raises(SqsError) as caught:
        queue_changes(CALL, attributes, fifo=fifo, creating=creating)
    return caught.value


@pytest.mark.parametrize(("name", "bounds"), NUMBERS.items())
def test_each_whole_number_attribute_takes_exactly_its_sqs_range(name, bounds) -> None:
    field, low, high = bounds
    assert queue_changes(CALL, {name: str(low)}, fifo=False, creating=False) == {field: low}
    assert queue_changes(CALL, {name: str(high)}, fifo=False, creating=False) == {field: high}
    for outside in (str(high + 1), str(low - 1)):
        error = refusal({name: outside})
        assert error.code == "InvalidAttributeValue"
        assert error.message == (
            f"Invalid value for the parameter {name}. Reason: must be an integer between "
            f"{low} and {high}."
        )


@pytest.mark.parametrize(
    "value",
    [
        "",
        "30.0",
        " 30",
        "+30",
        "3e1",
        "thirty",
        "1" * 11,
        "\u0663\u0660",
        "\uff13\uff10",
        "3\u00b2",
    ],
)
def test_whole_number_attributes_are_plain_decimal_digits(value: str) -> None:
    assert refusal({"VisibilityTimeout": value}).code == "InvalidAttributeValue"


@pytest.mark.parametrize(("value", "expected"), [("true", True), ("FALSE", False), ("True", True)])
def test_content_based_deduplication_is_a_boolean_of_fifo_queues(value, expected) -> None:
    changes = queue_changes(CALL, {"ContentBasedDeduplication": value}, fifo=True, creating=False)
    assert changes == {"content_based_deduplication": expected}
    assert "only FIFO queues" in refusal({"ContentBasedDeduplication": value}).message
    assert (
        "must be true or false" in refusal({"ContentBasedDeduplication": "yes"}, fifo=True).message
    )


def test_fifo_queue_must_agree_with_the_name_when_creating_and_cannot_be_set_later() -> None:
    assert queue_changes(CALL, {"FifoQueue": "true"}, fifo=True, creating=True) == {}
    assert "ends in .fifo" in refusal({"FifoQueue": "true"}, fifo=False, creating=True).message
    later = refusal({"FifoQueue": "true"}, fifo=True, creating=False)
    assert (later.code, later.message) == (
        "InvalidAttributeName",
        "The attribute FifoQueue cannot be changed.",
    )


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("QueueArn", "The attribute QueueArn cannot be changed."),
        ("ApproximateNumberOfMessages", "cannot be changed"),
        ("CreatedTimestamp", "cannot be changed"),
        ("Colour", "Unknown Attribute Colour."),
        ("visibilitytimeout", "Unknown Attribute visibilitytimeout."),
    ],
)
def test_read_only_and_unknown_attributes_are_invalid_attribute_names(name, message) -> None:
    error = refusal({name: "1"})
    assert error.code == "InvalidAttributeName"
    assert message in error.message


def test_one_bad_attribute_refuses_the_whole_request() -> None:
    error = refusal({"DelaySeconds": "5", "VisibilityTimeout": "-1"})
    assert "VisibilityTimeout" in error.message


def _queue(**fields) -> Queue:
    """An unsaved queue row: describe reads only its fields here."""
    created = datetime.datetime(2026, 3, 14, 15, 9, 26, 500000, tzinfo=datetime.UTC)
    defaults = {"name": "jobs", "created_at": created, "updated_at": created}
    return Queue(**{**defaults, **fields})


def test_settings_are_answered_as_sqs_strings_whole_numbers_without_a_fraction() -> None:
    queue = _queue(visibility_timeout=30.0, delivery_delay=2.5, max_message_size=2048)
    answer = describe(
        CALL,
        queue,
        ["VisibilityTimeout", "DelaySeconds", "MaximumMessageSize", "CreatedTimestamp", "QueueArn"],
    )
    assert answer == {
        "VisibilityTimeout": "30",
        "DelaySeconds": "2.5",
        "MaximumMessageSize": "2048",
        "CreatedTimestamp": "1773500966",
        "QueueArn": "arn:aws:sqs:eu-west-1:000000000000:jobs",
    }


def test_fifo_attributes_are_answered_only_for_fifo_queues() -> None:
    wanted = ["FifoQueue", "ContentBasedDeduplication", "DeduplicationScope", "FifoThroughputLimit"]
    assert describe(CALL, _queue(), wanted) == {}
    fifo = _queue(name="jobs.fifo", fifo=True, content_based_deduplication=True)
    assert describe(CALL, fifo, wanted) == {
        "FifoQueue": "true",
        "ContentBasedDeduplication": "true",
        "DeduplicationScope": "queue",
        "FifoThroughputLimit": "perQueue",
    }


def test_describing_an_unknown_attribute_names_it() -> None:
    with pytest.raises(SqsError) as caught:
        describe(CALL, _queue(), ["VisibilityTimeout", "Bogus"])
    assert (caught.value.code, caught.value.message) == (
        "InvalidAttributeName",
        "Unknown Attribute Bogus.",
    )


def test_create_queue_on_an_existing_name_matches_only_identical_attributes() -> None:
    queue = _queue(visibility_timeout=30.0, delivery_delay=0.0)
    assert matches(CALL, queue, {"VisibilityTimeout": "30"})
    assert matches(CALL, queue, {})
    assert not matches(CALL, queue, {"VisibilityTimeout": "31"})
    assert not matches(CALL, queue, {"VisibilityTimeout": "-1"})  # invalid: no match, no error
