"""The REST API's query strings (:mod:`pgq_django.rest.views.params`): known names only,
given once, whole numbers and durations within bounds, and the page of a list."""

from __future__ import annotations

import pytest
from django.test import RequestFactory, override_settings
from rest_framework.request import Request

from pgq_django.exceptions import InvalidArgument
from pgq_django.rest.views.params import page, parse_query, seconds, text, whole


def request(query: str) -> Request:
    return Request(RequestFactory().get(f"/v1/queues?{query}"))


@pytest.mark.parametrize(("value", "expected"), [("1", 1), ("100", 100), ("007", 7)])
def test_whole_numbers_are_read_within_their_bounds(value: str, expected: int) -> None:
    assert whole("limit", 1, 100)(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        "",
        "0",
        "101",
        "-1",
        "+5",
        " 5",
        "5 ",
        "1.0",
        "1e2",
        "0x10",
        "1_0",
        "0" * 12 + "1",
        "\u0661\u0662",
        "\u00b2",
    ],
)
def test_anything_but_bounded_plain_digits_is_refused_with_the_bounds(value: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        whole("limit", 1, 100)(value)
    assert caught.value.message == f"limit must be a whole number from 1 to 100, not {value!r}."
    assert caught.value.details == {"field": "limit"}


@pytest.mark.parametrize(("value", "expected"), [("0", 0.0), ("2.5", 2.5), ("20", 20.0)])
def test_durations_are_read_as_seconds_up_to_their_limit(value: str, expected: float) -> None:
    assert seconds("wait", 20)(value) == expected


@pytest.mark.parametrize(
    "value", ["-1", "20.001", "nan", "inf", "-inf", "soon", "", "1" + "0" * 32]
)
def test_durations_out_of_range_or_not_finite_are_refused(value: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        seconds("wait", 20)(value)
    assert caught.value.message == f"wait must be a number of seconds from 0 to 20, not {value!r}."


def test_text_parameters_refuse_nul_and_more_than_1024_characters() -> None:
    assert text("label")("x" * 1024) == "x" * 1024
    for bad in ("x" * 1025, "a\x00b"):
        with pytest.raises(InvalidArgument, match="label must be at most 1024 characters"):
            text("label")(bad)


def test_an_unknown_query_parameter_is_refused_listing_the_allowed_ones() -> None:
    with pytest.raises(InvalidArgument) as caught:
        parse_query(request("limit=5&ofset=2"), {"limit": str, "offset": str})
    assert caught.value.message == "Unknown query parameter 'ofset'; allowed: limit, offset."
    with pytest.raises(InvalidArgument, match="allowed: none"):
        parse_query(request("x=1"), {})


def test_a_query_parameter_given_twice_is_refused() -> None:
    with pytest.raises(InvalidArgument) as caught:
        parse_query(request("limit=5&limit=6"), {"limit": str})
    assert caught.value.message == "Give limit once."


@override_settings(PGQ={"REST_DEFAULT_LIMIT": 25, "REST_MAX_LIMIT": 200})
def test_a_page_defaults_to_the_configured_limit_and_offset_zero_and_caps_the_limit() -> None:
    assert page(request("")) == (25, 0)
    assert page(request("limit=200&offset=999999999999")) == (200, 10**12 - 1)
    with pytest.raises(InvalidArgument, match="limit must be a whole number from 1 to 200"):
        page(request("limit=201"))
    with pytest.raises(InvalidArgument, match="offset must be a whole number from 0 to"):
        page(request("offset=99999999999999"))


@pytest.mark.parametrize("value", ["\u0661\u0662", "1_0", " 5", "5 ", "inf", "1e3", "+2"])
def test_durations_are_ascii_decimal_numbers_only(value: str) -> None:
    with pytest.raises(InvalidArgument, match="number of seconds"):
        seconds("wait_seconds", 20)(value)


def test_the_largest_offset_the_error_names_is_accepted() -> None:
    parse = whole("offset", 0, 10**12 - 1)
    assert parse("999999999999") == 10**12 - 1
    with pytest.raises(InvalidArgument, match="from 0 to 999999999999"):
        parse("1000000000000")
