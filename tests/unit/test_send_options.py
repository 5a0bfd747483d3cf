"""The send options' defaults are written twice on purpose: checked values in the API and
constants in SEND_PLAIN's text. The manager picks SEND_PLAIN when a send's options equal
the statement's defaults, so the two must never drift apart."""

from __future__ import annotations

from pgq_django import validation as v
from pgq_django.store.sql import fragments, messages


def test_the_options_of_a_send_without_options_are_the_statements_defaults() -> None:
    assert v.send_options() == fragments.SEND_OPTION_DEFAULTS


def test_the_plain_send_binds_no_option_and_the_others_bind_every_one() -> None:
    for name in fragments.SEND_OPTION_DEFAULTS:
        assert f"%({name})s" not in messages.SEND_PLAIN
        assert f"%({name})s" in messages.SEND_UNCOUNTED
    assert "'{}'::jsonb" in messages.SEND_PLAIN
