"""A JSON parser that refuses bodies over ``PGQ["REST_MAX_BODY_SIZE"]`` before reading them.

DRF reads the request stream itself, around Django's ``DATA_UPLOAD_MAX_MEMORY_SIZE`` check,
so the limit is enforced here: a declared Content-Length over it is refused unread, and an
undeclared (chunked) body is read at most one byte past it. (Under
:mod:`pgq_django.asgi` the same limit already stopped such a body before it was read.)

Arrays and objects nested deeper than Python's recursion limit allows are a malformed
request (400), not a server error; anything deeper than the API's own limit but parseable is
refused later by the API's checks, with their message.
"""

from __future__ import annotations

import json
from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser

from ..conf import settings
from ..validation import is_ascii_digits
from .exceptions import RequestTooLarge


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class LimitedJSONParser(BaseParser):
    media_type = "application/json"

    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> Any:
        limit = settings.REST_MAX_BODY_SIZE
        request = (parser_context or {}).get("request")
        declared = request.META.get("CONTENT_LENGTH") if request is not None else None
        too_large = RequestTooLarge(
            f"The request body is larger than {limit} bytes.", max_body_size=limit
        )
        if declared and is_ascii_digits(str(declared)) and int(declared) > limit:
            raise too_large
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise too_large
        try:
            return json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ParseError(f"The body is not valid JSON: {exc}") from None
        except RecursionError:
            raise ParseError("The body's arrays and objects nest too deeply.") from None
