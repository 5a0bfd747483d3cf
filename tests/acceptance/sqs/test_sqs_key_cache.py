"""The server remembers verified signing keys, yet every change to a key, its owner or their
rights bites on the very next request.

Each test first makes a successful call, so the server process checks the next signature
with what it remembered; then it changes the database from this (another) process and
expects the next hot action (send, receive, delete) to be refused and to change nothing.
"""

from __future__ import annotations

import json

import pytest
from botocore.exceptions import ClientError
from django.contrib.auth.models import Group

import pgq_django as pgq
from pgq_django.models import AccessKey

from .test_sqs_security import _code, _post, _signed

pytestmark = pytest.mark.slow

# What a caller left with no right at all on a queue hears: what a missing queue answers.
NO_SUCH_QUEUE = "AWS.SimpleQueueService.NonExistentQueue"


def _name(url: str) -> str:
    return url.rsplit("/", 1)[1]


@pytest.fixture
def owned(sqs, new_name):
    """(client, queue URL) of a user who owns a queue holding one message, used once."""
    url = sqs.create_queue(QueueName=new_name())["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="kept")
    return sqs, url


def _hot_actions_refused(client, url: str, code: str) -> None:
    """Send, receive and delete are all refused with ``code``; the queue is untouched."""
    name = _name(url)
    [kept] = pgq.read(name, vt=0)  # visible again at once
    handle = str(kept.receipt)
    calls = [
        ("send_message", {"QueueUrl": url, "MessageBody": "intruder"}),
        ("send_message_batch", {"QueueUrl": url, "Entries": [{"Id": "1", "MessageBody": "x"}]}),
        ("receive_message", {"QueueUrl": url, "MaxNumberOfMessages": 10}),
        ("delete_message", {"QueueUrl": url, "ReceiptHandle": handle}),
        (
            "delete_message_batch",
            {"QueueUrl": url, "Entries": [{"Id": "1", "ReceiptHandle": handle}]},
        ),
        (
            "change_message_visibility",
            {"QueueUrl": url, "ReceiptHandle": handle, "VisibilityTimeout": 60},
        ),
    ]
    for method, kwargs in calls:
        with pytest.raises(ClientError) as caught:
            getattr(client, method)(**kwargs)
        assert _code(caught) == code, method
    # Nothing sent, leased, deleted or hidden: the next read is the very next delivery.
    assert [(m.message, m.read_ct) for m in pgq.read(name, vt=0, qty=10)] == [
        ("kept", kept.read_ct + 1)
    ]


def test_a_key_revoked_after_use_is_refused_on_its_very_next_request(owned, user):
    client, url = owned
    client.receive_message(QueueUrl=url, VisibilityTimeout=0)  # remembered now
    AccessKey.objects.get(user=user).revoke()
    _hot_actions_refused(client, url, "InvalidClientTokenId")
    for method, kwargs in [
        ("get_queue_attributes", {"QueueUrl": url}),
        ("list_queues", {}),
        ("send_message", {"QueueUrl": "http://elsewhere/1/x", "MessageBody": "x"}),
    ]:
        with pytest.raises(ClientError) as caught:
            getattr(client, method)(**kwargs)
        assert _code(caught) == "InvalidClientTokenId", method


def test_a_revoked_key_is_refused_before_the_request_s_own_mistakes(
    owned, user, sqs_endpoint, raw_key_of
):
    _client, url = owned
    key, secret = raw_key_of(user)
    body = json.dumps({"QueueUrl": url, "MessageBody": "x"}).encode()
    status, _, _ = _post(*_signed(sqs_endpoint, key, secret, "AmazonSQS.SendMessage", body))
    assert status == 200  # remembered now
    key.revoke()
    for target in ("AmazonSQS.NoSuchAction", "AmazonSQS.SendMessage"):
        payload = b"{not json" if target.endswith("SendMessage") else body
        status, _, answer = _post(*_signed(sqs_endpoint, key, secret, target, payload))
        assert (status, answer["__type"].rsplit("#", 1)[-1]) == (403, "InvalidClientTokenId")


def test_a_key_deleted_after_use_is_refused(owned, user):
    client, url = owned
    client.receive_message(QueueUrl=url, VisibilityTimeout=0)
    AccessKey.objects.filter(user=user).delete()
    _hot_actions_refused(client, url, "InvalidClientTokenId")


def test_an_owner_deactivated_after_use_is_refused_at_once(owned, user):
    client, url = owned
    client.receive_message(QueueUrl=url, VisibilityTimeout=0)
    user.is_active = False
    user.save(update_fields=["is_active"])
    _hot_actions_refused(client, url, "InvalidClientTokenId")


def test_a_superuser_demoted_after_use_loses_rights_on_others_queues_at_once(
    owned, client_for, make_user
):
    _, url = owned
    admin_user = make_user(creator=False, superuser=True)
    admin = client_for(admin_user)
    admin.receive_message(QueueUrl=url, VisibilityTimeout=0)  # another's queue: as superuser
    admin_user.is_superuser = False
    admin_user.save(update_fields=["is_superuser"])
    _hot_actions_refused(admin, url, NO_SUCH_QUEUE)


def test_a_grant_withdrawn_after_use_is_denied_at_once(owned, client_for, make_user):
    _, url = owned
    name = _name(url)
    grantee = make_user(creator=False)
    pgq.grant_queue_access(name, grantee, read=True, write=True)
    client = client_for(grantee)
    client.receive_message(QueueUrl=url, VisibilityTimeout=0)
    pgq.revoke_queue_access(name, grantee)
    _hot_actions_refused(client, url, NO_SUCH_QUEUE)


def test_leaving_the_group_that_held_the_grant_is_denied_at_once(owned, client_for, make_user):
    _, url = owned
    name = _name(url)
    member = make_user(creator=False)
    team = Group.objects.create(name=f"team_{name}")
    member.groups.add(team)
    pgq.grant_queue_access(name, team, read=True, write=True)
    client = client_for(member)
    client.send_message(QueueUrl=url, MessageBody="from the team")
    got = client.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    client.delete_message(
        QueueUrl=url,
        ReceiptHandle=next(m for m in got if m["Body"] == "from the team")["ReceiptHandle"],
    )
    for message in got:
        if message["Body"] == "kept":
            client.change_message_visibility(
                QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
            )
    member.groups.remove(team)
    _hot_actions_refused(client, url, NO_SUCH_QUEUE)


def test_the_wrong_secret_for_a_key_in_use_is_refused_and_the_right_one_still_works(
    owned, user, client_for, sqs_endpoint
):
    client, url = owned
    client.receive_message(QueueUrl=url, VisibilityTimeout=0)
    key = AccessKey.objects.get(user=user)
    forger = client_for(user, aws_access_key_id=key.key_id, aws_secret_access_key="not-it")
    with pytest.raises(ClientError) as caught:
        forger.send_message(QueueUrl=url, MessageBody="forged")
    assert _code(caught) == "SignatureDoesNotMatch"
    client.send_message(QueueUrl=url, MessageBody="genuine")
    assert sorted(m.message for m in pgq.read(_name(url), vt=0, qty=10)) == ["genuine", "kept"]


@pytest.fixture
def raw_key_of():
    def make(user):
        return AccessKey.objects.create_key(user)

    return make
