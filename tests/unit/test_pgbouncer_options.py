"""The PgBouncer wrapper's command-line settings, and when it tells a command that the pooler
keeps prepared statements (the test settings then leave PREPARED_STATEMENTS on)."""

from __future__ import annotations

import argparse

import pytest

from bench.pgbouncer import keeps_prepared, setting_argument


def test_a_setting_is_key_equals_value_with_spaces_trimmed() -> None:
    assert setting_argument(" server_check_delay = 0 ") == ("server_check_delay", "0")
    assert setting_argument("application_name_add_host=") == ("application_name_add_host", "")


@pytest.mark.parametrize("text", ["max_prepared_statements", "=200", " =1"])
def test_a_setting_without_a_key_or_an_equals_sign_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="KEY=VALUE"):
        setting_argument(text)


@pytest.mark.parametrize(
    ("settings", "kept"),
    [
        ({}, False),
        ({"max_prepared_statements": "0"}, False),
        ({"max_prepared_statements": ""}, False),
        ({"max_prepared_statements": "off"}, False),
        ({"max_prepared_statements": "200"}, True),
        ({"server_check_delay": "0", "max_prepared_statements": " 1 "}, True),
    ],
)
def test_only_a_positive_max_prepared_statements_keeps_prepared_statements(
    settings: dict[str, str], kept: bool
) -> None:
    assert keeps_prepared(settings) is kept
