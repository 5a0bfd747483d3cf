"""Comments and docstrings in pgq_django say why, not what a benchmark once measured.

A figure in a comment ("a single send went from 0.81 to 0.88", "a fifth of a 100-message
read", "about 13 µs per lookup") is true for one machine on one day and goes stale with the
next change, while the comment stays. The figures live in docs/performance.md, with their
date, machine and command; a comment that needs one points there. This test reads every
comment and docstring of the package (with :mod:`tokenize`, so code and SQL strings are not
read) and fails listing each measurement it finds.

What counts as a measurement: a time below a second (µs, ns, and ms written as a decimal, a
range or an estimate), a percentage, a ratio (``2.5x``, with an x or a multiplication sign,
``1.5 times``), a change between two decimals ("from 0.81 to 0.88", "0.81 → 0.88"), a
fraction of a cost ("a fifth of", "by a quarter", "~0.5"), a rate (``msg/s``). Limits and
settings are not: "4 MiB", "HTTP 413", "every 60 s", "waits at most 100 ms for the lock",
"PgBouncer 1.18 to 1.21".
"""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pgq_django"

_NUMBER = r"\d+(?:[.,]\d+)*"
_DECIMAL = r"\d*\.\d+"
_RANGE = rf"{_NUMBER}\s*(?:-|\u2013|to)\s*{_NUMBER}"
_ESTIMATE = r"(?:~|≈|about|around|roughly|nearly|some)"

MEASUREMENT = re.compile(
    rf"""(?ix)
    # a time below a millisecond: never a setting
      {_NUMBER}\s*(?:µs|μs|us|ns)\b
    # milliseconds as a measurement: a decimal, a range or an estimate (a whole number of
    # milliseconds alone is a timeout or an interval)
    | (?:{_DECIMAL}|{_RANGE})\s*ms\b
    | {_ESTIMATE}\s*{_NUMBER}\s*ms\b
    # a percentage
    | {_NUMBER}\s*%
    # a ratio: 2.5x (an x or a multiplication sign), 1.5 times
    | {_NUMBER}\s*[x\u00d7](?!\w)
    | {_NUMBER}\s+times\s+(?:as|its|the|faster|slower|more|less|cheaper|dearer)\b
    # a change between two decimals: from 0.81 to 0.88, 0.81 -> 0.88 (versions aside)
    | (?<![\d.])(?<!PgBouncer\s)(?<!PostgreSQL\s)(?<!Django\s)(?<!Python\s)(?<!psycopg\s)
      {_DECIMAL}\s+(?:\S+\s+){{0,2}}?(?:to|→|->)\s+{_DECIMAL}(?![.\d])
    | (?<![\d.]){_DECIMAL}\s*(?:→|->)\s*{_DECIMAL}
    # a fraction of a cost
    | \b(?:a|one)\s+(?:third|quarter|fifth|sixth|seventh|eighth|tenth)\s+(?:of|less|more)\b
    | \bby\s+(?:a|one)\s+(?:third|quarter|fifth|sixth|seventh|eighth|tenth)\b
    # an estimated ratio: ~0.5 of the same SQL
    | (?:~|≈)\s*{_DECIMAL}
    # a rate
    | {_NUMBER}\s*(?:msgs?|messages|rows|calls|requests|ops)\s*/\s*s\b
    """
)


def _comment_and_docstring_lines(source: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of every comment line and every line of every docstring.

    A docstring is a string token that starts a statement (module, class or function
    docstring, or a bare string used as a comment); a string assigned or passed (SQL, a
    message) is not read.
    """
    starts_statement = True
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string.lstrip("#")
            continue
        if token.type == tokenize.STRING and starts_statement:
            for offset, line in enumerate(token.string.splitlines()):
                yield token.start[0] + offset, line
        if token.type in (tokenize.NL, tokenize.INDENT, tokenize.DEDENT):
            continue
        starts_statement = token.type == tokenize.NEWLINE


def measurements(source: str) -> list[tuple[int, str]]:
    """(line, matched text) of each measurement in the comments and docstrings of ``source``.

    Consecutive comment and docstring lines are read as one text, so a figure wrapped over
    two lines ("went from\\n0.81 to 0.88") is still found; it is reported at the line where
    it starts.
    """
    found: list[tuple[int, str]] = []
    lines = list(_comment_and_docstring_lines(source))
    text = ""
    starts: list[tuple[int, int]] = []  # (offset in text, line number)
    previous = None
    for number, line in lines:
        if previous is not None and number != previous + 1:
            text += "\n\n"  # a gap: a new block, which no match spans
        starts.append((len(text), number))
        text += " " + line.strip()
        previous = number
    for match in MEASUREMENT.finditer(text):
        line = max((n for offset, n in starts if offset <= match.start()), default=0)
        found.append((line, " ".join(match.group().split())))
    return found


def test_no_comment_or_docstring_in_the_package_quotes_a_measurement() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {figure!r}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line, figure in measurements(path.read_text(encoding="utf-8"))
    ]
    assert offenders == [], (
        "Comments and docstrings keep the why; measured figures go to docs/performance.md "
        "(point there instead):\n" + "\n".join(offenders)
    )


@pytest.mark.parametrize(
    "comment",
    [
        "# a single send went from 0.81 to 0.88 of a direct prepared statement's rate",
        "# a single send went from\n# 0.81 to 0.88 of a direct prepared statement's rate",
        "# two decodes a row were a tenth of the client's time",
        "# its per-field work was a fifth of a 100-message read",
        "# about 13 µs per lookup beside a statement's round trip",
        "# 130 us per call",
        "# a scan and a sort, 1-7 ms per read instead of 0.1 ms",
        "# adding ~40 ms to small answers",
        "# about 8 % of a single sender's time",
        "# ran at 0.76x PGMQ's throughput with the key and 0.89x without it",
        "# batches are 3\u00d7 faster",
        "# a send costs 1.5 times its prepared self",
        "# the server's CPU fell 0.96 → 0.88 per call",
        "# the drain went to 4,345 msg/s",
        "# the server's CPU per message fell by a quarter",
        "# pgq_django at ~0.5 of the same SQL",
    ],
)
def test_a_measurement_is_found(comment: str) -> None:
    assert measurements(comment + "\nx = 1\n") != []


@pytest.mark.parametrize(
    "comment",
    [
        "# bodies over 4 MiB are refused with HTTP 413",
        "# the leader checks every 60 s; a drop waits at most 100 ms for the lock",
        "# PgBouncer 1.18 to 1.21 keeps no prepared statement",
        "# a prepare threshold of 2**31 - 1, and 0x7fffffff",
        "# priorities from 0 to 9; ids 1-7 of a range",
        "# half of each page free, so a lease is a HOT update",
        "# a third party's client; the first quarter",
    ],
)
def test_a_limit_or_a_setting_is_not_a_measurement(comment: str) -> None:
    assert measurements(comment + "\nx = 1\n") == []


def test_strings_that_are_code_are_not_read() -> None:
    source = 'SQL = "SELECT 1 -- about 13 µs, 0.5x"\nprint("took 3.5 ms")\n'
    assert measurements(source) == []


def test_a_docstring_is_read() -> None:
    source = 'def f():\n    """Builds rows.\n\n    Was a tenth of the read."""\n'
    assert measurements(source) == [(4, "a tenth of")]
