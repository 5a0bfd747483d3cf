"""Exchange routing: which bound queues receive a published message, decided in SQL.

The statement is :data:`pgq_django.store.sql.exchanges.PUBLISH`; this module holds the rules it
implements and the Python side of them: topic patterns compiled to regular expressions,
and checks of routing keys and binding filters.

Rules, by exchange type (every type also honours a binding's ``filters``):

- fanout: every bound queue; routing keys are ignored.
- direct: bindings whose routing key equals the published key (no key means ``""``).
- topic: AMQP patterns over dot-separated words: ``*`` is exactly one word, ``#`` zero or
  more words, anything else must equal the word. ``#`` alone matches every key, the empty
  key included; the empty pattern matches only the empty key.
- headers: every bound queue whose filters match (a binding without filters matches all).

Filters are psqlqueue ``message_filters``: ``{"attr": ["v1", "v2"]}`` matches when, for every
key, the message's headers (or, when the key is not a header, its attributes) hold that key
with one of the listed values, compared as JSON values.

A queue bound several ways that match gets the message once. Topic patterns are compiled to a
PostgreSQL regular expression when the binding is made (:func:`topic_regex`): the key is
matched as ``"." + key`` so that each word carries its leading dot and ``#`` can stand for
zero words without special cases around the separators.
"""

from __future__ import annotations

import math
from typing import Any

from .exceptions import InvalidArgument
from .store.sql.params import topic_subject as topic_subject  # the publish statement's parameter
from .validation import is_utf8

MAX_ROUTING_KEY = 255
_FILTER_SCALARS = (str, int, float, bool)


def _literal(word: str) -> str:
    """A word as a regex literal: every character but letters, digits and '_' escaped.

    Backslash before a non-alphanumeric character is a literal in both PostgreSQL's ARE and
    Python's re, while backslash before a letter would start an escape; hence this escaper.
    """
    return "".join(c if c.isalnum() or c == "_" else "\\" + c for c in word)


def topic_regex(pattern: str) -> str:
    """An AMQP topic pattern as an anchored regex over ``"." + routing_key``."""
    parts = []
    for word in pattern.split("."):
        if word == "#":
            parts.append(r"(\.[^.]*)*")
        elif word == "*":
            parts.append(r"\.[^.]*")
        else:
            parts.append(r"\." + _literal(word))
    return "^" + "".join(parts) + "$"


def routing_key(value: Any) -> str:
    """A routing key or binding pattern: a string of at most 255 characters, None as ``""``."""
    if value is None:
        return ""
    if (
        not isinstance(value, str)
        or len(value) > MAX_ROUTING_KEY
        or "\x00" in value
        or not is_utf8(value)
    ):
        raise InvalidArgument(
            f"routing_key must be a string of at most {MAX_ROUTING_KEY} characters, without NUL "
            f"or lone surrogates, not {value!r}.",
            field="routing_key",
        )
    return value


def _storable(value: Any) -> bool:
    """Whether a filter key or value survives as jsonb: finite numbers, clean strings."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, str):
        return "\x00" not in value and is_utf8(value)
    return isinstance(value, int | bool)


def binding_filters(value: Any) -> dict[str, list[Any]]:
    """``{"attr": ["v1", "v2"]}`` with string keys and non-empty lists of scalar values.

    A single scalar is accepted for a one-value list (``{"attr": "v1"}``).
    """
    if value is None:
        return {}
    problem = "filters must be a dict mapping names to a list of allowed values"
    if not isinstance(value, dict):
        raise InvalidArgument(f"{problem}, not {value!r}.", field="filters")
    out: dict[str, list[Any]] = {}
    for key, allowed in value.items():
        if isinstance(allowed, _FILTER_SCALARS):
            allowed = [allowed]
        if (
            not isinstance(key, str)
            or not key
            or not _storable(key)
            or not isinstance(allowed, list | tuple)
            or not allowed
            or not all(isinstance(a, _FILTER_SCALARS) and _storable(a) for a in allowed)
        ):
            raise InvalidArgument(
                f"{problem} (strings without NUL or lone surrogates, finite numbers or "
                f"booleans); {key!r}: {allowed!r} is not.",
                field="filters",
            )
        out[key] = list(allowed)
    return out
