"""Every refused request changes nothing: bad or expired signatures, unknown or revoked keys,
missing grants, tampered requests and malformed input, through boto3 and raw signed HTTP."""

from __future__ import annotations

import datetime
import json
from typing import Any

import botocore.auth
import pytest
import urllib3
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

import pgq_django as pgq
from pgq_django.models import AccessKey

pytestmark = pytest.mark.slow


def _code(exc: pytest.ExceptionInfo[ClientError]) -> str:
    return str(exc.value.response["Error"]["Code"])


def _status(exc: pytest.ExceptionInfo[ClientError]) -> int:
    return int(exc.value.response["ResponseMetadata"]["HTTPStatusCode"])


def _queue_names() -> set[str]:
    return {q.name for q in pgq.list_queues()}


@pytest.fixture
def queue_url(sqs, new_name):
    url = sqs.create_queue(QueueName=new_name())["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="kept")
    return url


def _name(url: str) -> str:
    return url.rsplit("/", 1)[1]


def test_a_wrong_secret_is_signature_does_not_match(client_for, user, sqs_endpoint, new_name):
    import boto3

    key, _secret = AccessKey.objects.create_key(user)
    forged = boto3.client(
        "sqs",
        endpoint_url=sqs_endpoint,
        region_name="us-east-1",
        aws_access_key_id=key.key_id,
        aws_secret_access_key="not-the-secret",
    )
    before = _queue_names()
    with pytest.raises(ClientError) as caught:
        forged.create_queue(QueueName=new_name())
    assert (_code(caught), _status(caught)) == ("SignatureDoesNotMatch", 403)
    assert _queue_names() == before
    key.refresh_from_db()
    assert key.last_used_at is None


def test_unknown_revoked_and_inactive_keys_are_invalid_client_tokens(
    client_for, make_user, sqs_endpoint, new_name
):
    import boto3

    unknown = boto3.client(
        "sqs",
        endpoint_url=sqs_endpoint,
        region_name="us-east-1",
        aws_access_key_id="PGQNOSUCHKEY00000000",
        aws_secret_access_key="x",
    )
    with pytest.raises(ClientError) as caught:
        unknown.list_queues()
    assert (_code(caught), _status(caught)) == ("InvalidClientTokenId", 403)

    owner = make_user()
    revoked = client_for(owner)
    revoked.list_queues()  # works before
    AccessKey.objects.filter(user=owner).update(revoked_at=datetime.datetime.now(datetime.UTC))
    with pytest.raises(ClientError) as caught:
        revoked.create_queue(QueueName=new_name())
    assert _code(caught) == "InvalidClientTokenId"

    gone = make_user()
    inactive = client_for(gone)
    gone.is_active = False
    gone.save()
    with pytest.raises(ClientError) as caught:
        inactive.list_queues()
    assert _code(caught) == "InvalidClientTokenId"


@pytest.mark.parametrize(
    ("shift", "message"),
    [(-20, "Signature expired"), (20, "Signature not yet current")],
)
def test_requests_signed_outside_the_clock_window_are_refused(
    sqs, new_name, monkeypatch, shift, message
):
    skewed = datetime.datetime.now(datetime.UTC) + datetime.timedelta(minutes=shift)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: skewed)
    before = _queue_names()
    with pytest.raises(ClientError) as caught:
        sqs.create_queue(QueueName=new_name())
    assert _code(caught) == "SignatureDoesNotMatch"
    assert message in caught.value.response["Error"]["Message"]
    assert _queue_names() == before


def test_a_request_signed_fourteen_minutes_ago_is_still_accepted(sqs, new_name, monkeypatch):
    skewed = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=14)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: skewed)
    name = new_name()
    sqs.create_queue(QueueName=name)
    assert name in _queue_names()


def _calls_on(name: str, url: str, handle: str) -> list[tuple[str, dict[str, Any]]]:
    """Every action on one queue, as a caller would make it."""
    arn = f"arn:aws:sqs:eu-west-1:{url.rsplit('/', 2)[1]}:{name}"
    entry = [{"Id": "1", "ReceiptHandle": handle}]
    return [
        ("get_queue_url", {"QueueName": name}),
        ("get_queue_attributes", {"QueueUrl": url, "AttributeNames": ["All"]}),
        ("set_queue_attributes", {"QueueUrl": url, "Attributes": {"DelaySeconds": "9"}}),
        ("send_message", {"QueueUrl": url, "MessageBody": "intruder"}),
        ("send_message_batch", {"QueueUrl": url, "Entries": [{"Id": "1", "MessageBody": "x"}]}),
        ("receive_message", {"QueueUrl": url}),
        ("delete_message", {"QueueUrl": url, "ReceiptHandle": handle}),
        ("delete_message_batch", {"QueueUrl": url, "Entries": entry}),
        (
            "change_message_visibility",
            {"QueueUrl": url, "ReceiptHandle": handle, "VisibilityTimeout": 60},
        ),
        (
            "change_message_visibility_batch",
            {"QueueUrl": url, "Entries": [{**entry[0], "VisibilityTimeout": 5}]},
        ),
        ("purge_queue", {"QueueUrl": url}),
        ("tag_queue", {"QueueUrl": url, "Tags": {"x": "y"}}),
        ("untag_queue", {"QueueUrl": url, "TagKeys": ["x"]}),
        ("list_queue_tags", {"QueueUrl": url}),
        ("list_dead_letter_source_queues", {"QueueUrl": url}),
        ("start_message_move_task", {"SourceArn": arn}),
        ("delete_queue", {"QueueUrl": url}),
        ("create_queue", {"QueueName": name}),
    ]


def _answer(client: Any, method: str, kwargs: dict[str, Any]) -> tuple[int, str, str]:
    with pytest.raises(ClientError) as caught:
        getattr(client, method)(**kwargs)
    return _status(caught), _code(caught), str(caught.value.response["Error"]["Message"])


def test_without_any_right_a_queue_is_answered_as_a_missing_one_and_nothing_changes(
    client_for, make_user, queue_url, new_name
):
    stranger = client_for(make_user(creator=False))
    name, missing = _name(queue_url), new_name()
    missing_url = queue_url.replace(name, missing)
    handle = str(pgq.read(name, vt=0)[0].receipt)
    for (method, kwargs), (_, missing_kwargs) in zip(
        _calls_on(name, queue_url, handle), _calls_on(missing, missing_url, handle), strict=True
    ):
        status, code, message = _answer(stranger, method, kwargs)
        # Word for word what the same call on a queue that does not exist answers.
        assert (status, code, message.replace(name, missing)) == _answer(
            stranger, method, missing_kwargs
        ), method
        assert code in (
            "AWS.SimpleQueueService.NonExistentQueue",
            "ResourceNotFoundException",
            "AccessDenied",  # CreateQueue without the add_queue permission, for any name
        ), method
    # A queue of the stranger's pointing its RedrivePolicy at it: "does not exist" as well.
    maker = client_for(make_user())
    own = maker.create_queue(QueueName=new_name())["QueueUrl"]
    answers = []
    for target in (name, missing):
        policy = {"deadLetterTargetArn": f"arn:aws:sqs:eu-west-1:000000000000:{target}"}
        attributes = {"RedrivePolicy": json.dumps({**policy, "maxReceiveCount": 3})}
        status, code, message = _answer(
            maker, "set_queue_attributes", {"QueueUrl": own, "Attributes": attributes}
        )
        answers.append((status, code, message.replace(target, "<dlq>")))
    assert answers[0] == answers[1]
    assert answers[0][:2] == (400, "InvalidAttributeValue")
    queue = pgq.get_queue(name)
    assert (queue.delivery_delay, queue.tags) == (0, {})
    assert [m.message for m in pgq.read(name, qty=10)] == ["kept"]
    assert stranger.list_queues().get("QueueUrls", []) == []
    assert pgq.get_queue(_name(own)).dead_letter_queue_id is None


def test_creating_a_name_another_user_s_queue_holds_says_only_that_it_exists(
    client_for, make_user, queue_url
):
    owner = pgq.get_queue(_name(queue_url)).owner
    creator = client_for(make_user())
    status, code, message = _answer(creator, "create_queue", {"QueueName": _name(queue_url)})
    assert (status, code) == (400, "QueueAlreadyExists")
    assert queue_url not in message
    assert pgq.get_queue(_name(queue_url)).owner == owner


def test_grants_limit_each_user_to_their_rights(client_for, make_user, queue_url):
    name = _name(queue_url)
    reader_user, writer_user = make_user(creator=False), make_user(creator=False)
    pgq.grant_queue_access(name, reader_user, read=True, write=False)
    pgq.grant_queue_access(name, writer_user, read=False, write=True)
    reader, writer = client_for(reader_user), client_for(writer_user)

    writer.send_message(QueueUrl=queue_url, MessageBody="from writer")
    with pytest.raises(ClientError) as caught:
        writer.receive_message(QueueUrl=queue_url)
    assert _code(caught) == "AccessDenied"
    with pytest.raises(ClientError) as caught:
        reader.send_message(QueueUrl=queue_url, MessageBody="from reader")
    assert _code(caught) == "AccessDenied"
    got = reader.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10)["Messages"]
    assert sorted(m["Body"] for m in got) == ["from writer", "kept"]
    with pytest.raises(ClientError) as caught:
        reader.purge_queue(QueueUrl=queue_url)
    assert _code(caught) == "AccessDenied"
    assert pgq.metrics(name).queue_length == 2


# -- raw signed HTTP: what an SDK cannot be made to send ----------------------------------


def _signed(
    endpoint: str,
    key: AccessKey,
    secret: str,
    target: str,
    body: bytes,
    *,
    headers: dict[str, str] | None = None,
    unsigned: tuple[str, ...] = (),
) -> tuple[str, dict[str, str], bytes]:
    request = AWSRequest(
        method="POST",
        url=endpoint,
        data=body,
        headers={
            "X-Amz-Target": target,
            "Content-Type": "application/x-amz-json-1.0",
            **(headers or {}),
        },
    )
    kept = {name: request.headers[name] for name in unsigned}
    for name in unsigned:
        del request.headers[name]
    SigV4Auth(Credentials(key.key_id, secret), "sqs", "us-east-1").add_auth(request)
    prepared = request.prepare()
    return prepared.url, {**dict(prepared.headers), **kept}, prepared.body or b""


def _post(url: str, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, Any], Any]:
    response = urllib3.request("POST", url, body=body, headers=headers, retries=False)
    return response.status, dict(response.headers), json.loads(response.data or b"{}")


@pytest.fixture
def raw_key(user):
    return AccessKey.objects.create_key(user)


def test_a_body_changed_after_signing_is_refused(sqs_endpoint, raw_key, queue_url):
    key, secret = raw_key
    body = json.dumps({"QueueUrl": queue_url, "MessageBody": "signed"}).encode()
    url, headers, _ = _signed(sqs_endpoint, key, secret, "AmazonSQS.SendMessage", body)
    status, answer_headers, answer = _post(url, headers, body.replace(b"signed", b"forged"))
    assert status == 403
    assert answer["__type"].endswith("#SignatureDoesNotMatch")
    assert answer_headers["x-amzn-query-error"] == "SignatureDoesNotMatch;Sender"
    assert [m.message for m in pgq.read(_name(queue_url), qty=10)] == ["kept"]


def test_the_action_must_be_signed(sqs_endpoint, raw_key, queue_url):
    key, secret = raw_key
    body = json.dumps({"QueueUrl": queue_url}).encode()
    url, headers, body = _signed(
        sqs_endpoint, key, secret, "AmazonSQS.PurgeQueue", body, unsigned=("X-Amz-Target",)
    )
    status, _headers, answer = _post(url, headers, body)
    assert status == 400
    assert answer["__type"].endswith("#IncompleteSignature")
    assert pgq.metrics(_name(queue_url)).queue_length == 1


def test_an_unsigned_payload_is_refused(sqs_endpoint, raw_key, queue_url):
    key, secret = raw_key
    body = json.dumps({"QueueUrl": queue_url}).encode()
    url, headers, body = _signed(
        sqs_endpoint,
        key,
        secret,
        "AmazonSQS.PurgeQueue",
        body,
        headers={"X-Amz-Content-SHA256": "UNSIGNED-PAYLOAD"},
    )
    status, _headers, answer = _post(url, headers, body)
    assert status == 403
    assert answer["__type"].endswith("#SignatureDoesNotMatch")
    assert pgq.metrics(_name(queue_url)).queue_length == 1


def test_requests_without_a_signature_are_refused(sqs_endpoint, queue_url):
    body = json.dumps({"QueueUrl": queue_url}).encode()
    headers = {"X-Amz-Target": "AmazonSQS.PurgeQueue", "Content-Type": "application/x-amz-json-1.0"}
    status, answer_headers, _answer = _post(sqs_endpoint, headers, body)
    assert status == 403
    assert answer_headers["x-amzn-query-error"] == "MissingAuthenticationToken;Sender"
    assert pgq.metrics(_name(queue_url)).queue_length == 1
    response = urllib3.request("GET", sqs_endpoint + "?Action=ListQueues", retries=False)
    assert response.status == 400
    assert json.loads(response.data)["__type"].endswith("#InvalidAction")


@pytest.mark.parametrize(
    ("target", "body", "content_type", "expected"),
    [
        ("AmazonSQS.DropEverything", b"{}", None, "InvalidAction"),
        ("Other.ListQueues", b"{}", None, "InvalidAction"),
        ("AmazonSQS.ListQueues", b"{not json", None, "SerializationException"),
        ("AmazonSQS.ListQueues", b"[1, 2]", None, "SerializationException"),
        ("AmazonSQS.ListQueues", b"\xff\xfe", None, "SerializationException"),
        ("AmazonSQS.ListQueues", b"[" * 200_000 + b"]" * 200_000, None, "SerializationException"),
        ("AmazonSQS.ListQueues", b"{}", "application/json", "SerializationException"),
        (
            "AmazonSQS.SendMessage",
            b'{"QueueUrl": 5, "MessageBody": "x"}',
            None,
            "InvalidParameterValue",
        ),
        ("AmazonSQS.SendMessage", b'{"MessageBody": "x"}', None, "MissingParameter"),
        (
            "AmazonSQS.ReceiveMessage",
            b'{"QueueUrl": "QURL", "MaxNumberOfMessages": true}',
            None,
            "InvalidParameterValue",
        ),
        (
            "AmazonSQS.ReceiveMessage",
            b'{"QueueUrl": "QURL", "MaxNumberOfMessages": "5"}',
            None,
            "InvalidParameterValue",
        ),
        (
            "AmazonSQS.DeleteMessageBatch",
            b'{"QueueUrl": "QURL", "Entries": {"a": 1}}',
            None,
            "InvalidParameterValue",
        ),
        (
            "AmazonSQS.DeleteMessageBatch",
            b'{"QueueUrl": "QURL", "Entries": [{"Id": "a"}]}',
            None,
            "ReceiptHandleIsInvalid",
        ),
        (
            "AmazonSQS.SendMessage",
            b'{"QueueUrl": "QURL", "MessageBody": "x", "MessageAttributes": []}',
            None,
            "InvalidParameterValue",
        ),
        (
            "AmazonSQS.SendMessage",
            json.dumps(
                {
                    "QueueUrl": "QURL",
                    "MessageBody": "x",
                    "MessageAttributes": {"a": {"DataType": "Binary", "BinaryValue": "%%%"}},
                }
            ).encode(),
            None,
            "InvalidParameterValue",
        ),
        (
            "AmazonSQS.SetQueueAttributes",
            b'{"QueueUrl": "QURL", "Attributes": {"DelaySeconds": 5}}',
            None,
            "InvalidParameterValue",
        ),
        (
            "AmazonSQS.CreateQueue",
            json.dumps(
                {
                    "QueueName": "x",
                    "Attributes": {
                        "RedrivePolicy": json.dumps(
                            {"deadLetterTargetArn": 1, "maxReceiveCount": 1}
                        )
                    },
                }
            ).encode(),
            None,
            "InvalidParameterValue",
        ),
        (
            "AmazonSQS.ListQueues",
            b'{"MaxResults": 5, "NextToken": "!!!"}',
            None,
            "InvalidParameterValue",
        ),
        # Found by a red-team pass: each of these was an HTTP 500.
        (
            "AmazonSQS.SendMessage",
            b'{"QueueUrl": "http://[::1/000000000000/q", "MessageBody": "x"}',
            None,
            "AWS.SimpleQueueService.NonExistentQueue",
        ),
        (
            "AmazonSQS.GetQueueAttributes",
            b'{"QueueUrl": "http://[::1/"}',
            None,
            "AWS.SimpleQueueService.NonExistentQueue",
        ),
        (
            "AmazonSQS.SetQueueAttributes",
            json.dumps(
                {"QueueUrl": "QURL", "Attributes": {"RedrivePolicy": "[" * 100_000 + "]" * 100_000}}
            ).encode(),
            None,
            "InvalidAttributeValue",
        ),
        (
            "AmazonSQS.CreateQueue",
            json.dumps(
                {"QueueName": "deep", "Attributes": {"RedrivePolicy": "[" * 100_000}}
            ).encode(),
            None,
            "InvalidAttributeValue",
        ),
        ("AmazonSQS.ListQueues", b'{"QueueNamePrefix": "\\u0000"}', None, "InvalidParameterValue"),
        (
            "AmazonSQS.TagQueue",
            b'{"QueueUrl": "QURL", "Tags": {"team": "a\\u0000b"}}',
            None,
            "InvalidParameterValue",
        ),
        (
            "AmazonSQS.TagQueue",
            b'{"QueueUrl": "QURL", "Tags": {"\\u0000": "b"}}',
            None,
            "InvalidParameterValue",
        ),
        (
            "AmazonSQS.GetQueueUrl",
            b'{"QueueName": "x", "QueueOwnerAWSAccountId": "\\u0000"}',
            None,
            "InvalidParameterValue",
        ),
        # Numbers are ASCII digits: Arabic-Indic or superscript ones are not numbers.
        (
            "AmazonSQS.SetQueueAttributes",
            json.dumps(
                {"QueueUrl": "QURL", "Attributes": {"DelaySeconds": "\u0661\u0662"}}
            ).encode(),
            None,
            "InvalidAttributeValue",
        ),
        (
            "AmazonSQS.SetQueueAttributes",
            json.dumps({"QueueUrl": "QURL", "Attributes": {"DelaySeconds": "\u00b9"}}).encode(),
            None,
            "InvalidAttributeValue",
        ),
        (
            "AmazonSQS.SendMessage",
            json.dumps(
                {
                    "QueueUrl": "QURL",
                    "MessageBody": "x",
                    "MessageAttributes": {"n": {"DataType": "Number", "StringValue": "\u0661"}},
                }
            ).encode(),
            None,
            "InvalidParameterValue",
        ),
    ],
)
def test_malformed_input_gets_an_sqs_error_and_changes_nothing(
    sqs_endpoint, raw_key, queue_url, target, body, content_type, expected
):
    key, secret = raw_key
    body = body.replace(b"QURL", queue_url.encode())
    headers = {"Content-Type": content_type} if content_type else None
    url, sent_headers, body = _signed(sqs_endpoint, key, secret, target, body, headers=headers)
    before = _queue_names()
    status, answer_headers, answer = _post(url, sent_headers, body)
    if expected == "ReceiptHandleIsInvalid":  # a batch answers per entry
        assert status == 200
        assert answer["Failed"][0]["Code"] == expected
    else:
        assert status == 400  # as SQS answers
        assert answer_headers["x-amzn-query-error"].split(";")[0] == expected
    assert _queue_names() == before
    queue = pgq.get_queue(_name(queue_url))
    assert (queue.delivery_delay, queue.dead_letter_queue_id, queue.tags) == (0, None, {})
    assert [m.message for m in pgq.read(queue.name, vt=0, qty=10)] == ["kept"]


@pytest.mark.parametrize(
    "digits",
    [
        "\u0660\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669",
        "\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079",
    ],
)
def test_a_receipt_in_other_digits_is_invalid_and_deletes_nothing(sqs, queue_url, digits):
    name = _name(queue_url)
    msg_id = pgq.send(name, "target")
    while msg_id < 10:  # a receipt with digits after the first (which must be 1-9)
        msg_id = pgq.send(name, "target")
    [leased] = [m for m in pgq.read(name, vt=0, qty=20) if m.msg_id == msg_id]
    other = str.maketrans("0123456789", digits)
    # What int() reads as this very receipt: its first digit ASCII, the others not.
    lookalike = ":".join(
        part[0] + part[1:].translate(other) for part in str(leased.receipt).split(":")
    )
    assert lookalike != str(leased.receipt)
    with pytest.raises(ClientError) as caught:
        sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=lookalike)
    assert _code(caught) == "ReceiptHandleIsInvalid"
    assert pgq.read_by_id(name, leased.msg_id) is not None


def test_a_successful_request_records_when_the_key_was_used(sqs, user):
    sqs.list_queues()
    key = AccessKey.objects.get(user=user)
    assert key.last_used_at is not None


# -- what the endpoint records about a sender ------------------------------------------------


def test_sender_id_and_trace_header_are_the_endpoint_s_records_never_a_sender_s_headers(
    client_for, make_user, sqs_endpoint, new_name
):
    owner_user, victim_user, forger_user = make_user(), make_user(), make_user(creator=False)
    owner, victim = client_for(owner_user), client_for(victim_user)
    victim_key = AccessKey.objects.get(user=victim_user).key_id
    name = new_name()
    url = owner.create_queue(QueueName=name)["QueueUrl"]
    pgq.grant_queue_access(name, victim_user, read=False, write=True)
    # The forger may not write to the queue; they may publish through a topic bound to it.
    topic = "x_" + name
    pgq.create_exchange(topic, owner=owner_user)
    pgq.bind_queue(name, topic)
    pgq.grant_publish_access(topic, forger_user)
    forger_user.set_password("forger-pw")
    forger_user.save()
    rest = f"{sqs_endpoint.removesuffix('sqs/')}v1/topics/{topic}/messages"
    forged = {"sqs_sender_id": victim_key, "sqs_trace_header": "Root=1-forged"}

    # Plain headers of those old names are the sender's own, and never reported.
    published = urllib3.request(
        "POST",
        rest,
        json={"body": "via REST", "headers": forged},
        retries=False,
        headers=urllib3.make_headers(basic_auth=f"{forger_user.username}:forger-pw"),
    )
    assert published.status == 201, published.data
    pgq.publish(topic, "via Python", headers=forged)
    pgq.send(name, "sent directly", headers=forged)
    # The reserved names the endpoint uses are refused on every user send surface.
    for reserved in ({"pgq_sqs_sender_id": victim_key}, {"pgq_sqs_trace_header": "Root=x"}):
        refused = urllib3.request(
            "POST",
            rest,
            json={"body": "forged", "headers": reserved},
            retries=False,
            headers=urllib3.make_headers(basic_auth=f"{forger_user.username}:forger-pw"),
        )
        assert refused.status == 400, refused.data
        with pytest.raises(pgq.InvalidMessage):
            pgq.publish(topic, "forged", headers=reserved)
        with pytest.raises(pgq.InvalidMessage):
            pgq.send(name, "forged", headers=reserved)
    assert pgq.metrics(name).queue_length == 3

    victim.send_message(
        QueueUrl=url,
        MessageBody="from the victim",
        MessageSystemAttributes={
            "AWSTraceHeader": {"DataType": "String", "StringValue": "Root=1-real"}
        },
    )
    got = owner.receive_message(QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"])
    reported = {
        m["Body"]: (m["Attributes"].get("SenderId"), m["Attributes"].get("AWSTraceHeader"))
        for m in got["Messages"]
    }
    assert reported == {
        "via REST": (None, None),
        "via Python": (None, None),
        "sent directly": (None, None),
        "from the victim": (victim_key, "Root=1-real"),
    }
