"""Argument checks shared by every entry point.

Each check either returns the normalised value or raises a :class:`PgqError` subclass whose
message says what was wrong and what is allowed. They run before any SQL, so bad input
changes nothing.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from ..exceptions import InvalidArgument, InvalidMessage, InvalidName

_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,80}(\.fifo)?")
INT32_MAX = 2**31 - 1
MAX_QTY = 10_000
XML_CONTENT_TYPES = ("application/xml", "text/xml")


def name(value: Any, *, kind: str = "queue") -> str:
    """A queue or exchange name: a model instance's ``name`` or a string matching the rule."""
    if hasattr(value, "name") and not isinstance(value, str):
        value = value.name
    if not isinstance(value, str) or not _NAME_RE.fullmatch(value):
        raise InvalidName(
            f"{value!r} is not a valid {kind} name: use 1-80 letters, digits, '-' or '_', "
            "optionally followed by '.fifo'.",
            name=str(value),
        )
    return value


def seconds(value: Any, field: str, *, allow_none: bool = False, minimum: float = 0) -> Any:
    """A duration in seconds from an int, a float or a timedelta."""
    if value is None and allow_none:
        return None
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidArgument(
            f"{field} must be a number of seconds or a timedelta, not {value!r}.", field=field
        )
    if value < minimum:
        raise InvalidArgument(
            f"{field} must be at least {minimum} seconds, not {value}.", field=field
        )
    if value > 100 * 365 * 24 * 3600:
        raise InvalidArgument(f"{field} must be at most 100 years.", field=field)
    return float(value)


def integer(
    value: Any, field: str, *, minimum: int = 0, maximum: int = INT32_MAX, allow_none: bool = False
) -> Any:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{field} must be an integer, not {value!r}.", field=field)
    if not minimum <= value <= maximum:
        raise InvalidArgument(
            f"{field} must be between {minimum} and {maximum}, not {value}.", field=field
        )
    return value


def quantity(value: Any) -> int:
    return integer(value, "qty", minimum=1, maximum=MAX_QTY)


def msg_ids(values: Any) -> list[int]:
    if isinstance(values, int | str) or not isinstance(values, Iterable):
        values = [values]
    return list(values)


def text(value: Any, field: str, *, allow_none: bool = True, max_length: int = 1024) -> Any:
    if value is None and allow_none:
        return None
    if not isinstance(value, str) or len(value) > max_length or "\x00" in value:
        raise InvalidArgument(
            f"{field} must be a string of at most {max_length} characters.", field=field
        )
    return value


def _dumps(value: Any, what: str) -> str:
    try:
        encoded = json.dumps(value, allow_nan=False, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise InvalidMessage(f"The {what} is not JSON-serialisable: {exc}.") from None
    if "\\u0000" in encoded:
        raise InvalidMessage(f"The {what} contains a NUL character, which PostgreSQL rejects.")
    return encoded


def mapping(value: Any, what: str) -> str:
    """A JSON object (headers, attributes, filters) encoded for a jsonb parameter."""
    if value is None:
        value = {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise InvalidMessage(f"The {what} must be a JSON object with string keys.")
    return _dumps(value, what)


def body(message: Any, headers: dict[str, Any] | None) -> str:
    """The message body as JSON text; a body marked as XML must be a well-formed XML string."""
    content_type = str((headers or {}).get("content_type", "")).split(";")[0].strip().lower()
    if content_type in XML_CONTENT_TYPES:
        _check_xml(message)
    elif content_type.startswith("text/") and not isinstance(message, str):
        raise InvalidMessage(f"A {content_type} body must be a string.")
    return _dumps(message, "message body")


def _check_xml(message: Any) -> None:
    from defusedxml import ElementTree
    from defusedxml.common import DefusedXmlException

    if not isinstance(message, str):
        raise InvalidMessage("An XML body must be a string holding the document.")
    try:
        ElementTree.fromstring(message)
    except DefusedXmlException as exc:
        raise InvalidMessage(f"The XML body uses a forbidden construct: {exc}.") from None
    except ElementTree.ParseError as exc:
        raise InvalidMessage(f"The XML body is not well-formed: {exc}.") from None


def filters(value: Any) -> dict[str, Any]:
    """``{"headers": {...}, "attributes": {...}, "label": "x"}``, every key optional."""
    if value is None:
        return {}
    allowed = {"headers", "attributes", "label"}
    if not isinstance(value, dict) or not set(value) <= allowed:
        raise InvalidArgument(
            "filters must be a dict with any of the keys 'headers', 'attributes', 'label'."
        )
    for key in ("headers", "attributes"):
        if key in value and not isinstance(value[key], dict):
            raise InvalidArgument(f"The {key} filter must be a JSON object, not {value[key]!r}.")
        if key in value:
            mapping(value[key], f"{key} filter")
    if "label" in value:
        text(value["label"], "label filter")
    return value


def send_options(
    headers: Any = None,
    attributes: Any = None,
    label: Any = None,
    priority: Any = 0,
    delay: Any = None,
    group: Any = None,
    dedup_id: Any = None,
    expires_in: Any = None,
    max_retries: Any = None,
    retry_delay: Any = None,
) -> dict[str, Any]:
    """The options of send, send_batch and publish, checked and encoded as statement parameters.

    It lives here, free of models, so that Spark executors (which run without Django) check
    each row they write exactly as :func:`pgq_django.send` checks its arguments.
    """
    return {
        "headers": mapping(headers, "headers"),
        "attributes": mapping(attributes, "attributes"),
        "label": text(label, "label"),
        "priority": integer(priority, "priority", minimum=-(2**31), maximum=INT32_MAX),
        "delay": seconds(delay, "delay", allow_none=True),
        "group": text(group, "group", max_length=128),
        "dedup_id": text(dedup_id, "dedup_id", max_length=128),
        "expires_in": seconds(expires_in, "expires_in", allow_none=True, minimum=0.001),
        "max_retries": integer(max_retries, "max_retries", allow_none=True),
        "retry_delay": seconds(retry_delay, "retry_delay", allow_none=True),
    }
