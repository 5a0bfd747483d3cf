"""The statement catalogue (:mod:`pgq_django.store.sql`) read as text, without a database: each
statement's placeholders are ones psycopg can bind, shape-keyed variants agree on their
parameters, and templates can only be filled with quoted identifiers."""

from __future__ import annotations

import re
from collections import Counter

import pytest
from psycopg.sql import SQL, Composable, Identifier

from pgq_django.store import sql

STATEMENTS = list(sql.statements())
IDS = [f"{module}.{name}" for module, name, _statement in STATEMENTS]
NAMED = re.compile(r"%\((\w+)\)[sbt]")
POSITIONAL = re.compile(r"%[sbt]")
TEMPLATE_SLOT = re.compile(r"(?<!\{)\{(\w+)\}(?!\})")


def texts(statement: sql.Statement) -> list[str]:
    """The statement's text(s); a template is read with its slots left as written."""
    values = statement.values() if isinstance(statement, dict) else [statement]
    return [v.as_string(None) if isinstance(v, Composable) else v for v in values]


def test_the_catalogue_is_found_and_every_name_names_one_statement() -> None:
    counts = Counter(name for _module, name, _statement in STATEMENTS)
    assert len(STATEMENTS) > 50
    assert [name for name, n in counts.items() if n > 1] == []


@pytest.mark.parametrize(("module", "name", "statement"), STATEMENTS, ids=IDS)
def test_every_percent_sign_is_a_placeholder_psycopg_binds_or_an_escaped_one(
    module: str, name: str, statement: sql.Statement
) -> None:
    for text in texts(statement):
        stray = re.sub(r"%%|%\(\w+\)[sbt]|%[sbt]", "", text)
        assert "%" not in stray, f"{module}.{name}: a bare % (write %% for a literal one)"
        assert not (NAMED.search(text) and POSITIONAL.search(text)), (
            f"{module}.{name} mixes named and positional placeholders, which psycopg refuses"
        )


@pytest.mark.parametrize(
    ("module", "name", "statement"),
    [s for s in STATEMENTS if isinstance(s[2], dict)],
    ids=[i for i, s in zip(IDS, STATEMENTS, strict=True) if isinstance(s[2], dict)],
)
def test_a_statement_keyed_by_a_flag_has_a_distinct_text_for_each_value(
    module: str, name: str, statement: dict[bool, str]
) -> None:
    """``READ[fifo]``, ``DELETE[with_result]``: the manager indexes with a bool, so a
    missing key would only fail when that case first runs."""
    assert set(statement) == {False, True}
    assert statement[False] != statement[True]


@pytest.mark.parametrize("name", ["READ", "POP"])
def test_the_read_filters_slot_is_the_only_format_field_of_reads(name: str) -> None:
    """Reads are completed with ``str.format(filters=...)``: any other brace in them must
    be doubled, or the format would fail or eat SQL."""
    for shape, text in getattr(sql.messages, name).items():
        # A FIFO read filters its group heads and the messages it takes behind them.
        assert set(TEMPLATE_SLOT.findall(text)) == {"filters"}, shape
        filled = text.format(filters="AND m.label = %(label)s")
        assert "{" not in filled.replace("'{}'", "")
        assert "%(label)s" in filled


def test_templates_put_whatever_fills_their_slots_in_as_quoted_identifiers() -> None:
    hostile = 'x"; DROP TABLE pgq_message; --'
    templates = [
        (module, name, statement)
        for module, name, statement in STATEMENTS
        if isinstance(statement, SQL) and TEMPLATE_SLOT.search(statement.as_string(None))
    ]
    assert templates
    for module, name, template in templates:
        slots = set(TEMPLATE_SLOT.findall(template.as_string(None)))
        text = template.format(**dict.fromkeys(slots, Identifier(hostile))).as_string(None)
        assert '"x""; DROP TABLE pgq_message; --"' in text, f"{module}.{name}"
        assert 'x"; DROP' not in text.replace('x""; DROP', "")
