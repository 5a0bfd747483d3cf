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
from typing import Any, Literal, overload

from .exceptions import InvalidArgument, InvalidMessage, InvalidName

NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,80}(\.fifo)?")
_NAME_RE = NAME_RE
INT32_MAX = 2**31 - 1
BIGINT_MAX = 2**63 - 1
# Longest duration accepted anywhere (100 years): past it a timestamp sum could overflow.
MAX_SECONDS = 100 * 365 * 24 * 3600
# Most messages one read or pop may ask for; PGMQ has no cap, SQS stops at 10. A read also
# stops early when the queue's largest possible bodies would pass PGQ["READ_MAX_BYTES"].
MAX_QTY = 1_000
# Deepest nesting of arrays and objects accepted in a body, headers, attributes or filters.
# Python's encoder fails near 1,000 levels and PostgreSQL's parser at its stack limit; 100
# is far beyond real documents and keeps both well away from their limits.
MAX_DEPTH = 100
XML_CONTENT_TYPES = ("application/xml", "text/xml")
# Header keys the server writes (pgq_dead_letter, pgq_redriven, pgq_replayed_from, ...).
RESERVED_HEADER_PREFIX = "pgq_"
# "\u0000" in JSON text that stands for a real NUL character: the escape itself, preceded
# by an even number of backslashes (an odd number means the backslash is a literal one and
# the six characters are just text, which PostgreSQL stores happily).
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
# The characters XML 1.0 cannot carry (SQS refuses them: its Query protocol answers in XML)
# as they appear in the JSON text of a value: a control character other than tab, LF and CR
# as its escape (\b, \f, \u0001, ...: after an even number of backslashes, as above), and
# U+FFFE and U+FFFF as themselves. Our encoder and PostgreSQL's jsonb output write the
# same escapes, and the pattern reads the same in Python's re and in PostgreSQL's regular
# expressions: the PGMQ SQL interface checks its sends with this very text.
NOT_XML_IN_JSON = r"(?<!\\)(?:\\\\)*\\(?:[bf]|u00(?:0[0-8bcef]|1[0-9a-f]))|[\ufffe\uffff]"
_NOT_XML_IN_JSON = re.compile(NOT_XML_IN_JSON)
# The same characters in plain text (SQS's allowed set is its complement).
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
XML_ALLOWED = "#x9, #xA, #xD, #x20 to #xD7FF, #xE000 to #xFFFD, #x10000 to #x10FFFF"


def name(value: Any, *, kind: str = "queue") -> str:
    """A queue or exchange name: a model instance's ``name`` or a string matching the rule."""
    if type(value) is not str and hasattr(value, "name"):
        value = value.name
    if not isinstance(value, str) or not _NAME_RE.fullmatch(value):
        raise InvalidName(
            f"{value!r} is not a valid {kind} name: use 1-80 letters, digits, '-' or '_', "
            "optionally followed by '.fifo'.",
            name=str(value),
        )
    return value


def is_ascii_digits(text: str) -> bool:
    """Whether ``text`` is a non-empty run of ASCII digits 0-9.

    ``str.isdigit()`` is also true for superscripts ("²", which ``int()`` refuses) and for
    other scripts' digits (an Arabic-Indic one, which ``int()`` reads as 1); numbers on
    the wire are ASCII.
    """
    return text.isascii() and text.isdigit()


# A decimal number as text on the wire writes it: ASCII digits, an optional fraction.
_ASCII_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+")


def is_ascii_decimal(text: str) -> bool:
    """Whether ``text`` is a plain decimal number in ASCII ("12", "0.5", ".5").

    ``float()`` also reads other scripts' digits, "1_0", surrounding spaces, exponents and
    "inf"; a number of seconds in a query string or an option is none of those.
    """
    return _ASCII_DECIMAL.fullmatch(text) is not None


@overload
def seconds(
    value: Any, field: str, *, allow_none: Literal[False] = False, minimum: float = 0
) -> float: ...
@overload
def seconds(value: Any, field: str, *, allow_none: bool, minimum: float = 0) -> float | None: ...
def seconds(
    value: Any, field: str, *, allow_none: bool = False, minimum: float = 0
) -> float | None:
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
    if value > MAX_SECONDS:
        raise InvalidArgument(f"{field} must be at most 100 years.", field=field)
    return float(value)


@overload
def integer(
    value: Any,
    field: str,
    *,
    minimum: int = 0,
    maximum: int = INT32_MAX,
    allow_none: Literal[False] = False,
) -> int: ...
@overload
def integer(
    value: Any, field: str, *, minimum: int = 0, maximum: int = INT32_MAX, allow_none: bool
) -> int | None: ...
def integer(
    value: Any, field: str, *, minimum: int = 0, maximum: int = INT32_MAX, allow_none: bool = False
) -> int | None:
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


def msg_ids(values: Any) -> list[Any]:
    """A list of message references from one reference or an iterable of them.

    Bytes are refused rather than read as a list of small integers (``b"\\x01\\x02"`` would
    otherwise mean messages 1 and 2), and so are mappings and sets of unknown order.
    """
    if isinstance(values, bytes | bytearray | memoryview | dict | set | frozenset):
        raise InvalidArgument(
            f"msg_ids must be an id, a receipt or a list of them, not {type(values).__name__}.",
            field="msg_ids",
        )
    if isinstance(values, int | str) or not isinstance(values, Iterable):
        values = [values]
    return list(values)


def is_utf8(value: str) -> bool:
    """Whether a string can be stored as UTF-8 (a lone surrogate such as "\\ud800" cannot)."""
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@overload
def text(value: Any, field: str, *, allow_none: Literal[False], max_length: int = 1024) -> str: ...
@overload
def text(
    value: Any, field: str, *, allow_none: bool = True, max_length: int = 1024
) -> str | None: ...
def text(value: Any, field: str, *, allow_none: bool = True, max_length: int = 1024) -> str | None:
    if value is None and allow_none:
        return None
    if not isinstance(value, str) or len(value) > max_length:
        raise InvalidArgument(
            f"{field} must be a string of at most {max_length} characters.", field=field
        )
    if "\x00" in value or not is_utf8(value):
        raise InvalidArgument(
            f"{field} contains a NUL character or a lone surrogate, which PostgreSQL rejects.",
            field=field,
        )
    return value


def _depth_exceeds(value: Any, limit: int) -> bool:
    """Whether arrays and objects nest more than ``limit`` deep (iterative, stops early)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[Any] = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend(
            (child, depth + 1) for child in children if isinstance(child, dict | list | tuple)
        )
    return False


MAX_TAGS = 50


def tags(value: Any) -> dict[str, str]:
    """Queue tags: at most 50 string keys (1-128 characters) with string values (<= 256)."""
    if not isinstance(value, dict) or len(value) > MAX_TAGS:
        raise InvalidArgument(
            f"tags must be a dict of at most {MAX_TAGS} string keys and values.", field="tags"
        )
    for key, val in value.items():
        if not isinstance(key, str) or not 1 <= len(key) <= 128 or "\x00" in key:
            raise InvalidArgument(
                f"A tag key must be a string of 1-128 characters, not {key!r}.", field="tags"
            )
        if not isinstance(val, str) or len(val) > 256 or "\x00" in val:
            raise InvalidArgument(
                f"The value of tag {key!r} must be a string of at most 256 characters.",
                field="tags",
            )
    return dict(value)


# One encoder for every parameter: json.dumps with options builds a new one per call, a
# needless cost on every send.
_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"), ensure_ascii=False)


def _dumps(value: Any, what: str) -> str:
    """JSON text for a jsonb parameter, refusing what PostgreSQL or the encoder cannot take."""
    try:
        encoded = _ENCODER.encode(value)
    except (TypeError, ValueError) as exc:
        raise InvalidMessage(f"Cannot encode the {what} as JSON: {exc}.") from None
    except RecursionError:
        encoded = None
    # Fewer brackets than the limit cannot nest deeper than it: the walk is rarely needed.
    if encoded is None or (
        encoded.count("[") + encoded.count("{") > MAX_DEPTH and _depth_exceeds(value, MAX_DEPTH)
    ):
        raise InvalidMessage(
            f"Arrays and objects in the {what} nest more than {MAX_DEPTH} levels deep."
        )
    if "\\u0000" in encoded and _NUL_ESCAPE.search(encoded):
        raise InvalidMessage(f"PostgreSQL rejects the NUL character in the {what}.")
    if not is_utf8(encoded):
        raise InvalidMessage(
            f"A lone surrogate (such as \\ud800) in the {what} is not valid UTF-8."
        )
    if ("\\" in encoded or "\ufffe" in encoded or "\uffff" in encoded) and (
        _NOT_XML_IN_JSON.search(encoded)
    ):
        raise InvalidMessage(
            f"The {what} holds a character XML cannot carry (allowed: {XML_ALLOWED}); "
            "SQS refuses such text, and a Query-protocol client could not read it."
        )
    return encoded


def xml_text(value: Any, field: str, *, max_length: int = 1024) -> str | None:
    """:func:`text` that also refuses what XML cannot carry: a message's label, group and
    deduplication id reach SQS clients (MessageGroupId, MessageDeduplicationId)."""
    checked = text(value, field, max_length=max_length)
    bad = _NOT_XML.search(checked) if checked else None
    if bad is not None:
        raise InvalidArgument(
            f"{field} holds U+{ord(bad.group()):04X}, which XML cannot carry "
            f"(allowed: {XML_ALLOWED}).",
            field=field,
        )
    return checked


def mapping(value: Any, what: str) -> str:
    """A JSON object (headers, attributes, filters) encoded for a jsonb parameter."""
    if value is None or (type(value) is dict and not value):
        return "{}"  # the common case, without the encoder
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise InvalidMessage(f"The {what} must be a JSON object with string keys.")
    return _dumps(value, what)


def unreserved_headers(value: Any) -> Any:
    """Refuse header keys starting with ``pgq_`` (any case): only the server writes those.

    They record what the server did to a message (its dead-letter history, a redrive, a
    replay), and readers trust them for that; a sender must not be able to forge them.
    Returns ``value`` unchanged; the type checks are :func:`mapping`'s.
    """
    if isinstance(value, dict):
        reserved = sorted(
            k for k in value if isinstance(k, str) and k.lower().startswith(RESERVED_HEADER_PREFIX)
        )
        if reserved:
            raise InvalidMessage(
                f"Header keys starting with {RESERVED_HEADER_PREFIX!r} are reserved for "
                f"pgq_django's own records; rename {', '.join(map(repr, reserved))}.",
                headers=reserved,
            )
    return value


def body(message: Any, headers: dict[str, Any] | None) -> str:
    """The message body as JSON text; a body marked as XML must be a well-formed XML string."""
    if not headers:
        return _dumps(message, "message body")
    content_type = str(headers.get("content_type", "")).split(";")[0].strip().lower()
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


def user(value: Any, field: str = "owner") -> Any:
    """A saved user, found from a user instance or a username; None stays None."""
    from django.contrib.auth import get_user_model

    if value is None:
        return None
    model = get_user_model()
    if isinstance(value, model) and value.pk is not None:
        return value
    if isinstance(value, str) and value and len(value) <= 150 and is_utf8(value):
        try:
            return model._default_manager.get_by_natural_key(value)
        except model.DoesNotExist:
            raise InvalidArgument(f"There is no user named {value!r}.", field=field) from None
    raise InvalidArgument(
        f"{field} must be a saved user or a username, not {value!r}.", field=field
    )


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
        "label": xml_text(label, "label"),
        "priority": integer(priority, "priority", minimum=-(2**31), maximum=INT32_MAX),
        "delay": seconds(delay, "delay", allow_none=True),
        "group": xml_text(group, "group", max_length=128),
        "dedup_id": xml_text(dedup_id, "dedup_id", max_length=128),
        "expires_in": seconds(expires_in, "expires_in", allow_none=True, minimum=0.001),
        "max_retries": integer(max_retries, "max_retries", allow_none=True),
        "retry_delay": seconds(retry_delay, "retry_delay", allow_none=True),
    }
