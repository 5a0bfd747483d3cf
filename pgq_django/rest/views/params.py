"""Query-string parameters, parsed strictly: known names only, whole numbers (ASCII digits),
bounded."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ...conf import settings
from ...exceptions import InvalidArgument
from ...validation import is_ascii_decimal, is_ascii_digits


def whole(name: str, low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if not is_ascii_digits(text) or len(text) > 12 or not low <= int(text) <= high:
            raise InvalidArgument(
                f"{name} must be a whole number from {low} to {high}, not {text!r}.", field=name
            )
        return int(text)

    return parse


def seconds(name: str, high: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        value = float(text) if len(text) <= 32 and is_ascii_decimal(text) else math.nan
        if not math.isfinite(value) or not 0 <= value <= high:
            raise InvalidArgument(
                f"{name} must be a number of seconds from 0 to {high:g}, not {text!r}.",
                field=name,
            )
        return value

    return parse


def text(name: str) -> Callable[[str], str]:
    def parse(value: str) -> str:
        if len(value) > 1024 or "\x00" in value:
            raise InvalidArgument(f"{name} must be at most 1024 characters.", field=name)
        return value

    return parse


def parse_query(request: Any, parsers: dict[str, Callable[[str], Any]]) -> dict[str, Any]:
    """The query parameters named in ``parsers``, parsed; any other name is an error."""
    out: dict[str, Any] = {}
    for key in request.query_params:
        if key not in parsers:
            allowed = ", ".join(sorted(parsers)) or "none"
            raise InvalidArgument(
                f"Unknown query parameter {key!r}; allowed: {allowed}.", field=key
            )
        values = request.query_params.getlist(key)
        if len(values) != 1:
            raise InvalidArgument(f"Give {key} once.", field=key)
        out[key] = parsers[key](values[0])
    return out


def page(request: Any) -> tuple[int, int]:
    """``limit`` and ``offset`` of a list."""
    query = parse_query(
        request,
        {
            "limit": whole("limit", 1, settings.REST_MAX_LIMIT),
            "offset": whole("offset", 0, 10**12 - 1),  # at most the 12 digits whole() reads
        },
    )
    return query.get("limit", settings.REST_DEFAULT_LIMIT), query.get("offset", 0)
