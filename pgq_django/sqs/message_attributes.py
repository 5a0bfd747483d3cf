"""Message attributes and message bodies: SQS's wire shape to stored messages and back.

Stored form (the message's ``attributes`` JSON object, shared with the Python API and the
REST API): an attribute of type ``String`` is stored as its plain string, so filters and
other consumers see ``{"colour": "red"}``; any other type keeps its type beside its value,
``{"DataType": "Number", "StringValue": "3"}`` or ``{"DataType": "Binary.gif",
"BinaryValue": "<base64>"}``. Read back through SQS, a plain JSON value that is not a string
(a message sent with the Python API) becomes a ``Number`` for numbers and a ``String``
holding its JSON text otherwise.

A body is stored as a JSON string. A message sent with the Python API whose body is not a
string is received through SQS as its compact JSON text.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from decimal import Decimal, InvalidOperation
from typing import Any

from .errors import SqsError, invalid

MAX_ATTRIBUTES = 10
_NAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,256}")
_TYPE_RE = re.compile(r"(String|Number|Binary)(\.[^\s]{1,248})?")
# A Number's text: ASCII digits, an optional sign, point and exponent (Decimal alone would
# also take other scripts' digits, spaces and underscores).
_NUMBER_RE = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
# Characters SQS allows in bodies and attribute values (XML 1.0's character range).
_FORBIDDEN_CHARS = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
SYSTEM_ATTRIBUTES_FOR_SENDS = ("AWSTraceHeader",)


def deliverable(text: str) -> str:
    """``text`` with each character SQS does not allow replaced by U+FFFD.

    Every door refuses such characters, but a row sent before that rule, or written with raw
    SQL, may hold one; SQS never delivers one, and a Query-protocol answer holding one would
    not parse (the client would raise, and lose the other messages leased with it). The
    digests are of the delivered text."""
    return _FORBIDDEN_CHARS.sub("\ufffd", text)


def forbidden_character(text: str) -> str | None:
    """The first character of ``text`` SQS does not allow, or None."""
    bad = _FORBIDDEN_CHARS.search(text)
    return None if bad is None else bad.group()


def check_text(text: str, what: str) -> str:
    bad = _FORBIDDEN_CHARS.search(text)
    if bad is not None:
        raise SqsError(
            "InvalidMessageContents",
            f"Invalid characters found in {what}: U+{ord(bad.group()):04X} is not allowed "
            "(allowed: #x9, #xA, #xD, #x20 to #xD7FF, #xE000 to #xFFFD, #x10000 to #x10FFFF).",
        )
    return text


def _attribute(name: str, value: Any, *, system: bool) -> dict[str, str]:
    """One attribute in wire shape, checked as SQS checks it."""
    if not isinstance(value, dict):
        raise invalid(f"The message (user) attribute '{name}' must contain a non-empty value.")
    data_type = value.get("DataType")
    if not isinstance(data_type, str) or not data_type:
        raise invalid(
            f"The message (user) attribute '{name}' must contain a non-empty message attribute "
            "type."
        )
    found = _TYPE_RE.fullmatch(data_type)
    if found is None:
        raise invalid(
            f"The type of message (user) attribute '{name}' is invalid. You must use only the "
            "following supported type prefixes: Binary, Number, String."
        )
    if value.get("StringListValues") or value.get("BinaryListValues"):
        raise invalid("Message attribute list values are not supported.")
    base = found.group(1)
    if base == "Binary":
        raw = value.get("BinaryValue")
        try:
            decoded = base64.b64decode(raw, validate=True) if isinstance(raw, str) else b""
        except (binascii.Error, ValueError):
            decoded = b""
        if not decoded:
            raise invalid(
                f"Message (user) attribute '{name}' must contain a non-empty value of type "
                f"'{data_type}'."
            )
        return {"DataType": data_type, "BinaryValue": base64.b64encode(decoded).decode()}
    text = value.get("StringValue")
    if not isinstance(text, str) or not text:
        raise invalid(
            f"Message (user) attribute '{name}' must contain a non-empty value of type "
            f"'{data_type}'."
        )
    check_text(text, f"message attribute '{name}'")
    if base == "Number":
        try:
            number = Decimal(text) if _NUMBER_RE.fullmatch(text) else None
        except InvalidOperation:
            number = None
        if number is None or not number.is_finite() or abs(number.adjusted()) > 126:
            raise invalid(f"Can't cast the value of message (user) attribute '{name}' to a number.")
    if system and name == "AWSTraceHeader" and base != "String":
        raise invalid("The AWSTraceHeader system attribute must be of type String.")
    return {"DataType": data_type, "StringValue": text}


def _check_name(name: Any) -> None:
    """A message attribute's name, refused in SQS's words."""
    if not isinstance(name, str) or not name.strip():
        raise invalid("The request must contain non-empty message (user) attribute names.")
    if len(name.encode("utf-8", "surrogatepass")) > 256:
        raise invalid("Message (user) attribute name must be shorter than 256 bytes.")
    if name.lower().startswith(("aws.", "amazon.")):
        raise invalid(
            "You can't use message attribute names beginning with 'AWS.' or 'Amazon'. These "
            "strings are reserved for internal use."
        )
    if name.startswith("."):
        raise invalid("Message (user) attribute name must not begin with character '.'.")
    if name.endswith("."):
        raise invalid("Message (user) attribute name must not end with character '.'.")
    if ".." in name:
        raise invalid("Message (user) attribute name must not have successive '.' characters.")
    if not _NAME_RE.fullmatch(name):
        raise invalid(
            f"Message (user) attribute name '{name}' can only contain alphanumeric "
            "characters, hyphens, underscores and periods."
        )


def parse_attributes(value: Any, *, system: bool = False) -> dict[str, dict[str, str]]:
    """MessageAttributes (or MessageSystemAttributes) of a send, in wire shape."""
    if value is None:
        return {}
    what = "MessageSystemAttributes" if system else "MessageAttributes"
    if not isinstance(value, dict):
        raise invalid(f"{what} must be a map of attribute names to values.")
    if len(value) > MAX_ATTRIBUTES:
        raise invalid(
            f"Number of message attributes [{len(value)}] exceeds the allowed maximum "
            f"[{MAX_ATTRIBUTES}]."
        )
    out = {}
    for name, attribute in value.items():
        if system:
            if name not in SYSTEM_ATTRIBUTES_FOR_SENDS:
                raise invalid(f"Message system attribute name '{name}' is invalid.")
        else:
            _check_name(name)
        out[name] = _attribute(name, attribute, system=system)
    return out


def attributes_size(attributes: dict[str, dict[str, str]]) -> int:
    """Bytes the attributes count toward the message size (name, type and value)."""
    total = 0
    for name, value in attributes.items():
        total += len(name.encode()) + len(value["DataType"].encode())
        if "BinaryValue" in value:
            total += len(base64.b64decode(value["BinaryValue"]))
        else:
            total += len(value["StringValue"].encode())
    return total


def to_stored(attributes: dict[str, dict[str, str]]) -> dict[str, Any]:
    """Wire shape -> the message's stored attributes (plain strings for type String)."""
    return {
        name: value["StringValue"] if value["DataType"] == "String" else dict(value)
        for name, value in attributes.items()
    }


def _wire_value(value: Any) -> dict[str, str]:
    if isinstance(value, str):
        return {"DataType": "String", "StringValue": deliverable(value)}
    if isinstance(value, dict) and isinstance(value.get("DataType"), str):
        if isinstance(value.get("BinaryValue"), str):
            return {"DataType": value["DataType"], "BinaryValue": value["BinaryValue"]}
        if isinstance(value.get("StringValue"), str):
            return {
                "DataType": deliverable(value["DataType"]),
                "StringValue": deliverable(value["StringValue"]),
            }
    if isinstance(value, int | float) and not isinstance(value, bool):
        return {"DataType": "Number", "StringValue": json.dumps(value)}
    return {"DataType": "String", "StringValue": json.dumps(value, separators=(",", ":"))}


def from_stored(stored: Any, wanted: list[str]) -> dict[str, dict[str, str]]:
    """The stored attributes a ReceiveMessage asked for, in wire shape.

    MessageAttributeNames as SQS reads them: ``All`` or ``.*`` for every attribute, a name
    for itself, and ``prefix.*`` for every name starting with the characters before ``.*``
    (``Custom.*`` selects ``Custom.colour`` and ``CustomerId`` alike)."""
    if not wanted or not isinstance(stored, dict):
        return {}
    every = "All" in wanted or ".*" in wanted
    prefixes = tuple(w[:-2] for w in wanted if w.endswith(".*"))
    exact = set(wanted)
    return {
        deliverable(name): _wire_value(value)
        for name, value in stored.items()
        if every or name in exact or (prefixes and name.startswith(prefixes))
    }


def body_text(message: Any) -> str:
    """The SQS body of a stored message: its string, or the JSON text of anything else,
    :func:`deliverable`."""
    if isinstance(message, str):
        return deliverable(message)
    return deliverable(json.dumps(message, separators=(",", ":"), ensure_ascii=False))
