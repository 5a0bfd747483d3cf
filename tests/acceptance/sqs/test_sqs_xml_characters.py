"""Characters XML 1.0 cannot carry never reach an SQS client, whichever door a message came in
by: every door refuses them (as SQS does), and a row holding one anyway (sent before that
rule, or written with raw SQL) is delivered with U+FFFD in their place, so a Query-protocol
answer always parses and one message never hides the others leased with it."""

from __future__ import annotations

import json
from typing import Any

from django.db import connection

import pgq_django as pgq
from pgq_django.sqs.digests import md5_of_attributes, md5_of_body
from tests.acceptance.sqs.test_sqs_query import query

__all__ = ["query"]  # the fixture, imported for the tests below

POISON = "a\x01b\x0bc\ufffed\x08"
DELIVERED = "a\ufffdb\ufffdc\ufffdd\ufffd"


def _poisoned_queue(name: str, owner: Any) -> None:
    """A queue holding "first", a row with text XML cannot carry in its body, attributes
    and group, and "last"; the bad row written with raw SQL, as no door writes it now."""
    pgq.create_queue(name, owner=owner)
    pgq.send(name, "first")
    bad = pgq.send(name, "placeholder")
    pgq.send(name, "last")
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE pgq_message SET message = %s::jsonb, attributes = %s::jsonb, group_id = %s "
            "WHERE msg_id = %s",
            [json.dumps(POISON), json.dumps({"note": POISON, "ok": "fine"}), POISON, bad],
        )


def _wire(attributes: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {
        name: {"DataType": value["DataType"], "StringValue": value["StringValue"]}
        for name, value in attributes.items()
    }


def test_a_query_receive_parses_and_returns_every_message_beside_a_poisoned_row(
    query, new_name, user
):
    name = new_name()
    _poisoned_queue(name, user)
    (received,) = query(
        (
            "receive_message",
            {
                "QueueUrl": name,
                "MaxNumberOfMessages": 10,
                "AttributeNames": ["All"],
                "MessageAttributeNames": ["All"],
            },
        ),
    )
    assert "ok" in received, received
    messages = received["ok"]["Messages"]
    assert [m["Body"] for m in messages] == ["first", DELIVERED, "last"]
    for message in messages:
        assert message["MD5OfBody"] == md5_of_body(message["Body"])
    poisoned = messages[1]
    assert poisoned["MessageAttributes"] == {
        "note": {"DataType": "String", "StringValue": DELIVERED},
        "ok": {"DataType": "String", "StringValue": "fine"},
    }
    assert poisoned["MD5OfMessageAttributes"] == md5_of_attributes(
        _wire(poisoned["MessageAttributes"])
    )
    assert poisoned["Attributes"]["MessageGroupId"] == DELIVERED
    # Each one is an ordinary message: its receipt deletes it, none is dead-lettered.
    answers = query(
        *(
            ("delete_message", {"QueueUrl": name, "ReceiptHandle": m["ReceiptHandle"]})
            for m in messages
        )
    )
    assert answers == [{"ok": {}}] * 3
    assert pgq.metrics(name).queue_length == 0


def test_a_json_receive_delivers_the_same_text_and_digests(sqs, new_name, user):
    name = new_name()
    _poisoned_queue(name, user)
    url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
    messages = sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]
    )["Messages"]
    assert [m["Body"] for m in messages] == ["first", DELIVERED, "last"]
    assert messages[1]["MD5OfBody"] == md5_of_body(DELIVERED)
    assert messages[1]["MD5OfMessageAttributes"] == md5_of_attributes(
        _wire(messages[1]["MessageAttributes"])
    )


def test_a_query_send_of_such_text_is_refused_and_stores_nothing(query, new_name, user):
    name = new_name()
    pgq.create_queue(name, owner=user)
    answers = query(
        ("send_message", {"QueueUrl": name, "MessageBody": POISON}),
        (
            "send_message",
            {
                "QueueUrl": name,
                "MessageBody": "fine",
                "MessageAttributes": {"n": {"DataType": "String", "StringValue": POISON}},
            },
        ),
    )
    assert [a["error"]["code"] for a in answers] == ["InvalidMessageContents"] * 2
    assert pgq.metrics(name).total_messages == 0


def test_a_query_answer_holding_a_stored_tag_xml_cannot_carry_still_parses(query, new_name, user):
    """Tags are no message, but a tag stored with such a character must not break an
    answer either: it reads back as U+FFFD."""
    name = new_name()
    pgq.create_queue(name, owner=user, tags={"team": "x\x01y"})
    (listed,) = query(("list_queue_tags", {"QueueUrl": name}))
    assert listed == {"ok": {"Tags": {"team": "x\ufffdy"}}}
