"""The parameter builders of :mod:`pgq_django.store.sql.params`, held to the statements they feed.

The managers and Spark's executors run the same send, publish, read, ack and queue-state
statements and build their parameters with the same functions; these tests read each
statement's placeholders from its text and check that the builder gives exactly those names
(no database needed). A name missing would fail only when that statement first ran.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from pgq_django import validation as v
from pgq_django.store.sql import catalogue, delivery, exchanges, messages, queues
from pgq_django.store.sql import params as p
from pgq_django.store.sql.delivery import DEDUP_WINDOW_SECONDS
from pgq_django.store.sql.fragments import SEND_OPTION_DEFAULTS

NAMED = re.compile(r"%\((\w+)\)[sbt]")
POSITIONAL = re.compile(r"(?<!%)%[sbt]")


def placeholders(text: str) -> set[str]:
    return set(NAMED.findall(text))


def _options(**given: Any) -> dict[str, Any]:
    return v.send_options(**given)


FILTERS = {"headers": {"h": 1}, "attributes": {"a": "x"}, "label": "l"}
FILTER_CLAUSE, FILTER_VALUES = p.read_filters(FILTERS)

# (builder call, the statement texts it feeds, names the builder gives that some of those
# texts do not bind). An ack does not know whether the queue archives on ack until a shape
# has run (the manager guesses, and runs the other shape with the same dict when the guess
# was stale), so it always gives the ``result`` that only the archiving shape keeps;
# ACK_ONE is the lean ack of a queue that does not archive.
CASES: list[tuple[str, Callable[[], Any], list[str], set[str]]] = [
    (
        "send",
        lambda: p.send_params(
            "q", ["{}", "[]"], size=2, channel="pgq", notify=True, options=_options(priority=3)
        ),
        [messages.SEND, messages.SEND_UNCOUNTED],
        set(),
    ),
    (
        "send without options",
        lambda: p.send_params("q", ["{}"], size=2, channel="pgq", notify=False, options={}),
        [messages.SEND, messages.SEND_UNCOUNTED],
        set(),
    ),
    (
        "send_one",
        lambda: p.send_one_params("q", "{}", size=2, channel="pgq", notify=True),
        [
            messages.SEND_ONE,
            messages.SEND_ONE_COUNTED,
            messages.SEND_PLAIN,
            messages.SEND_PLAIN_COUNTED,
        ],
        set(),
    ),
    (
        "send_deduplicated",
        lambda: p.send_deduplicated_params(
            "q", "{}", size=2, channel="pgq", options=_options(dedup_id="d")
        ),
        [delivery.SEND_DEDUPLICATED],
        set(),
    ),
    (
        "publish",
        lambda: p.publish_params(
            "x", "{}", size=2, routing_key="a.b", channel="pgq", options=_options()
        ),
        [exchanges.PUBLISH],
        set(),
    ),
    (
        "publish with dedup_id",
        lambda: p.publish_params(
            "x", "{}", size=2, routing_key="a.b", channel="pgq", options=_options(dedup_id="d")
        ),
        [exchanges.PUBLISH_DEDUPLICATED],
        set(),
    ),
    (
        "read",
        lambda: p.read_params("q", qty=5, vt=None, max_bytes=1024),
        [messages.READ[fifo].format(filters="") for fifo in (False, True)],
        set(),
    ),
    (
        "read with filters",
        lambda: p.read_params("q", qty=5, vt=3.0, max_bytes=1024, filter_values=FILTER_VALUES),
        [messages.READ[fifo].format(filters=FILTER_CLAUSE) for fifo in (False, True)],
        set(),
    ),
    (
        "delete",
        lambda: p.delete_params("q", [(1, 1), (2, None)], result=None),
        [messages.DELETE[True], messages.DELETE_UNCOUNTED[True]],
        set(),
    ),
    (
        "delete, queue not archiving",
        lambda: p.delete_params("q", [(1, 1), (2, None)], result=None),
        [messages.DELETE[False], messages.DELETE_UNCOUNTED[False]],
        {"result"},
    ),
    (
        "delete_one",
        lambda: p.delete_one_params("q", (1, 1), result='{"ok": true}'),
        [messages.DELETE_ONE[True], messages.DELETE_ONE_UNCOUNTED[True]],
        set(),
    ),
    (
        "delete_one, queue not archiving",
        lambda: p.delete_one_params("q", (1, 1), result='{"ok": true}'),
        [messages.DELETE_ONE[False], messages.DELETE_ONE_UNCOUNTED[False], messages.ACK_ONE],
        {"result"},
    ),
]


@pytest.mark.parametrize(("case", "build", "texts", "unused"), CASES, ids=[c[0] for c in CASES])
def test_a_builder_gives_exactly_the_names_its_statements_bind(
    case: str, build: Callable[[], dict[str, Any]], texts: list[str], unused: set[str]
) -> None:
    keys = set(build())
    for text in texts:
        assert placeholders(text) == keys - unused, case
        assert not POSITIONAL.search(text), case


def test_the_queue_state_is_asked_by_one_positional_name() -> None:
    assert len(POSITIONAL.findall(queues.QUEUE_STATE)) == 1
    assert not placeholders(queues.QUEUE_STATE)
    assert p.queue_state_params("orders") == ["orders"]


def test_send_options_not_given_take_their_defaults_and_given_ones_win() -> None:
    built = p.send_params("q", ["{}"], size=2, channel="pgq", notify=True, options={})
    assert {k: built[k] for k in SEND_OPTION_DEFAULTS} == SEND_OPTION_DEFAULTS
    built = p.send_params(
        "q", ["{}"], size=2, channel="pgq", notify=True, options=_options(label="x", delay=5)
    )
    assert (built["label"], built["delay"], built["priority"]) == ("x", 5.0, 0)


def test_send_bodies_are_a_new_list_the_caller_may_extend() -> None:
    """Spark's sink appends the bodies of consecutive sends with the same options."""
    bodies = ("{}",)
    first = p.send_params("q", bodies, size=2, channel="pgq", notify=True, options={})
    second = p.send_params("q", bodies, size=2, channel="pgq", notify=True, options={})
    first["bodies"].append("[]")
    assert first["bodies"] == ["{}", "[]"]
    assert second["bodies"] == ["{}"]


def test_a_deduplicated_send_claims_for_the_dedup_window() -> None:
    built = p.send_deduplicated_params(
        "q", "{}", size=2, channel="pgq", options=_options(dedup_id="d")
    )
    assert (built["window"], built["dedup_id"]) == (DEDUP_WINDOW_SECONDS, "d")


@pytest.mark.parametrize(("key", "subject"), [("a.b", ".a.b"), ("", "."), (None, ".")])
def test_publish_matches_topic_patterns_against_the_key_with_a_leading_dot(
    key: str | None, subject: str
) -> None:
    assert p.topic_subject(key) == subject
    built = p.publish_params(
        "x", "{}", size=2, routing_key=key or "", channel="pgq", options=_options()
    )
    assert built["topic_subject"] == subject
    assert "window" not in built  # only a deduplicated publish claims


def test_read_filters_are_fixed_fragments_with_values_as_parameters() -> None:
    assert p.read_filters(None) == ("", {})
    assert p.read_filters({}) == ("", {})
    assert p.read_filters({"headers": {}, "label": None}) == ("", {})
    clause, values = p.read_filters(FILTERS)
    assert clause == " ".join(messages.READ_FILTERS[k] for k in ("headers", "attributes", "label"))
    assert values == {
        "f_headers": json.dumps({"h": 1}),
        "f_attributes": json.dumps({"a": "x"}),
        "f_label": "l",
    }
    clause, values = p.read_filters({"label": "only"})
    assert (clause, values) == (messages.READ_FILTERS["label"], {"f_label": "only"})


def test_receipts_become_two_arrays_in_order() -> None:
    refs = [(5, 2), (3, None)]
    assert p.receipt_params(refs) == {"ids": [5, 3], "cts": [2, None]}
    built = p.delete_params("q", refs, result=None)
    assert {k: built[k] for k in ("ids", "cts")} == p.receipt_params(refs)
    assert p.delete_one_params("q", (5, None), result=None) == {
        "queue": "q",
        "result": None,
        "msg_id": 5,
        "ct": None,
    }


# The names that only these statements bind: a dict literal with one of them outside
# sql/ would be a second copy of the contract.
_SHARED_NAMES = {"bodies", "topic_subject", "window"}


def test_managers_and_spark_build_the_shared_parameters_only_through_the_builders() -> None:
    copies = []
    for relative, tree in catalogue.package_sources():
        if not relative.startswith(("managers/", "spark/")):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Dict):
                keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
                if keys & _SHARED_NAMES:
                    copies.append(f"{relative}:{node.lineno}")
    assert copies == []
