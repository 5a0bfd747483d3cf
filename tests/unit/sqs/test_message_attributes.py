"""SQS message attributes and bodies (:mod:`pgq_django.sqs.message_attributes`) and the MD5
digests SDKs check them with (:mod:`pgq_django.sqs.digests`)."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pgq_django.sqs.digests import md5_of_attributes, md5_of_body
from pgq_django.sqs.errors import SqsError
from pgq_django.sqs.message_attributes import (
    attributes_size,
    body_text,
    check_text,
    from_stored,
    parse_attributes,
    to_stored,
)

QUICK = settings(database=None, max_examples=200, deadline=None)


def string(value: str, data_type: str = "String") -> dict[str, str]:
    return {"DataType": data_type, "StringValue": value}


def refusal(value, **kwargs) -> SqsError:
    with pytest.raises(SqsError) as caught:
        parse_attributes(value, **kwargs)
    return caught.value


# -- parsing --------------------------------------------------------------------------------


def test_attributes_keep_their_custom_type_labels_and_binary_is_re_encoded() -> None:
    parsed = parse_attributes(
        {
            "colour": string("red"),
            "n": string("-1.5e3", "Number.float"),
            "img": {"DataType": "Binary.gif", "BinaryValue": "R0lG"},
        }
    )
    assert parsed == {
        "colour": string("red"),
        "n": string("-1.5e3", "Number.float"),
        "img": {"DataType": "Binary.gif", "BinaryValue": "R0lG"},
    }


RESERVED = (
    "You can't use message attribute names beginning with 'AWS.' or 'Amazon'. These strings "
    "are reserved for internal use."
)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("AWS.x", RESERVED),
        ("amazon.y", RESERVED),
        ("Amazon.z", RESERVED),
        (".a", "Message (user) attribute name must not begin with character '.'."),
        ("a.", "Message (user) attribute name must not end with character '.'."),
        ("a..b", "Message (user) attribute name must not have successive '.' characters."),
        ("", "The request must contain non-empty message (user) attribute names."),
        ("x" * 257, "Message (user) attribute name must be shorter than 256 bytes."),
        ("a b", "Message (user) attribute name 'a b' can only contain alphanumeric"),
        ("caf\u00e9", "Message (user) attribute name 'caf\u00e9' can only contain alphanumeric"),
    ],
)
def test_attribute_names_sqs_forbids_are_refused_in_its_words(name: str, message: str) -> None:
    error = refusal({name: string("v")})
    assert error.code == "InvalidParameterValue"
    assert error.message.startswith(message)


def test_a_name_of_256_allowed_characters_with_inner_dots_is_accepted() -> None:
    name = "a.b-c_" + "x" * 250
    assert list(parse_attributes({name: string("v")})) == [name]


TYPE = "The type of message (user) attribute 'a' is invalid. " + (
    "You must use only the following supported type prefixes: Binary, Number, String."
)
BINARY = "Message (user) attribute 'a' must contain a non-empty value of type 'Binary'."


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("red", "The message (user) attribute 'a' must contain a non-empty value."),
        (
            {"StringValue": "x"},
            "The message (user) attribute 'a' must contain a non-empty message attribute type.",
        ),
        (string("x", "string"), TYPE),
        (string("x", "String."), TYPE),
        (string("x", "String.a b"), TYPE),
        (
            string("", "String"),
            "Message (user) attribute 'a' must contain a non-empty value of type 'String'.",
        ),
        ({"DataType": "String", "StringListValues": ["x"]}, "list values are not supported"),
        ({"DataType": "Binary", "BinaryValue": "AAE"}, BINARY),
        ({"DataType": "Binary", "BinaryValue": ""}, BINARY),
        ({"DataType": "Binary", "StringValue": "AAE="}, BINARY),
    ],
)
def test_malformed_attribute_values_say_what_is_missing(value, message: str) -> None:
    error = refusal({"a": value})
    assert error.code == "InvalidParameterValue"
    assert message in error.message


@pytest.mark.parametrize("number", ["0", "-3", "1.25", "1e126", "-9.99E-126", "0005"])
def test_numbers_within_sqs_range_are_accepted_as_written(number: str) -> None:
    assert parse_attributes({"n": string(number, "Number")}) == {"n": string(number, "Number")}


@pytest.mark.parametrize(
    "number",
    ["1e127", "1e-128", "NaN", "Infinity", "one", "0x10", "1,5", "\u0661\u0662", " 5", "1_000"],
)
def test_numbers_sqs_cannot_hold_are_refused(number: str) -> None:
    error = refusal({"n": string(number, "Number")})
    assert error.message == "Can't cast the value of message (user) attribute 'n' to a number."


def test_more_than_ten_attributes_are_refused_with_the_count() -> None:
    many = {f"a{i}": string("v") for i in range(11)}
    assert refusal(many).message == (
        "Number of message attributes [11] exceeds the allowed maximum [10]."
    )
    assert len(parse_attributes(dict(list(many.items())[:10]))) == 10


def test_system_attributes_are_only_a_string_aws_trace_header() -> None:
    trace = {"AWSTraceHeader": string("Root=1-5759e988-bd862e3fe1be46a994272793")}
    assert parse_attributes(trace, system=True) == trace
    assert (
        "must be of type String"
        in refusal({"AWSTraceHeader": string("1", "Number")}, system=True).message
    )
    assert "name 'Other' is invalid" in refusal({"Other": string("x")}, system=True).message


# -- characters -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("char", "allowed"),
    [
        ("\t", True),
        ("\n", True),
        ("\r", True),
        (" ", True),
        ("\ud7ff", True),
        ("\ue000", True),
        ("\ufffd", True),
        ("\U00010000", True),
        ("\U0010ffff", True),
        ("\x00", False),
        ("\x08", False),
        ("\x0b", False),
        ("\x1f", False),
        ("\ufffe", False),
        ("\uffff", False),
        ("\ud800", False),
    ],
)
def test_bodies_and_values_hold_exactly_xml_1_0_characters(char: str, allowed: bool) -> None:
    if allowed:
        assert check_text("a" + char, "the message body") == "a" + char
    else:
        with pytest.raises(SqsError) as caught:
            check_text("a" + char, "the message body")
        assert caught.value.code == "InvalidMessageContents"
        assert f"U+{ord(char):04X} is not allowed" in caught.value.message


# -- stored form and back -------------------------------------------------------------------


def test_string_attributes_are_stored_plain_and_others_keep_their_type() -> None:
    wire = {
        "s": string("red"),
        "n": string("3", "Number"),
        "b": {"DataType": "Binary", "BinaryValue": "AA=="},
    }
    stored = to_stored(wire)
    assert stored == {
        "s": "red",
        "n": string("3", "Number"),
        "b": {"DataType": "Binary", "BinaryValue": "AA=="},
    }
    assert from_stored(stored, ["All"]) == wire


def test_plain_json_values_from_the_python_api_are_read_as_numbers_or_json_text() -> None:
    stored = {"i": 3, "f": 1.5, "t": True, "z": None, "l": [1, "a"], "o": {"k": 1}}
    assert from_stored(stored, [".*"]) == {
        "i": string("3", "Number"),
        "f": string("1.5", "Number"),
        "t": string("true"),
        "z": string("null"),
        "l": string('[1,"a"]'),
        "o": string('{"k":1}'),
    }


@pytest.mark.parametrize(
    ("wanted", "names"),
    [
        ([], []),
        (["All"], ["a", "b.c", "b.d", "bx"]),
        ([".*"], ["a", "b.c", "b.d", "bx"]),
        (["b.*"], ["b.c", "b.d", "bx"]),  # SQS's prefix: the characters before ".*"
        (["b.c.*"], ["b.c"]),
        (["a", "missing"], ["a"]),
        (["b.*", "a"], ["a", "b.c", "b.d", "bx"]),
    ],
)
def test_receive_returns_the_attributes_asked_for_by_name_or_prefix(wanted, names) -> None:
    stored = {"a": "1", "b.c": "2", "b.d": "3", "bx": "4"}
    assert sorted(from_stored(stored, wanted)) == names


def test_attributes_count_their_name_type_and_decoded_value_bytes() -> None:
    wire = parse_attributes(
        {"n": string("\u20ac"), "b": {"DataType": "Binary.x", "BinaryValue": "AAEC"}}
    )
    assert attributes_size(wire) == (1 + 6 + 3) + (1 + 8 + 3)  # "€" is 3 bytes; "AAEC" 3


@pytest.mark.parametrize(
    ("message", "text"),
    [("plain", "plain"), ({"\u00e9": [1, 2]}, '{"\u00e9":[1,2]}'), (5, "5"), (None, "null")],
)
def test_a_stored_body_is_read_through_sqs_as_its_string_or_compact_json(message, text) -> None:
    assert body_text(message) == text


# -- digests --------------------------------------------------------------------------------


@given(st.text(st.characters(blacklist_categories=("Cs",))))
@QUICK
def test_the_body_digest_is_the_md5_of_the_utf8_bytes(body: str) -> None:
    assert md5_of_body(body) == hashlib.md5(body.encode("utf-8")).hexdigest()


def test_the_attribute_digest_hashes_the_documented_byte_layout() -> None:
    """Name, type and value, each after its 4-byte big-endian length, with the transport
    byte (1 for String and Number, 2 for Binary) before the value; names in order."""
    attributes = {
        "z": string("9", "Number.int"),
        "a": {"DataType": "Binary", "BinaryValue": base64.b64encode(b"\x00\xff").decode()},
    }
    layout = (
        b"\x00\x00\x00\x01a" + b"\x00\x00\x00\x06Binary" + b"\x02" + b"\x00\x00\x00\x02\x00\xff"
        b"\x00\x00\x00\x01z" + b"\x00\x00\x00\x0aNumber.int" + b"\x01" + b"\x00\x00\x00\x019"
    )
    assert md5_of_attributes(attributes) == hashlib.md5(layout).hexdigest()


def test_the_attribute_digest_changes_with_the_type_label_but_not_the_order_given() -> None:
    one = {"a": string("1", "Number"), "b": string("x")}
    reordered = dict(reversed(list(one.items())))
    assert md5_of_attributes(one) == md5_of_attributes(reordered)
    relabelled = {"a": string("1", "Number.int"), "b": string("x")}
    assert md5_of_attributes(one) != md5_of_attributes(relabelled)


def test_the_digest_of_a_received_message_matches_the_digest_of_its_send() -> None:
    """An SDK compares the send's digest with its own and the receive's with its own: the
    stored form must come back to the very attributes that were sent."""
    sent = parse_attributes(
        {
            "s": string("h\u00e9"),
            "n": string("1.50", "Number"),
            "b": {"DataType": "Binary.png", "BinaryValue": "iVBORw=="},
        }
    )
    received = from_stored(json.loads(json.dumps(to_stored(sent))), ["All"])
    assert md5_of_attributes(received) == md5_of_attributes(sent)
