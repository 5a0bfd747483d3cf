"""Exchange routing's Python side (:mod:`pgq_django.routing`): topic patterns compiled to
regular expressions, routing keys and binding filters checked before any SQL.

The compiled pattern is matched by PostgreSQL's regex engine in the publish statement; its
escaping is chosen to mean the same in Python's ``re``, so these tests hold it against an
independent, word-by-word reading of the AMQP rules.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pgq_django.exceptions import InvalidArgument
from pgq_django.routing import (
    MAX_ROUTING_KEY,
    binding_filters,
    routing_key,
    topic_regex,
    topic_subject,
)

QUICK = settings(database=None, max_examples=150, deadline=None)


def amqp_topic_match(pattern: str, key: str) -> bool:
    """AMQP topic matching, word by word: ``*`` one word, ``#`` zero or more."""

    def match(p: list[str], k: list[str]) -> bool:
        if not p:
            return not k
        if p[0] == "#":
            return any(match(p[1:], k[i:]) for i in range(len(k) + 1))
        if not k:
            return False
        return (p[0] == "*" or p[0] == k[0]) and match(p[1:], k[1:])

    return match(pattern.split("."), key.split("."))


def routes(pattern: str, key: str | None) -> bool:
    return re.fullmatch(topic_regex(pattern), topic_subject(key)) is not None


# Words drawn from a small alphabet so that patterns and keys share words often, plus the
# characters a regex would otherwise read as syntax.
WORD = st.sampled_from(["a", "b", "ab", "", "x+y", "(c)", "a|b", "[z]", "^$", "\\", "é", "?"])
KEY = st.lists(WORD, max_size=5).map(".".join)
PATTERN = st.lists(st.one_of(WORD, st.just("*"), st.just("#")), max_size=5).map(".".join)


@given(PATTERN, KEY)
@QUICK
def test_compiled_topic_patterns_route_exactly_as_the_amqp_rules(pattern: str, key: str) -> None:
    assert routes(pattern, key) == amqp_topic_match(pattern, key)


@pytest.mark.parametrize(
    ("pattern", "regex"),
    [
        ("#", r"^(\.[^.]*)*$"),
        ("*", r"^\.[^.]*$"),
        ("", r"^\.$"),
        ("a.*.#", r"^\.a\.[^.]*(\.[^.]*)*$"),
        ("order.created", r"^\.order\.created$"),
        ("x+y.(z)", r"^\.x\+y\.\(z\)$"),
        ("caf\u00e9_1", "^\\.caf\u00e9_1$"),
    ],
)
def test_topic_patterns_compile_to_this_exact_anchored_text(pattern: str, regex: str) -> None:
    """The text is stored on the binding and read by PostgreSQL: a change here is a
    change in every existing binding's meaning, so it is pinned."""
    assert topic_regex(pattern) == regex


@pytest.mark.parametrize("key", [None, "", "a", "a.b.c.d", ".", "a..b"])
def test_hash_alone_routes_every_key_including_none_and_empty(key: str | None) -> None:
    assert routes("#", key)


@pytest.mark.parametrize(("key", "expected"), [(None, True), ("", True), ("a", False)])
def test_the_empty_pattern_routes_only_the_empty_key(key: str | None, expected: bool) -> None:
    assert routes("", key) is expected


@pytest.mark.parametrize(
    ("pattern", "key", "expected"),
    [
        ("a.*", "a.b", True),
        ("a.*", "a", False),
        ("a.*", "a.b.c", False),
        ("a.#", "a", True),
        ("a.#", "a.b.c", True),
        ("#.a", "a", True),
        ("a.#.b", "a.b", True),
        ("a.#.b", "a.x.y.b", True),
        ("*.*", "a.", True),  # an empty word is a word
        ("*", "", True),
        ("a.*.c", "a.c", False),
    ],
)
def test_star_is_one_word_and_hash_any_number_of_words(pattern, key, expected) -> None:
    assert routes(pattern, key) is expected


@pytest.mark.parametrize(
    ("pattern", "would_match_if_unescaped"),
    [
        ("x|y", "x"),
        ("x|y", "y"),
        ("a?", "a"),
        ("^a$", "a"),
        ("a+", "aa"),
        ("(c)", "c"),
        ("[z]", "z"),
        ("a\\d", "a1"),
    ],
)
def test_regex_syntax_in_a_word_matches_only_itself(pattern, would_match_if_unescaped) -> None:
    assert routes(pattern, pattern)
    assert not routes(pattern, would_match_if_unescaped)


def test_only_letters_digits_and_underscore_are_left_bare_in_the_regex() -> None:
    """Backslash before a letter would start an escape (``\\d``), so letters stay bare and
    every other character is escaped: the pattern means the same in PostgreSQL and Python."""
    body = topic_regex("a-b:c~d")[3:-1]
    assert body == r"a\-b\:c\~d"


# -- routing keys ---------------------------------------------------------------------------


def test_a_missing_routing_key_is_the_empty_key() -> None:
    assert routing_key(None) == ""
    assert topic_subject(None) == topic_subject("") == "."


def test_a_routing_key_may_have_255_characters_and_not_one_more() -> None:
    assert routing_key("k" * MAX_ROUTING_KEY) == "k" * MAX_ROUTING_KEY
    with pytest.raises(InvalidArgument) as caught:
        routing_key("k" * (MAX_ROUTING_KEY + 1))
    assert caught.value.details == {"field": "routing_key"}
    assert "at most 255 characters" in caught.value.message


@pytest.mark.parametrize("bad", ["a\x00b", "\ud800", 5, b"key", ["a"]])
def test_routing_keys_postgresql_cannot_store_are_refused(bad) -> None:
    with pytest.raises(InvalidArgument, match="routing_key must be a string"):
        routing_key(bad)


# -- binding filters ------------------------------------------------------------------------


def test_filters_of_one_scalar_become_one_value_lists_and_tuples_become_lists() -> None:
    assert binding_filters({"region": "eu", "n": 3, "ok": True, "kinds": ("a", "b")}) == {
        "region": ["eu"],
        "n": [3],
        "ok": [True],
        "kinds": ["a", "b"],
    }
    assert binding_filters(None) == {}


@pytest.mark.parametrize(
    "filters",
    [
        ["region"],
        {"region": []},
        {"": ["eu"]},
        {"region": [["eu"]]},
        {"region": [{"eu": 1}]},
        {"region": None},
        {"region": [None]},
        {"n": [float("nan")]},
        {"n": float("inf")},
        {"k\x00": ["v"]},
        {"k": ["v\x00"]},
        {"k": ["\udc00"]},
        {1: ["v"]},
    ],
)
def test_filters_that_cannot_be_matched_as_jsonb_scalars_are_refused(filters) -> None:
    with pytest.raises(InvalidArgument) as caught:
        binding_filters(filters)
    assert caught.value.details == {"field": "filters"}
    assert caught.value.message.startswith(
        "filters must be a dict mapping names to a list of allowed values"
    )
