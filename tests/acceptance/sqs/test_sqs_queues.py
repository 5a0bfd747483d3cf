"""Queue actions through the real boto3 client against the live endpoint."""

from __future__ import annotations

import json

import pytest
from botocore.exceptions import ClientError

import pgq_django as pgq

pytestmark = pytest.mark.slow


def _code(exc: pytest.ExceptionInfo[ClientError]) -> str:
    return str(exc.value.response["Error"]["Code"])


def test_create_queue_returns_its_url_and_makes_the_caller_its_owner(sqs, user, new_name):
    name = new_name()
    url = sqs.create_queue(QueueName=name, tags={"team": "shop"})["QueueUrl"]
    assert url.endswith(f"/sqs/000000000000/{name}")
    queue = pgq.get_queue(name)
    assert queue.owner_id == user.pk
    assert queue.tags == {"team": "shop"}
    # SQS's defaults, not pgq's: 4 days of retention, no receive limit without a RedrivePolicy.
    assert queue.retention == 4 * 24 * 3600
    assert queue.dead_letter_queue_id is None
    assert sqs.get_queue_url(QueueName=name)["QueueUrl"] == url


def test_create_queue_with_attributes_sets_the_queue(sqs, new_name):
    name = new_name()
    sqs.create_queue(
        QueueName=name,
        Attributes={
            "VisibilityTimeout": "45",
            "DelaySeconds": "5",
            "MessageRetentionPeriod": "3600",
            "MaximumMessageSize": "2048",
            "ReceiveMessageWaitTimeSeconds": "7",
        },
    )
    queue = pgq.get_queue(name)
    assert (
        queue.visibility_timeout,
        queue.delivery_delay,
        queue.retention,
        queue.max_message_size,
        queue.receive_wait_time,
    ) == (45, 5, 3600, 2048, 7)


def test_create_queue_again_with_the_same_attributes_answers_the_same_url(sqs, new_name):
    name = new_name()
    first = sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "40"})
    again = sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "40"})
    assert first["QueueUrl"] == again["QueueUrl"]
    with pytest.raises(sqs.exceptions.QueueNameExists) as caught:
        sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "41"})
    assert _code(caught) == "QueueAlreadyExists"
    assert pgq.get_queue(name).visibility_timeout == 40


@pytest.mark.parametrize(
    ("name", "attributes"),
    [
        ("bad name!", {}),
        ("x" * 81, {}),
        ("ends.fifo", {}),  # a .fifo name needs FifoQueue=true
        ("plain", {"FifoQueue": "true"}),
        ("ok", {"VisibilityTimeout": "43201"}),
        ("ok", {"DelaySeconds": "-1"}),
        ("ok", {"MessageRetentionPeriod": "59"}),
        ("ok", {"MaximumMessageSize": "1023"}),
        ("ok", {"ReceiveMessageWaitTimeSeconds": "21"}),
        ("ok", {"VisibilityTimeout": "3.5"}),
        ("ok", {"ContentBasedDeduplication": "true"}),  # only for FIFO queues
        ("ok", {"RedrivePolicy": "{not json"}),
        ("ok", {"Policy": "{}"}),
        ("ok", {"QueueArn": "arn:aws:sqs:us-east-1:000000000000:ok"}),
    ],
)
def test_bad_create_queue_requests_create_nothing(sqs, new_name, name, attributes):
    name = name.replace("ok", new_name()).replace("plain", new_name())
    before = {q.name for q in pgq.list_queues()}
    with pytest.raises(ClientError) as caught:
        sqs.create_queue(QueueName=name, Attributes=attributes)
    assert _code(caught) in {
        "InvalidParameterValue",
        "InvalidAttributeValue",
        "InvalidAttributeName",
    }
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert {q.name for q in pgq.list_queues()} == before


def test_a_user_without_the_add_queue_permission_cannot_create_queues(
    client_for, make_user, new_name
):
    outsider = client_for(make_user(creator=False))
    name = new_name()
    with pytest.raises(ClientError) as caught:
        outsider.create_queue(QueueName=name)
    assert _code(caught) == "AccessDenied"
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert not pgq.Queue.objects.filter(name=name).exists()


def test_fifo_queue_attributes(sqs, new_name):
    name = new_name(fifo=True)
    url = sqs.create_queue(
        QueueName=name, Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"}
    )["QueueUrl"]
    found = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert found["FifoQueue"] == "true"
    assert found["ContentBasedDeduplication"] == "true"
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"ContentBasedDeduplication": "false"})
    assert pgq.get_queue(name).content_based_deduplication is False
    with pytest.raises(ClientError) as caught:
        sqs.set_queue_attributes(QueueUrl=url, Attributes={"FifoQueue": "false"})
    assert _code(caught) == "InvalidAttributeName"
    assert pgq.get_queue(name).fifo is True


def test_get_queue_attributes_reports_every_attribute_and_the_counts(sqs, new_name):
    name = new_name()
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    pgq.send(name, "visible")
    pgq.send(name, "delayed", delay=600)
    pgq.send(name, "leased")
    pgq.read(name, qty=1)  # leases "visible", the oldest
    found = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert found["ApproximateNumberOfMessages"] == "1"
    assert found["ApproximateNumberOfMessagesNotVisible"] == "1"
    assert found["ApproximateNumberOfMessagesDelayed"] == "1"
    assert found["QueueArn"] == f"arn:aws:sqs:eu-west-1:000000000000:{name}"
    assert found["VisibilityTimeout"] == "30"
    assert found["MaximumMessageSize"] == "1048576"
    assert int(found["CreatedTimestamp"]) <= int(found["LastModifiedTimestamp"])
    assert "RedrivePolicy" not in found and "FifoQueue" not in found
    some = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["DelaySeconds"])
    assert some["Attributes"] == {"DelaySeconds": "0"}
    with pytest.raises(ClientError) as caught:
        sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["NoSuchAttribute"])
    assert _code(caught) == "InvalidAttributeName"


def test_set_queue_attributes_checks_every_value_before_changing_any(sqs, new_name):
    name = new_name()
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    with pytest.raises(ClientError) as caught:
        sqs.set_queue_attributes(
            QueueUrl=url, Attributes={"VisibilityTimeout": "60", "DelaySeconds": "901"}
        )
    assert _code(caught) == "InvalidAttributeValue"
    assert pgq.get_queue(name).visibility_timeout == 30
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"VisibilityTimeout": "60"})
    assert pgq.get_queue(name).visibility_timeout == 60


def test_redrive_policy_round_trips_and_can_be_removed(sqs, new_name):
    dlq_url = sqs.create_queue(QueueName=new_name())["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    name = new_name()
    url = sqs.create_queue(
        QueueName=name,
        Attributes={
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "3"})
        },
    )["QueueUrl"]
    policy = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["RedrivePolicy"])
    assert json.loads(policy["Attributes"]["RedrivePolicy"]) == {
        "deadLetterTargetArn": dlq_arn,
        "maxReceiveCount": 3,
    }
    assert sqs.list_dead_letter_source_queues(QueueUrl=dlq_url)["queueUrls"] == [url]
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": ""})
    assert pgq.get_queue(name).dead_letter_queue_id is None
    assert sqs.list_dead_letter_source_queues(QueueUrl=dlq_url)["queueUrls"] == []


def test_a_redrive_policy_naming_a_missing_queue_changes_nothing(sqs, new_name):
    name = new_name()
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    missing = json.dumps(
        {"deadLetterTargetArn": "arn:aws:sqs:eu-west-1:000000000000:nope", "maxReceiveCount": 2}
    )
    with pytest.raises(ClientError) as caught:
        sqs.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": missing})
    assert _code(caught) == "InvalidAttributeValue"
    assert pgq.get_queue(name).dead_letter_queue_id is None


def test_list_queues_filters_by_prefix_and_pages(sqs, new_name):
    prefix = new_name()
    names = sorted(f"{prefix}_{i}" for i in range(5))
    for name in names:
        sqs.create_queue(QueueName=name)
    every = sqs.list_queues(QueueNamePrefix=prefix)["QueueUrls"]
    assert [u.rsplit("/", 1)[1] for u in every] == names
    seen, token = [], None
    while True:
        kwargs = {"QueueNamePrefix": prefix, "MaxResults": 2}
        if token:
            kwargs["NextToken"] = token
        page = sqs.list_queues(**kwargs)
        seen += [u.rsplit("/", 1)[1] for u in page["QueueUrls"]]
        token = page.get("NextToken")
        if not token:
            break
    assert seen == names
    paginated = sqs.get_paginator("list_queues").paginate(
        QueueNamePrefix=prefix, PaginationConfig={"PageSize": 3}
    )
    assert [u.rsplit("/", 1)[1] for p in paginated for u in p["QueueUrls"]] == names


def test_list_queues_shows_only_queues_the_caller_has_rights_on(
    sqs, client_for, make_user, new_name
):
    prefix = new_name()
    sqs.create_queue(QueueName=f"{prefix}_mine")
    sqs.create_queue(QueueName=f"{prefix}_shared")
    other_user = make_user(creator=False)
    pgq.grant_queue_access(f"{prefix}_shared", other_user, read=True, write=False)
    other = client_for(other_user)
    urls = other.list_queues(QueueNamePrefix=prefix).get("QueueUrls", [])
    assert [u.rsplit("/", 1)[1] for u in urls] == [f"{prefix}_shared"]


def test_tags_are_added_listed_and_removed(sqs, new_name):
    name = new_name()
    url = sqs.create_queue(QueueName=name, tags={"a": "1"})["QueueUrl"]
    sqs.tag_queue(QueueUrl=url, Tags={"b": "2", "a": "one"})
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"a": "one", "b": "2"}
    sqs.untag_queue(QueueUrl=url, TagKeys=["a", "zzz"])
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"b": "2"}
    too_many = {f"k{i}": "v" for i in range(51)}
    with pytest.raises(ClientError) as caught:
        sqs.tag_queue(QueueUrl=url, Tags=too_many)
    assert _code(caught) == "InvalidParameterValue"
    assert pgq.get_queue(name).tags == {"b": "2"}


def test_purge_and_delete_queue(sqs, new_name):
    name = new_name()
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    pgq.send_batch(name, ["a", "b"])
    sqs.purge_queue(QueueUrl=url)
    assert pgq.metrics(name).queue_length == 0
    sqs.delete_queue(QueueUrl=url)
    assert not pgq.Queue.objects.filter(name=name).exists()
    with pytest.raises(sqs.exceptions.QueueDoesNotExist) as caught:
        sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])
    assert _code(caught) == "AWS.SimpleQueueService.NonExistentQueue"


def test_unknown_queues_and_foreign_accounts_do_not_exist(sqs, new_name):
    url = sqs.create_queue(QueueName=new_name())["QueueUrl"]
    for missing in (url + "x", url.replace("000000000000", "123456789012")):
        with pytest.raises(sqs.exceptions.QueueDoesNotExist):
            sqs.send_message(QueueUrl=missing, MessageBody="x")
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.get_queue_url(QueueName="no_such_queue_here")
    with pytest.raises(sqs.exceptions.QueueDoesNotExist) as caught:
        sqs.send_message(QueueUrl="not a url", MessageBody="x")
    assert _code(caught) == "AWS.SimpleQueueService.NonExistentQueue"


def test_unsupported_actions_answer_unsupported_operation(sqs, new_name):
    url = sqs.create_queue(QueueName=new_name())["QueueUrl"]
    with pytest.raises(sqs.exceptions.UnsupportedOperation):
        sqs.add_permission(
            QueueUrl=url, Label="x", AWSAccountIds=["123456789012"], Actions=["SendMessage"]
        )
