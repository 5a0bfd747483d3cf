"""Reading an SQS request: typed parameters, queue URLs and ARNs, pagination tokens.

Every check raises the SqsError SQS itself answers (MissingParameter, InvalidParameterValue,
QueueDoesNotExist), before anything is changed.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any
from urllib.parse import urlsplit

from ..conf import settings
from .auth import Caller
from .errors import SqsError, invalid, missing, no_such_queue

_QUEUE_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,80}(\.fifo)?")
_ARN_RE = re.compile(r"arn:aws[a-z-]*:sqs:[a-z0-9-]*:(?P<account>[0-9]{1,32}):(?P<name>[^:/]+)")
# Characters SQS accepts in any parameter (XML 1.0's range): a NUL, for one, could reach no
# queue name and no stored value (PostgreSQL's text and jsonb refuse it).
_FORBIDDEN_CHARS = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _check_characters(name: str, value: str) -> str:
    bad = _FORBIDDEN_CHARS.search(value)
    if bad is not None:
        raise invalid(
            f"Value for parameter {name} is invalid. Reason: U+{ord(bad.group()):04X} is not "
            "an allowed character."
        )
    return value


@dataclass(frozen=True)
class Call:
    """One authenticated request: the action, its JSON parameters, who sent it, and how to
    find the endpoint's absolute URL (ending in ``/``) that queue URLs are built from (only
    the actions that answer a queue URL ask for it).

    ``prefetched`` is ``(right, queue)`` when the request's queue was looked up, together
    with the caller's ``right`` on it, before the action ran (:func:`.lookup.prefetch`).
    ``trace_header`` is the request's ``X-Amzn-Trace-Id``, which a send keeps as the
    message's ``AWSTraceHeader`` (as SQS does)."""

    action: str
    params: dict[str, Any]
    caller: Caller
    endpoint_url: Callable[[], str]
    prefetched: tuple[str, Any] | None = None
    trace_header: str | None = None

    @cached_property
    def base_url(self) -> str:
        return self.endpoint_url()

    @property
    def user(self) -> Any:
        return self.caller.user

    @property
    def account(self) -> str:
        return str(settings.SQS_ACCOUNT_ID)

    def queue_url(self, name: str) -> str:
        return f"{self.base_url}{self.account}/{name}"

    def queue_arn(self, name: str) -> str:
        return f"arn:aws:sqs:{self.caller.region}:{self.account}:{name}"

    # -- parameters ----------------------------------------------------------------------

    def string(self, name: str, *, required: bool = False, max_length: int = 1024) -> Any:
        value = self.params.get(name)
        if value is None:
            if required:
                raise missing(name)
            return None
        if not isinstance(value, str) or len(value) > max_length:
            raise invalid(
                f"Value for parameter {name} is invalid. Reason: it must be a string of at "
                f"most {max_length} characters."
            )
        return _check_characters(name, value)

    def integer(self, name: str, low: int, high: int, *, required: bool = False) -> Any:
        value = self.params.get(name)
        if value is None:
            if required:
                raise missing(name)
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise invalid(
                f"Value {value!r} for parameter {name} is invalid. Reason: must be an integer "
                f"between {low} and {high}."
            )
        return value

    def strings(self, name: str, *, max_items: int = 1000) -> list[str]:
        value = self.params.get(name)
        if value is None:
            return []
        if (
            not isinstance(value, list)
            or len(value) > max_items
            or not all(isinstance(v, str) and len(v) <= 1024 for v in value)
        ):
            raise invalid(f"Value for parameter {name} is invalid. Reason: a list of strings.")
        for item in value:
            _check_characters(name, item)
        return value

    def string_map(self, name: str, *, required: bool = False) -> dict[str, str]:
        value = self.params.get(name)
        if value is None:
            if required:
                raise missing(name)
            return {}
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise invalid(
                f"Value for parameter {name} is invalid. Reason: a map of strings to strings."
            )
        for key, item in value.items():
            _check_characters(name, key)
            _check_characters(name, item)
        return value

    def entries(self, name: str = "Entries") -> list[dict[str, Any]]:
        value = self.params.get(name)
        if value is None:
            raise missing(name)
        if not isinstance(value, list) or not all(isinstance(e, dict) for e in value):
            raise invalid(f"Value for parameter {name} is invalid. Reason: a list of entries.")
        return value

    def queue_name(self, parameter: str = "QueueUrl") -> str:
        """The queue a queue URL names (the account must be this site's)."""
        return queue_name_from_url(self.string(parameter, required=True), self.account)


def queue_name_from_url(url: str, account: str) -> str:
    """The queue a QueueUrl names: a queue URL of this site's account, or, as SQS accepts
    it, a bare queue name. Anything else (another account's URL, a malformed one, text that
    could name no queue) is SQS's answer for a missing queue, 400 NonExistentQueue."""
    if _QUEUE_NAME_RE.fullmatch(url):
        return url
    try:
        parts = urlsplit(url)
    except ValueError:  # not a URL at all (an unclosed IPv6 bracket, a bad port)
        raise no_such_queue() from None
    segments = [s for s in parts.path.split("/") if s]
    if parts.scheme not in ("http", "https") or len(segments) < 2:
        raise no_such_queue()
    owner, name = segments[-2], segments[-1]
    if owner != account or not _QUEUE_NAME_RE.fullmatch(name):
        raise no_such_queue()
    return name


def queue_name_from_arn(arn: Any, parameter: str, account: str) -> str:
    """The queue an SQS ARN names; the region is not checked (queues are site-wide)."""
    found = _ARN_RE.fullmatch(arn) if isinstance(arn, str) else None
    if found is None or not _QUEUE_NAME_RE.fullmatch(found["name"]):
        raise invalid(
            f"Value {arn!r} for parameter {parameter} is invalid. Reason: not an SQS ARN."
        )
    if found["account"] != account:
        raise resource_not_found(parameter)
    return found["name"]


def resource_not_found(parameter: str) -> SqsError:
    """SQS's answer to an ARN of a move task that names no queue the caller may use."""
    return SqsError(
        "ResourceNotFoundException",
        f"The resource that you specified for the {parameter} parameter doesn't exist.",
    )


def encode_token(after: str) -> str:
    return base64.urlsafe_b64encode(after.encode()).decode()


def decode_token(token: str | None) -> str | None:
    if token is None:
        return None
    try:
        name = base64.urlsafe_b64decode(token.encode()).decode()
    except (binascii.Error, UnicodeError, ValueError):
        raise invalid("Invalid NextToken value.") from None
    if not _QUEUE_NAME_RE.fullmatch(name):
        raise invalid("Invalid NextToken value.")
    return name
