"""The PGMQ SQL interface's functions are rendered from the store's statements and fragments:
the templates hold no copy of a rule the store owns, every placeholder is filled, and what
the functions run is the store's text."""

from __future__ import annotations

import re

import pytest

from pgq_django.pgmq import sql
from pgq_django.store.sql import fragments, messages, pgmq_interface

RENDERED = {
    name: pgmq_interface.render(
        sql.script_text(name), schema="pgmq", tables="app", channel="pgq_wake"
    )
    for name in sql.SCRIPTS
}
TEMPLATES = {name: sql.script_text(name) for name in sql.SCRIPTS}


def _code(text: str) -> str:
    """``text`` without its SQL comments (prose may name what the code may not)."""
    return "\n".join(line.split("--", 1)[0] for line in text.splitlines())


# What the store's statements and fragments write, which a template may only name.
HAND_COPIES = {
    "the id sequences": r"pgq_message_(msg|transient)_id_seq",
    "the counter insert": r"INSERT INTO \S*pgq_queue_counter",
    "a queue's counted events": r"FROM \S*pgq_queue_counter",
    "the archive move": r"INSERT INTO \S*pgq_archived_message",
    "a wake-up of pgq_django's channel": r"pg_notify\(@channel@",
    "the group-head condition": r"e\.group_id = m\.group_id",
    "the max_length room check": r"LIMIT q\.max_length",
    "a lease's read count": r"read_ct = m\.read_ct \+ 1",
    "a message's expiry": r"make_interval\(secs => nullif\(",
}


@pytest.mark.parametrize("rule", sorted(HAND_COPIES))
def test_no_template_copies_a_rule_the_store_owns(rule: str) -> None:
    pattern = re.compile(HAND_COPIES[rule])
    copies = {name: pattern.findall(_code(text)) for name, text in TEMPLATES.items()}
    assert not any(copies.values()), f"{rule} written by hand: {copies}"


def test_every_placeholder_is_filled_and_every_parameter_bound() -> None:
    for name, text in RENDERED.items():
        code = _code(text)
        assert not re.findall(r"@\w+(?::[^@\n]*)?@", code), name
        assert not re.findall(r"%\(\w+\)[sb]|=> %s", code), name  # the store's parameters
        assert not re.findall(r"\{[a-z_]+\}", code), name  # the store's templates filled


def test_every_relation_of_the_store_is_named_with_its_schema() -> None:
    """The functions run with the caller's search_path (a PGMQ client's), not Django's."""
    relations = "|".join(r for r in pgmq_interface._RELATIONS)
    bare = re.compile(rf"(?<![\w.])({relations})\b")
    for name, text in RENDERED.items():
        assert bare.findall(_code(text)) == [], name


def test_the_functions_run_the_store_text() -> None:
    """One change reaches both doors: what the store writes is what the functions run."""
    everything = "\n".join(RENDERED.values())

    def in_schema(text: str) -> str:
        return pgmq_interface.qualified(text).replace("@pgq@", "app")

    assert in_schema(fragments.next_msg_id("q")) in everything
    assert in_schema(fragments.id_sequence("q")) in everything
    assert in_schema(fragments.COUNTER_INSERT) in everything
    assert in_schema(fragments.counter_total("'sent'", "qrow.id")) in everything
    assert fragments.notify_queue("queue_name", channel="'pgq_wake'") in everything
    assert in_schema(fragments.HAS_ROOM.format(q="q", n="cardinality(msgs)")) in everything
    # A FIFO read's group-head condition, as the store writes it.
    head = re.search(
        r"AND \(m\.group_id IS NULL.*?e\.msg_id < m\.msg_id\)\)", messages.READ[True], re.S
    )
    assert head is not None and in_schema(head.group(0)) in everything


def test_a_statement_that_changes_shape_stops_the_render() -> None:
    """A change the render cannot apply is an error, never a function without it."""
    with pytest.raises(AssertionError, match="expected"):
        pgmq_interface._reading("UPDATE pgq_message m SET vt = now() RETURNING m.msg_id")
    with pytest.raises(KeyError):
        pgmq_interface.render("@no_such_fragment@", schema="s", tables="t", channel="c")
