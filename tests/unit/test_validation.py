"""The argument checks every entry point shares (:mod:`pgq_django.validation`).

They run before any SQL, so each refusal here is a refusal everywhere: the Python API, REST,
SQS and Spark's executors. Each test names the exact error class and what its message says.
"""

from __future__ import annotations

import json
import string
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pgq_django import validation as v
from pgq_django.exceptions import InvalidArgument, InvalidMessage, InvalidName

# No example database in the checkout: each run draws afresh, and a failure prints its case.
QUICK = settings(database=None, max_examples=100, deadline=None)

NAME_CHARS = string.ascii_letters + string.digits + "_-"


def _nested(depth: int) -> list:
    """A list nested ``depth`` levels deep (``[]`` is one level)."""
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


# -- names ----------------------------------------------------------------------------------


@given(st.text(NAME_CHARS, min_size=1, max_size=80), st.booleans())
@QUICK
def test_every_name_of_the_rule_is_accepted_unchanged(stem: str, fifo: bool) -> None:
    name = stem + (".fifo" if fifo else "")
    assert v.name(name) == name


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "a" * 81,
        "a" * 81 + ".fifo",
        ".fifo",
        "queue.fifo.fifo",
        "queue.FIFO",
        "queue.txt",
        "with space",
        "trailing-newline\n",
        "nul\x00byte",
        "caf\u00e9",
        "\u0661\u0662",  # Arabic-Indic digits are digits to str.isdigit, not to the rule
        "\uff21",  # fullwidth A
        "a/b",
        "a;drop",
    ],
)
def test_names_outside_the_rule_are_refused_as_invalid_names(bad: str) -> None:
    with pytest.raises(InvalidName) as caught:
        v.name(bad)
    assert caught.value.details == {"name": bad}
    assert "1-80 letters, digits, '-' or '_'" in caught.value.message


def test_a_name_of_exactly_80_characters_takes_the_fifo_suffix_beyond_them() -> None:
    assert v.name("q" * 80) == "q" * 80
    assert v.name("q" * 80 + ".fifo") == "q" * 80 + ".fifo"


def test_name_reads_the_name_of_a_model_like_object_and_says_which_kind_it_checked() -> None:
    class Exchange:
        name = "events"

    assert v.name(Exchange()) == "events"
    Exchange.name = "bad name"
    with pytest.raises(InvalidName, match="not a valid exchange name"):
        v.name(Exchange(), kind="exchange")


@pytest.mark.parametrize("value", [5, None, b"queue", ["queue"]])
def test_a_name_that_is_not_a_string_is_refused_with_its_text_in_the_details(value) -> None:
    with pytest.raises(InvalidName) as caught:
        v.name(value)
    assert caught.value.details == {"name": str(value)}


# -- durations and integers -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, 0.0),
        (1.5, 1.5),
        (timedelta(minutes=2, milliseconds=500), 120.5),
        (v.MAX_SECONDS, float(v.MAX_SECONDS)),
    ],
)
def test_seconds_accepts_numbers_and_timedeltas_as_floats(value, expected) -> None:
    result = v.seconds(value, "delay")
    assert result == expected
    assert type(result) is float


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (True, "delay must be a number of seconds or a timedelta, not True."),
        ("5", "delay must be a number of seconds or a timedelta, not '5'."),
        (float("nan"), "delay must be a number of seconds or a timedelta, not nan."),
        (float("inf"), "delay must be a number of seconds or a timedelta, not inf."),
        (None, "delay must be a number of seconds or a timedelta, not None."),
        (-0.001, "delay must be at least 0 seconds, not -0.001."),
        (timedelta(seconds=-1), "delay must be at least 0 seconds, not -1.0."),
        (v.MAX_SECONDS + 1, "delay must be at most 100 years."),
    ],
)
def test_seconds_refuses_what_is_not_a_finite_duration_in_range(value, message: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        v.seconds(value, "delay")
    assert caught.value.message == message
    assert caught.value.details == {"field": "delay"}


def test_seconds_honours_its_minimum_and_lets_none_through_only_when_allowed() -> None:
    assert v.seconds(None, "expires_in", allow_none=True) is None
    assert v.seconds(0.001, "expires_in", minimum=0.001) == 0.001
    with pytest.raises(InvalidArgument, match=r"at least 0\.001 seconds, not 0\b"):
        v.seconds(0, "expires_in", minimum=0.001)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (1.0, "priority must be an integer, not 1.0."),
        (False, "priority must be an integer, not False."),
        ("1", "priority must be an integer, not '1'."),
        (-1, "priority must be between 0 and 2147483647, not -1."),
        (2**31, "priority must be between 0 and 2147483647, not 2147483648."),
    ],
)
def test_integer_refuses_floats_booleans_strings_and_values_out_of_range(value, message) -> None:
    with pytest.raises(InvalidArgument) as caught:
        v.integer(value, "priority")
    assert caught.value.message == message


@pytest.mark.parametrize(("qty", "ok"), [(0, False), (1, True), (1000, True), (1001, False)])
def test_a_read_quantity_is_between_one_and_a_thousand(qty: int, ok: bool) -> None:
    if ok:
        assert v.quantity(qty) == qty
    else:
        with pytest.raises(InvalidArgument, match="qty must be between 1 and 1000"):
            v.quantity(qty)


# -- message references ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (7, [7]),
        ("12:3", ["12:3"]),
        ((1, 2), [1, 2]),
        (iter([3, 4]), [3, 4]),
        ([], []),
    ],
)
def test_msg_ids_reads_one_reference_or_an_iterable_of_them(value, expected) -> None:
    assert v.msg_ids(value) == expected


@pytest.mark.parametrize("value", [b"\x01\x02", bytearray(b"\x01"), {1: 1}, {1, 2}, frozenset()])
def test_msg_ids_refuses_bytes_mappings_and_sets(value) -> None:
    with pytest.raises(InvalidArgument) as caught:
        v.msg_ids(value)
    assert type(value).__name__ in caught.value.message
    assert caught.value.details == {"field": "msg_ids"}


# -- text -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "ok"),
    [("ok", True), ("h\u00e9 \U0001f600", True), ("a\x00", True), ("\ud800", False)],
)
def test_is_utf8_refuses_only_what_cannot_be_encoded(value: str, ok: bool) -> None:
    """A NUL is valid UTF-8 (PostgreSQL refuses it separately); a lone surrogate is not."""
    assert v.is_utf8(value) is ok


def test_text_is_bounded_by_characters_not_bytes() -> None:
    assert v.text("\u00e9" * 1024, "label") == "\u00e9" * 1024
    with pytest.raises(InvalidArgument, match="label must be a string of at most 1024"):
        v.text("a" * 1025, "label")
    assert v.text("a" * 128, "group", max_length=128) == "a" * 128
    with pytest.raises(InvalidArgument, match="at most 128 characters"):
        v.text("a" * 129, "group", max_length=128)


@pytest.mark.parametrize("value", ["a\x00b", "\ud83d", "ok\udfff"])
def test_text_refuses_nul_and_lone_surrogates_that_postgresql_rejects(value: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        v.text(value, "label")
    assert "NUL character or a lone surrogate" in caught.value.message


def test_text_accepts_none_only_when_allowed() -> None:
    assert v.text(None, "label") is None
    with pytest.raises(InvalidArgument, match="label must be a string"):
        v.text(None, "label", allow_none=False)


# -- JSON parameters ------------------------------------------------------------------------

# The characters SQS allows (XML 1.0's): every other one is refused in a message.
XML_CHARS = st.characters(blacklist_categories=("Cs",)).filter(
    lambda c: c in "\t\n\r" or " " <= c <= "\ufffd" or c > "\uffff"
)
NOT_XML_CHARS = st.sampled_from(
    [chr(c) for c in range(1, 32) if chr(c) not in "\t\n\r"] + ["\ufffe", "\uffff"]
)
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(XML_CHARS),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(XML_CHARS, max_size=5), children, max_size=4)
    ),
    max_leaves=20,
)


@given(JSON)
@QUICK
def test_a_body_is_encoded_as_compact_json_that_decodes_to_the_same_value(value) -> None:
    encoded = v.body(value, None)
    assert json.loads(encoded) == value
    # Compact, and non-ASCII kept as such (never \\u escapes): the size check counts bytes.
    assert encoded == json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def test_nesting_is_accepted_up_to_the_limit_and_refused_one_level_beyond() -> None:
    assert v.body(_nested(v.MAX_DEPTH), None) == "[" * v.MAX_DEPTH + "]" * v.MAX_DEPTH
    with pytest.raises(InvalidMessage) as caught:
        v.body(_nested(v.MAX_DEPTH + 1), None)
    assert caught.value.message == (
        "Arrays and objects in the message body nest more than 100 levels deep."
    )


def test_wide_but_shallow_documents_pass_the_depth_check() -> None:
    """More brackets than the limit is not deeper than the limit."""
    wide = {"items": [[i] for i in range(500)], "more": [{} for _ in range(500)]}
    assert json.loads(v.body(wide, None)) == wide


@given(JSON, NOT_XML_CHARS, st.text(XML_CHARS, max_size=3), st.sampled_from(["value", "key"]))
@QUICK
def test_a_character_xml_cannot_carry_is_refused_anywhere_in_a_body_or_headers(
    value, bad, around, where
) -> None:
    text = around + bad + around
    poisoned = [value, text] if where == "value" else {text: value}
    with pytest.raises(InvalidMessage, match="holds a character XML cannot carry"):
        v.body(poisoned, None)
    with pytest.raises(InvalidMessage, match="headers holds a character XML cannot carry"):
        v.mapping({"h": poisoned}, "headers")
    with pytest.raises(InvalidMessage, match="attributes holds a character XML cannot carry"):
        v.mapping({"a": poisoned}, "attributes")


@pytest.mark.parametrize(
    "text", ["\\b", "\\f", "\\u0001", "C:\\bin", "\\\\u000b", "\ufffd", "\U0001fffe"]
)
def test_text_that_only_looks_like_a_control_characters_escape_is_kept(text) -> None:
    assert json.loads(v.body({"t": text}, {"k": text})) == {"t": text}


@pytest.mark.parametrize("field", ["label", "group", "dedup_id"])
@pytest.mark.parametrize("bad", ["\x01", "\x0b", "\ufffe"])
def test_a_label_group_or_dedup_id_xml_cannot_carry_is_refused(field, bad) -> None:
    with pytest.raises(InvalidArgument, match=f"{field} holds U\\+{ord(bad):04X}"):
        v.send_options(**{field: f"a{bad}"})


def test_nesting_past_the_encoders_own_recursion_limit_is_the_same_clear_error() -> None:
    with pytest.raises(InvalidMessage, match="nest more than 100 levels"):
        v.body(_nested(5000), None)


@pytest.mark.parametrize(
    ("value", "refused"),
    [
        ("a\x00b", True),
        ({"k\x00": 1}, True),
        (["\\\x00"], True),  # a literal backslash, then a real NUL
        ("\\u0000", False),  # six characters of text, stored as they are
        ("\\\\u0000", False),
    ],
)
def test_a_real_nul_is_refused_but_its_escape_written_as_text_is_kept(value, refused) -> None:
    if refused:
        with pytest.raises(InvalidMessage, match="PostgreSQL rejects the NUL character"):
            v.body(value, None)
    else:
        assert json.loads(v.body(value, None)) == value


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (float("nan"), "Cannot encode the message body as JSON"),
        ({"when": object()}, "Cannot encode the message body as JSON"),
        ("\ud800", "A lone surrogate (such as \\ud800) in the message body is not valid UTF-8."),
    ],
)
def test_bodies_json_or_postgresql_cannot_hold_are_invalid_messages(value, message) -> None:
    with pytest.raises(InvalidMessage) as caught:
        v.body(value, None)
    assert caught.value.message.startswith(message)


def test_a_circular_body_is_an_invalid_message_not_a_crash() -> None:
    loop: list = []
    loop.append(loop)
    with pytest.raises(InvalidMessage, match="Circular reference"):
        v.body(loop, None)


@pytest.mark.parametrize("value", [[], "x", {1: "a"}, {("a",): 1}])
def test_mapping_requires_an_object_with_string_keys(value) -> None:
    with pytest.raises(InvalidMessage, match="The headers must be a JSON object with string keys"):
        v.mapping(value, "headers")


def test_mapping_encodes_none_and_empty_as_an_empty_object() -> None:
    assert v.mapping(None, "headers") == "{}"
    assert v.mapping({}, "headers") == "{}"
    assert v.mapping({"b": 1, "a": [True, None]}, "headers") == '{"b":1,"a":[true,null]}'


# -- bodies by content type -----------------------------------------------------------------


@pytest.mark.parametrize(
    "content_type", ["application/xml", "text/xml", "Text/XML; charset=utf-8", " application/xml "]
)
def test_an_xml_body_must_be_a_well_formed_document(content_type: str) -> None:
    headers = {"content_type": content_type}
    assert v.body("<a><b/></a>", headers) == '"<a><b/></a>"'
    with pytest.raises(InvalidMessage, match="not well-formed"):
        v.body("<a>", headers)
    with pytest.raises(InvalidMessage, match="must be a string holding the document"):
        v.body({"a": 1}, headers)


def test_an_xml_body_with_entity_declarations_is_refused() -> None:
    bomb = '<!DOCTYPE x [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;">]><x>&b;</x>'
    with pytest.raises(InvalidMessage, match="forbidden construct"):
        v.body(bomb, {"content_type": "application/xml"})


def test_a_text_body_must_be_a_string_while_other_types_take_any_json() -> None:
    with pytest.raises(InvalidMessage, match=r"A text/plain body must be a string\."):
        v.body({"a": 1}, {"content_type": "text/plain"})
    assert v.body("hi", {"content_type": "text/plain"}) == '"hi"'
    assert v.body({"a": 1}, {"content_type": "application/json"}) == '{"a":1}'


# -- headers, tags, filters, send options ---------------------------------------------------


def test_header_keys_of_the_reserved_prefix_are_refused_in_any_case_and_all_named() -> None:
    headers = {"PGQ_dead_letter": 1, "ok": 2, "pgq_redriven": 3, "pgqx": 4}
    with pytest.raises(InvalidMessage) as caught:
        v.unreserved_headers(headers)
    assert caught.value.details == {"headers": ["PGQ_dead_letter", "pgq_redriven"]}
    assert "'PGQ_dead_letter', 'pgq_redriven'" in caught.value.message
    assert v.unreserved_headers({"pgqx": 1, "x_pgq_": 2}) == {"pgqx": 1, "x_pgq_": 2}


@pytest.mark.parametrize(
    ("tags", "message"),
    [
        ([("a", "b")], "tags must be a dict of at most 50"),
        ({f"k{i}": "v" for i in range(51)}, "tags must be a dict of at most 50"),
        ({"": "v"}, "A tag key must be a string of 1-128 characters"),
        ({"k" * 129: "v"}, "A tag key must be a string of 1-128 characters"),
        ({"k\x00": "v"}, "A tag key must be a string of 1-128 characters"),
        ({"k": "v" * 257}, "The value of tag 'k' must be a string of at most 256"),
        ({"k": 1}, "The value of tag 'k' must be a string"),
        ({"k": "\x00"}, "The value of tag 'k' must be a string"),
    ],
)
def test_tags_refuse_what_sqs_refuses(tags, message: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        v.tags(tags)
    assert caught.value.message.startswith(message)


def test_fifty_tags_at_their_longest_are_accepted_as_a_copy() -> None:
    given_tags = {f"{i:02d}" + "k" * 126: "v" * 256 for i in range(50)}
    checked = v.tags(given_tags)
    assert checked == given_tags
    assert checked is not given_tags


@pytest.mark.parametrize(
    ("filters", "error", "message"),
    [
        ({"body": {}}, InvalidArgument, "filters must be a dict with any of the keys"),
        ("label", InvalidArgument, "filters must be a dict with any of the keys"),
        ({"headers": []}, InvalidArgument, "The headers filter must be a JSON object, not []."),
        ({"attributes": {"a": float("inf")}}, InvalidMessage, "Cannot encode the attributes"),
        ({"label": 5}, InvalidArgument, "label filter must be a string"),
        ({"label": "a\x00"}, InvalidArgument, "label filter contains a NUL"),
    ],
)
def test_read_filters_are_checked_key_by_key(filters, error, message: str) -> None:
    with pytest.raises(error) as caught:
        v.filters(filters)
    assert type(caught.value) is error
    assert caught.value.message.startswith(message)


def test_read_filters_pass_through_when_valid_and_none_means_no_filter() -> None:
    given_filters = {"headers": {"kind": "a"}, "attributes": {}, "label": "x"}
    assert v.filters(given_filters) is given_filters
    assert v.filters(None) == {}


def test_send_options_are_encoded_as_statement_parameters() -> None:
    assert v.send_options(
        headers={"h": 1}, priority=-5, delay=timedelta(seconds=2), group="g", expires_in=0.5
    ) == {
        "headers": '{"h":1}',
        "attributes": "{}",
        "label": None,
        "priority": -5,
        "delay": 2.0,
        "group": "g",
        "dedup_id": None,
        "expires_in": 0.5,
        "max_retries": None,
        "retry_delay": None,
    }


@pytest.mark.parametrize(
    ("option", "value", "field"),
    [
        ("priority", -(2**31) - 1, "priority"),
        ("priority", 2**31, "priority"),
        ("expires_in", 0, "expires_in"),
        ("group", "g" * 129, "group"),
        ("dedup_id", "d" * 129, "dedup_id"),
        ("max_retries", -1, "max_retries"),
        ("retry_delay", -1, "retry_delay"),
        ("label", 3, "label"),
    ],
)
def test_each_send_option_out_of_range_names_its_own_field(option, value, field) -> None:
    with pytest.raises(InvalidArgument) as caught:
        v.send_options(**{option: value})
    assert caught.value.details == {"field": field}
