"""Argument types the management commands share (argparse ``type=`` callables).

Each turns one command-line word into a value or raises ``ArgumentTypeError`` with a
sentence argparse prints after the option's name.
"""

from __future__ import annotations

import argparse

from ..validation import is_ascii_digits


def _whole_number(value: str, minimum: int) -> int:
    # ASCII digits only: int() would also read other scripts' digits and "1_000".
    if not is_ascii_digits(value.removeprefix("-")):
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number")
    number = int(value)
    if number < minimum:
        raise argparse.ArgumentTypeError(f"must be at least {minimum}")
    return number


def positive_int(value: str) -> int:
    return _whole_number(value, 1)


# The largest batch one lease may take (the handler option ``batch`` has the same bound).
MAX_BATCH_SIZE = 1000


def batch_size(value: str) -> int:
    number = _whole_number(value, 1)
    if number > MAX_BATCH_SIZE:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_BATCH_SIZE}")
    return number


def non_negative_int(value: str) -> int:
    return _whole_number(value, 0)


def non_negative_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
    if not number >= 0:
        raise argparse.ArgumentTypeError("must be zero or more seconds")
    return number


def positive_float(value: str) -> float:
    number = non_negative_float(value)
    if number <= 0:
        raise argparse.ArgumentTypeError("must be more than zero seconds")
    return number
