"""The MD5 digests SQS returns and SDKs check (Java, JavaScript, Go, Ruby, PHP …).

``MD5OfMessageBody`` is the hex MD5 of the body's UTF-8 bytes. ``MD5OfMessageAttributes``
(and ``MD5OfMessageSystemAttributes``) follow SQS's published algorithm: for each attribute,
in order of name, the name, the data type and the value, each prefixed by its length as a
4-byte big-endian integer, with a one-byte transport type (1 for String and Number types,
2 for Binary) before the value. MD5 is an integrity check here, not a security measure.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from typing import Any

STRING_TRANSPORT = b"\x01"
BINARY_TRANSPORT = b"\x02"


def _md5(data: bytes = b"") -> Any:
    return hashlib.md5(data, usedforsecurity=False)


def md5_of_body(body: str) -> str:
    return str(_md5(body.encode("utf-8")).hexdigest())


def _with_length(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + data


def md5_of_attributes(attributes: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The digest of message attributes in SQS's wire shape (``{"DataType", "StringValue"
    | "BinaryValue"}``, BinaryValue base64-encoded as on the wire); None when there are
    none, as SQS then omits the field."""
    if not attributes:
        return None
    digest = _md5()
    for name in sorted(attributes):
        value = attributes[name]
        digest.update(_with_length(name.encode("utf-8")))
        digest.update(_with_length(str(value["DataType"]).encode("utf-8")))
        if "BinaryValue" in value:
            digest.update(BINARY_TRANSPORT)
            digest.update(_with_length(base64.b64decode(value["BinaryValue"])))
        else:
            digest.update(STRING_TRANSPORT)
            digest.update(_with_length(str(value["StringValue"]).encode("utf-8")))
    return str(digest.hexdigest())
