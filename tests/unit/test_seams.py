"""pgq_django.seams: the one module naming private internals of Django, asgiref, DRF and
psycopg; ``PGQ["FAST_PATHS"]`` chooses the shortcuts it takes; each has a public path that
gives the same answers."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.core.asgi import get_asgi_application
from django.test import override_settings
from rest_framework import serializers

from pgq_django import seams
from pgq_django.rest.present_fields import validate_present_fields
from pgq_django.rest.serializers import BatchIn, MessageIn, QueueCreateIn, Strict, SubscriptionIn

PACKAGE = Path(seams.__file__).parent

# What names a private internal of Django, asgiref, DRF or psycopg (the layer review's list).
PRIVATE = [
    r"\._connections\b", r"\b_storage\b", r"_get_running_loop", r"\bneeds_rollback\b",
    r"\bhealth_check_done\b", r"\bModelState\b", r"_declared_fields", r"\bget_converters\b",
    r"compiler\.select\b", r"\bread_body\b", r"\bcreate_request\b", r"\bsend_response\b",
    r"\bcommit_on_exit\b", r"\bsavepoint_ids\b", r"\brun_on_commit\b", r"\b_prepare_cursor\b",
    r"\bcreate_cursor\b", r"\bCursorWrapper\b", r"\b_state\.adding\b",
]  # fmt: skip

# Files allowed to name one still, each with what remains to move (none today).
KNOWN: dict[str, str] = {}


def all_but(shortcut: str) -> list[str]:
    return [name for name in seams.SHORTCUTS if name != shortcut]


def test_no_module_but_seams_names_a_private_internal() -> None:
    pattern = re.compile("|".join(PRIVATE))
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE.parent).as_posix()
        if (path.name == "seams.py" and path.parent == PACKAGE) or "migrations" in path.parts:
            continue
        hits = sorted({m.group(0) for m in pattern.finditer(path.read_text())})
        if hits and relative not in KNOWN:
            offenders[relative] = hits
    assert offenders == {}, f"private internals outside pgq_django/seams.py: {offenders}"


def test_every_shortcut_is_switched_by_its_own_name() -> None:
    """Each name of SHORTCUTS is what one ``on(...)`` check in seams asks, and no check asks
    a name the setting cannot list."""
    asked = [
        name
        for path in PACKAGE.rglob("*.py")
        for name in re.findall(r"\bon\(\"(\w+)\"\)", path.read_text())
    ]
    assert sorted(set(asked)) == sorted(seams.SHORTCUTS)
    assert len(set(seams.SHORTCUTS)) == len(seams.SHORTCUTS)


@pytest.mark.parametrize(
    ("chosen", "taken"),
    [
        (True, set(seams.SHORTCUTS)),
        (False, set()),
        ([], set()),
        (["present_fields"], {"present_fields"}),
        (("asgi_one_hop", "thread_connection"), {"asgi_one_hop", "thread_connection"}),
        ({"bare_instances"}, {"bare_instances"}),
    ],
    ids=["True", "False", "empty list", "one name", "a tuple", "a set"],
)
def test_fast_paths_takes_all_none_or_the_listed_shortcuts(chosen: Any, taken: set[str]) -> None:
    with override_settings(PGQ={"FAST_PATHS": chosen}):
        assert {name for name in seams.SHORTCUTS if seams.on(name)} == taken


def test_the_asgi_one_hop_borrows_djangos_steps_only_when_on_and_present() -> None:
    handler = get_asgi_application()
    with override_settings(PGQ={"FAST_PATHS": True}):
        steps = seams.asgi_request_steps(handler)
        assert steps is not None
        assert steps.build_request.__self__ is handler  # type: ignore[attr-defined]
        assert seams.asgi_request_steps(object()) is None  # a handler without them
    with override_settings(PGQ={"FAST_PATHS": all_but("asgi_one_hop")}):
        assert seams.asgi_request_steps(handler) is None


# -- request validation: the shortcut answers what DRF's own loop answers ----------------------

BODY = {"order": 1, "items": ["a"]}
REQUESTS: list[tuple[type[Strict], Any]] = [
    (MessageIn, {"body": BODY}),
    (MessageIn, {"body": BODY, "priority": 3, "delay": 1.5, "label": None, "headers": {}}),
    (MessageIn, {"priority": "3", "body": BODY, "delay": True, "group": 7}),
    (MessageIn, {"group": 7, "body": BODY, "priority": "3"}),
    (MessageIn, {"priority": 3, "label": "x", "body": BODY}),
    (MessageIn, {}),
    (MessageIn, {"body": BODY, "prio": 1, "zz": 2}),
    (MessageIn, ["not", "an", "object"]),
    (BatchIn, {"messages": [{"body": BODY}] * 3}),
    (BatchIn, {"messages": [{"body": 1}, {"priority": 1.5}, {"body": 2, "expires_in": "x"}]}),
    (BatchIn, {"messages": "nope"}),
    (BatchIn, {}),
    (QueueCreateIn, {"id": "q", "max_retries": 2, "fifo": True, "retry_delay": 0.5}),
    (QueueCreateIn, {"max_retries": "2", "fifo": "yes", "id": 5}),
    (SubscriptionIn, {"id": "s", "topic_id": "t", "queue_id": "q", "message_filters": None}),
    (SubscriptionIn, {"queue_id": "q", "message_filters": []}),
]


def _answer(serializer_class: type[Strict], data: Any) -> str:
    """What the API would answer, as ordered JSON: validity, errors, validated data."""
    serializer = serializer_class(data=data)
    valid = serializer.is_valid()
    return json.dumps([valid, serializer.errors, serializer.validated_data if valid else None])


@pytest.mark.parametrize(("serializer_class", "data"), REQUESTS)
def test_validation_answers_the_same_with_the_shortcut_and_with_drfs_loop(
    serializer_class: type[Strict], data: Any
) -> None:
    with override_settings(PGQ={"FAST_PATHS": True}):
        fast = _answer(serializer_class, data)
    with override_settings(PGQ={"FAST_PATHS": all_but("present_fields")}):
        public = _answer(serializer_class, data)
    assert fast == public


def test_the_plain_request_serializers_take_the_shortcut() -> None:
    with override_settings(PGQ={"FAST_PATHS": True}):
        for serializer_class, data in REQUESTS[:2]:
            found = validate_present_fields(serializer_class(data=data), data)
            assert found is not None and set(found) == set(data)


class _WithFieldCheck(Strict):
    name = serializers.CharField()

    def validate_name(self, value: str) -> str:
        return value.upper()


class _WithDefault(Strict):
    size = serializers.IntegerField(required=False, default=4)


@pytest.mark.parametrize(
    ("serializer_class", "data", "expected"),
    [(_WithFieldCheck, {"name": "ab"}, {"name": "AB"}), (_WithDefault, {}, {"size": 4})],
    ids=["a validate_<name> method", "a default"],
)
def test_a_serializer_outside_the_plain_shape_takes_drfs_loop(
    serializer_class: type[Strict], data: dict[str, Any], expected: dict[str, Any]
) -> None:
    with override_settings(PGQ={"FAST_PATHS": True}):
        serializer = serializer_class(data=data)
        assert validate_present_fields(serializer, data) is None
        assert serializer.is_valid(), serializer.errors
        assert dict(serializer.validated_data) == expected


def test_each_request_gets_fields_of_its_own() -> None:
    """Fields are copied per serializer from the class's, so binding one request's never
    shows in another's."""
    first, second = MessageIn(data={"body": 1}), MessageIn(data={"body": 2})
    assert first.fields["body"] is not second.fields["body"]
    assert first.fields["body"].parent is first and second.fields["body"].parent is second


def test_a_statement_for_libpq_numbers_each_named_parameter_once() -> None:
    shape = seams._libpq_statement(
        "SELECT %(a)s, %(b)s || '%%', %(a)s WHERE name = %(queue)s -- for libpq"
    )
    assert shape is not None
    assert shape.text == b"SELECT $1, $2 || '%', $1 WHERE name = $3 -- for libpq"
    assert shape.order == ("a", "b", "queue")
    again = seams._libpq_statement(
        "SELECT %(a)s, %(b)s || '%%', %(a)s WHERE name = %(queue)s -- for libpq"
    )
    assert again is shape
    other = seams._libpq_statement("SELECT %(a)s")
    assert other is not None and other.name != shape.name


@pytest.mark.parametrize(
    "statement", ["SELECT %s", "SELECT %(bodies)b", "SELECT %(a)s, %b", "SELECT 100 % 7"]
)
def test_a_statement_with_other_placeholders_is_left_to_psycopg(statement: str) -> None:
    assert seams._libpq_statement(statement) is None


@pytest.mark.parametrize(
    ("value", "sent"),
    [
        ("ü'\"%s", "ü'\"%s".encode()),
        ("", b""),
        (True, b"t"),
        (False, b"f"),
        (0, b"0"),
        (-(2**63), b"-9223372036854775808"),
        (None, None),
    ],
)
def test_parameters_for_libpq_are_sent_as_postgresql_reads_their_text(
    value: Any, sent: bytes | None
) -> None:
    assert seams._text_value(value) == sent


@pytest.mark.parametrize("value", [1.5, b"bytes", [1], {"a": 1}, object()])
def test_a_parameter_of_another_type_is_left_to_psycopg(value: Any) -> None:
    assert seams._text_value(value) is seams.NOT_RUN
