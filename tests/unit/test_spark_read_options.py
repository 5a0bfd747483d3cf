"""Spark read options (:mod:`pgq_django.spark.options`) at their edges: times and their
zones, option names in any case, the outcome list, and whole-number bounds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from pgq_django.exceptions import InvalidArgument, InvalidName
from pgq_django.spark.options import MAX_PARTITIONS, ReadOptions, timestamp


def parse(**options: str | None) -> ReadOptions:
    return ReadOptions.parse(options, default_dsn="dbname=x", default_partitions=4)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2025-01-31", datetime(2025, 1, 31, tzinfo=UTC)),
        ("2025-01-31T12:30:00", datetime(2025, 1, 31, 12, 30, tzinfo=UTC)),
        (" 2025-01-31T12:30:00Z ", datetime(2025, 1, 31, 12, 30, tzinfo=UTC)),
        (
            "2025-01-31T12:30:00+02:00",
            datetime(2025, 1, 31, 12, 30, tzinfo=timezone(timedelta(hours=2))),
        ),
        ("", None),
        (None, None),
    ],
)
def test_times_are_iso_8601_and_utc_unless_they_say_otherwise(text, expected) -> None:
    found = timestamp(text, "since")
    assert found == expected
    if found is not None:
        assert found.utcoffset() == expected.utcoffset()


def test_a_naive_datetime_given_directly_is_read_as_utc() -> None:
    assert timestamp(datetime(2025, 1, 31, 8), "until") == datetime(2025, 1, 31, 8, tzinfo=UTC)


@pytest.mark.parametrize("text", ["31/01/2025", "2025-02-30", "yesterday", "2025-01-31T25:00"])
def test_a_time_that_is_not_iso_8601_is_refused_with_an_example(text: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        timestamp(text, "since")
    assert caught.value.message == (
        "since must be an ISO 8601 date or time such as 2025-01-31 or "
        f"2025-01-31T12:00:00+00:00, not {text!r}."
    )


def test_since_equal_to_until_in_another_zone_is_an_empty_window_and_refused() -> None:
    with pytest.raises(InvalidArgument, match="since must be earlier than until"):
        parse(since="2025-01-31T00:00:00+00:00", until="2025-01-31T01:00:00+01:00")


def test_option_names_are_read_in_any_case_and_unset_options_are_skipped() -> None:
    opts = parse(NUMPARTITIONS="12", FetchSize="50", TABLE="messages", queue=None)
    assert (opts.partitions, opts.fetch_rows, opts.table, opts.queue) == (12, 50, "messages", None)


@pytest.mark.parametrize(
    ("given", "outcomes"),
    [("acked", ("acked",)), (" dead ,expired,", ("dead", "expired")), ("archived", ("archived",))],
)
def test_outcomes_are_a_comma_separated_list(given: str, outcomes: tuple[str, ...]) -> None:
    assert parse(outcome=given).outcomes == outcomes


@pytest.mark.parametrize(("given", "named"), [("acked,gone", "gone"), (" , ", "nothing")])
def test_an_unknown_or_empty_outcome_list_is_refused_naming_the_culprit(given, named) -> None:
    with pytest.raises(InvalidArgument) as caught:
        parse(outcome=given)
    assert caught.value.message == (
        "Option outcome takes a comma-separated list of acked, dead, expired, cancelled, "
        f"archived; {named} is not one."
    )


@pytest.mark.parametrize(("value", "ok"), [("1", True), (str(MAX_PARTITIONS), True), ("0", False),
                                           (str(MAX_PARTITIONS + 1), False), ("-3", False),
                                           ("2.5", False), ("many", False),
                                           ("\u0661\u0662", False), ("1_0", False),
                                           (" 4", False)])  # fmt: skip
def test_partition_counts_are_whole_numbers_from_one_to_the_maximum(value: str, ok: bool) -> None:
    if ok:
        assert parse(numPartitions=value).partitions == int(value)
    else:
        with pytest.raises(InvalidArgument) as caught:
            parse(numPartitions=value)
        assert caught.value.message == (
            f"Option numPartitions must be a whole number from 1 to {MAX_PARTITIONS}, "
            f"not {value!r}."
        )


def test_a_queue_option_is_checked_as_a_queue_name() -> None:
    assert parse(queue="orders.fifo").queue == "orders.fifo"
    with pytest.raises(InvalidName, match="not a valid queue name"):
        parse(queue="orders; drop")
