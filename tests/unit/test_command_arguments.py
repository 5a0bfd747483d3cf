"""The argument types the management commands share (pgq_django.management.arguments)."""

from __future__ import annotations

import argparse

import pytest

from pgq_django.management import arguments


@pytest.mark.parametrize("word", ["\u0661", "\u00b2", "1_000", " 3", "3.0", "", "-"])
def test_whole_numbers_are_ascii_digits_only(word: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="is not a whole number"):
        arguments.non_negative_int(word)


def test_whole_numbers_keep_their_lower_bounds() -> None:
    assert arguments.non_negative_int("0") == 0
    assert arguments.positive_int("7") == 7
    with pytest.raises(argparse.ArgumentTypeError, match="at least 1"):
        arguments.positive_int("0")
    with pytest.raises(argparse.ArgumentTypeError, match="at least 0"):
        arguments.non_negative_int("-2")


def test_a_batch_is_at_most_the_lease_bound() -> None:
    assert arguments.batch_size(str(arguments.MAX_BATCH_SIZE)) == arguments.MAX_BATCH_SIZE
    with pytest.raises(argparse.ArgumentTypeError, match="at most"):
        arguments.batch_size(str(arguments.MAX_BATCH_SIZE + 1))


@pytest.mark.parametrize(("word", "message"), [("x", "not a number"), ("-1", "zero or more")])
def test_seconds_are_numbers_of_zero_or_more(word: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        arguments.non_negative_float(word)


def test_positive_seconds_refuse_zero_and_nan() -> None:
    assert arguments.positive_float("0.5") == 0.5
    for word in ("0", "nan"):
        with pytest.raises(argparse.ArgumentTypeError):
            arguments.positive_float(word)
