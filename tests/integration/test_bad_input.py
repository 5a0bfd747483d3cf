"""Bad input anywhere gets a clear PgqError and changes nothing (DESIGN.md section 9)."""

from __future__ import annotations

import pytest
from django.forms.models import model_to_dict

import pgq_django as pgq
from pgq_django.models import Binding, Exchange, Message, Queue, QueueCounter
from pgq_django.rest.exceptions import http_status
from pgq_django.sqs.errors import sqs_code

DEEP = [[]]
for _ in range(150):
    DEEP = [DEEP]
VERY_DEEP: list = []
for _ in range(5000):
    VERY_DEEP = [VERY_DEEP]


@pytest.fixture
def snapshot(queue):
    """The queue's rows before the bad call, to prove nothing changed after it."""
    pgq.send_batch(queue, ["keep-1", "keep-2"])

    def take():
        return (
            list(
                Message.objects.filter(queue=queue)
                .order_by("msg_id")
                .values_list("msg_id", "read_ct", "vt", "message")
            ),
            QueueCounter.objects.filter(queue=queue).count(),
            [model_to_dict(q) for q in Queue.objects.order_by("name")],
            list(Binding.objects.order_by("pk").values()),
            list(Exchange.objects.order_by("pk").values()),
        )

    return take


BAD_CALLS = [
    ("send to a bad name", lambda q: pgq.send("bad name!", 1), pgq.InvalidName),
    ("send to a missing queue", lambda q: pgq.send("missing", 1), pgq.QueueNotFound),
    ("body not JSON", lambda q: pgq.send(q, {1, 2}), pgq.InvalidMessage),
    ("body with NaN", lambda q: pgq.send(q, float("nan")), pgq.InvalidMessage),
    ("body with NUL", lambda q: pgq.send(q, "a\x00b"), pgq.InvalidMessage),
    ("headers not a dict", lambda q: pgq.send(q, 1, headers=["x"]), pgq.InvalidMessage),
    ("attributes with int keys", lambda q: pgq.send(q, 1, attributes={1: "x"}), pgq.InvalidMessage),
    ("negative delay", lambda q: pgq.send(q, 1, delay=-1), pgq.InvalidArgument),
    ("priority as str", lambda q: pgq.send(q, 1, priority="high"), pgq.InvalidArgument),
    ("priority overflow", lambda q: pgq.send(q, 1, priority=2**40), pgq.InvalidArgument),
    ("label not text", lambda q: pgq.send(q, 1, label=5), pgq.InvalidArgument),
    ("too large", lambda q: pgq.send(q, "x" * (1024 * 1024 + 1)), pgq.MessageTooLarge),
    ("batch one bad body", lambda q: pgq.send_batch(q, [1, {2}]), pgq.InvalidMessage),
    ("batch is a dict", lambda q: pgq.send_batch(q, {"a": 1}), pgq.InvalidArgument),
    ("read qty 0", lambda q: pgq.read(q, qty=0), pgq.InvalidArgument),
    ("read negative vt", lambda q: pgq.read(q, vt=-5), pgq.InvalidArgument),
    ("read bad filter key", lambda q: pgq.read(q, filters={"body": 1}), pgq.InvalidArgument),
    (
        "read headers filter not a dict",
        lambda q: pgq.read(q, filters={"headers": ["a"]}),
        pgq.InvalidArgument,
    ),
    ("read missing queue", lambda q: pgq.read("missing"), pgq.QueueNotFound),
    ("pop missing queue", lambda q: pgq.pop("missing"), pgq.QueueNotFound),
    ("delete id not int", lambda q: pgq.delete(q, 1.5), pgq.InvalidArgument),
    ("delete missing queue", lambda q: pgq.delete("missing", 1), pgq.QueueNotFound),
    ("archive negative id", lambda q: pgq.archive(q, -3), pgq.InvalidArgument),
    ("set_vt negative", lambda q: pgq.set_vt(q, 1, -1), pgq.InvalidArgument),
    ("nack bad delay", lambda q: pgq.nack(q, 1, delay="soon"), pgq.InvalidArgument),
    ("read_by_id missing queue", lambda q: pgq.read_by_id("missing", 1), pgq.QueueNotFound),
    (
        "poll negative wait",
        lambda q: pgq.read_with_poll(q, max_poll_seconds=-1),
        pgq.InvalidArgument,
    ),
    # Lone surrogates cannot be encoded as UTF-8 for PostgreSQL.
    ("body with a lone surrogate", lambda q: pgq.send(q, "a\ud800"), pgq.InvalidMessage),
    (
        "header key with a lone surrogate",
        lambda q: pgq.send(q, 1, headers={"k\udfff": 1}),
        pgq.InvalidMessage,
    ),
    (
        "attribute with a lone surrogate",
        lambda q: pgq.send(q, 1, attributes={"a": ["\ud800"]}),
        pgq.InvalidMessage,
    ),
    ("label with a lone surrogate", lambda q: pgq.send(q, 1, label="\ud800"), pgq.InvalidArgument),
    ("group with a lone surrogate", lambda q: pgq.send(q, 1, group="g\ud800"), pgq.InvalidArgument),
    ("label with NUL", lambda q: pgq.send(q, 1, label="a\x00"), pgq.InvalidArgument),
    (
        "dedup_id with a lone surrogate",
        lambda q: pgq.send(q, 1, dedup_id="\ud800"),
        pgq.InvalidArgument,
    ),
    (
        "read filter with a lone surrogate",
        lambda q: pgq.read(q, filters={"headers": {"a": "\ud800"}}),
        pgq.InvalidMessage,
    ),
    (
        "read label filter with a lone surrogate",
        lambda q: pgq.read(q, filters={"label": "\ud800"}),
        pgq.InvalidArgument,
    ),
    # Nesting: a documented limit, and no RecursionError from the encoder.
    ("body nested 150 deep", lambda q: pgq.send(q, DEEP), pgq.InvalidMessage),
    ("body nested 5000 deep", lambda q: pgq.send(q, VERY_DEEP), pgq.InvalidMessage),
    ("headers nested 150 deep", lambda q: pgq.send(q, 1, headers={"h": DEEP}), pgq.InvalidMessage),
    # Message references out of range or of the wrong type.
    (
        "receipt id beyond bigint",
        lambda q: pgq.delete(q, pgq.Receipt(2**63, 1)),
        pgq.InvalidArgument,
    ),
    (
        "receipt read_ct beyond int",
        lambda q: pgq.delete(q, pgq.Receipt(1, 2**31)),
        pgq.InvalidArgument,
    ),
    ("receipt string beyond bigint", lambda q: pgq.archive(q, f"{2**64}:1"), pgq.InvalidArgument),
    ("id beyond bigint", lambda q: pgq.read_by_id(q, 2**63), pgq.InvalidArgument),
    ("receipt with a text id", lambda q: pgq.delete(q, pgq.Receipt("x", 1)), pgq.InvalidArgument),
    (
        "receipt with a float read_ct",
        lambda q: pgq.nack(q, pgq.Receipt(1, 1.5)),
        pgq.InvalidArgument,
    ),
    ("delete a superscript digit", lambda q: pgq.delete(q, "\u00b2"), pgq.InvalidArgument),
    ("delete bytes as a list of ids", lambda q: pgq.delete(q, b"\x01\x02"), pgq.InvalidArgument),
    ("archive a bytearray", lambda q: pgq.archive(q, bytearray(b"\x01")), pgq.InvalidArgument),
    ("delete a dict of ids", lambda q: pgq.delete(q, {1: 2}), pgq.InvalidArgument),
    # Owners: a username that does not exist, or something that is not a user.
    ("owner unknown username", lambda q: pgq.alter_queue(q, owner="bob"), pgq.InvalidArgument),
    ("owner of the wrong type", lambda q: pgq.alter_queue(q, owner=42), pgq.InvalidArgument),
    (
        "create with unknown owner",
        lambda q: pgq.create_queue("fresh_q", owner="bob"),
        pgq.InvalidArgument,
    ),
    (
        "exchange with unknown owner",
        lambda q: pgq.create_exchange("fresh_x", owner="bob"),
        pgq.InvalidArgument,
    ),
    # Unknown send options are a PgqError, not a TypeError.
    ("unknown send option", lambda q: pgq.send(q, 1, dealy=5), pgq.InvalidArgument),
    ("unknown batch option", lambda q: pgq.send_batch(q, [1], colour="red"), pgq.InvalidArgument),
]


@pytest.fixture
def exchange(db):
    return pgq.create_exchange("bad_input_x", "headers")


BAD_BINDINGS = [
    ("NaN", {"a": [float("nan")]}),
    ("infinity", {"a": float("inf")}),
    ("negative infinity", {"a": [1, float("-inf")]}),
    ("NUL in a value", {"a": ["x\x00"]}),
    ("NUL in a key", {"a\x00": ["x"]}),
    ("lone surrogate in a value", {"a": "\ud800"}),
    ("lone surrogate in a key", {"\ud800": 1}),
    ("an int key", {1: "x"}),
]


@pytest.mark.parametrize("filters", [b[1] for b in BAD_BINDINGS], ids=[b[0] for b in BAD_BINDINGS])
def test_bad_binding_filters_raise_and_bind_nothing(queue, snapshot, exchange, filters):
    before = snapshot()
    with pytest.raises(pgq.InvalidArgument):
        pgq.bind_queue(queue, exchange, filters=filters)
    assert snapshot() == before


def test_bad_routing_keys_raise_and_bind_or_publish_nothing(queue, snapshot, exchange):
    before = snapshot()
    for key in ("a\ud800", "a\x00"):
        with pytest.raises(pgq.InvalidArgument):
            pgq.bind_queue(queue, exchange, routing_key=key)
        with pytest.raises(pgq.InvalidArgument):
            pgq.publish(exchange, 1, routing_key=key)
    with pytest.raises(pgq.InvalidArgument):
        pgq.publish(exchange, 1, colour="red")
    assert snapshot() == before


def test_the_six_characters_backslash_u0000_are_text_not_a_nul(queue):
    text = "literally \\u0000 and \\\\u0000"
    msg_id = pgq.send(queue, {text: text}, headers={"h": text}, label=text)
    stored = pgq.read_by_id(queue, msg_id)
    assert stored.message == {text: text}
    assert stored.headers == {"h": text}
    # A real NUL after a literal backslash is still refused.
    with pytest.raises(pgq.InvalidMessage):
        pgq.send(queue, "a\\\x00")


def test_nesting_up_to_the_limit_is_accepted(queue):
    from pgq_django.validation import MAX_DEPTH

    body: list = []
    for _ in range(MAX_DEPTH - 1):
        body = [body]
    msg_id = pgq.send(queue, body, headers={"wide": [[1]] * 500})
    assert pgq.read_by_id(queue, msg_id).message == body
    with pytest.raises(pgq.InvalidMessage, match="100 levels"):
        pgq.send(queue, [body])


def test_owner_accepts_a_user_or_a_username(queue, django_user_model):
    alice = django_user_model.objects.create_user("alice")
    assert pgq.alter_queue(queue, owner="alice").owner == alice
    assert pgq.alter_queue(queue, owner=None).owner is None
    assert pgq.alter_queue(queue, owner=alice).owner == alice


@pytest.mark.parametrize("call, error", [c[1:] for c in BAD_CALLS], ids=[c[0] for c in BAD_CALLS])
def test_bad_input_raises_a_clear_error_and_changes_nothing(queue, snapshot, call, error):
    before = snapshot()
    with pytest.raises(error) as caught:
        call(queue)
    assert isinstance(caught.value, pgq.PgqError)
    assert len(caught.value.message) > 10
    assert snapshot() == before


def test_errors_carry_codes_for_http_and_sqs():
    err = pgq.QueueNotFound("Queue 'x' does not exist.", queue="x")
    assert http_status(err) == 404
    assert sqs_code(err) == "AWS.SimpleQueueService.NonExistentQueue"
    assert err.as_dict() == {
        "code": "queue_not_found",
        "message": "Queue 'x' does not exist.",
        "details": {"queue": "x"},
    }
    assert http_status(pgq.MessageTooLarge()) == 413
    assert issubclass(pgq.MessageTooLarge, pgq.InvalidMessage)


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (lambda q: pgq.send(q, {1, 2}), "Cannot encode the message body as JSON: "),
        (
            lambda q: pgq.send(q, 1, headers={"h": "\x00"}),
            "PostgreSQL rejects the NUL character in the headers.",
        ),
        (
            lambda q: pgq.send(q, 1, attributes={"a": "\ud800"}),
            "A lone surrogate (such as \\ud800) in the attributes is not valid UTF-8.",
        ),
        (
            lambda q: pgq.read(q, filters={"headers": {"h": DEEP}}),
            "Arrays and objects in the headers filter nest more than 100 levels deep.",
        ),
    ],
    ids=["body not JSON", "NUL in headers", "surrogate in attributes", "deep headers filter"],
)
def test_an_encoding_error_names_the_part_that_failed(queue, call, expected):
    """The message says which part of the call (body, headers, attributes, a filter) held
    what PostgreSQL cannot store, in a sentence that reads for each of them."""
    with pytest.raises(pgq.InvalidMessage) as raised:
        call(queue)
    assert str(raised.value).startswith(expected)
