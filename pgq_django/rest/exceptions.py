"""The one place where errors become HTTP answers: ``{"error": {"code", "message", "details"}}``.

A :class:`~pgq_django.exceptions.PgqError` answers the status :data:`HTTP_STATUS` gives its
class, with its own code, and DRF's own exceptions (malformed JSON, missing credentials, an
unsupported media type …) carry theirs, so :func:`exception_handler` needs no chain of
cases: every error the API raises on purpose answers in the same shape with its status, and
nothing else can reach a client as a 500 page unless it is a bug.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404
from rest_framework import exceptions as drf
from rest_framework.response import Response
from rest_framework.views import set_rollback

from ..exceptions import (
    ConnectionLost,
    DatabaseUnavailable,
    ExchangeAlreadyExists,
    ExchangeInUse,
    ExchangeNotFound,
    GroupNotFound,
    MessageNotFound,
    MessageTooLarge,
    NotMigrated,
    PermissionDenied,
    PgqError,
    QueueAlreadyExists,
    QueueFull,
    QueueNotFound,
    QueuePaused,
    ScheduleNotFound,
    StaleReceipt,
    SubscriptionAlreadyExists,
    SubscriptionNotFound,
    TooManySchedules,
)
from ..store import availability


class RequestTooLarge(PgqError):
    code = "request_too_large"
    default_message = "The request body is larger than the server accepts."


class NotFound(PgqError):
    code = "not_found"
    default_message = "There is nothing at this address."


# PgqError class -> the HTTP status the REST API answers it with. An error answers the status
# of the first class of its MRO listed here (a subclass its nearest listed ancestor's), and
# DEFAULT_STATUS when none is: bad input.
HTTP_STATUS: dict[type[PgqError], int] = {
    MessageTooLarge: 413,
    RequestTooLarge: 413,
    QueueNotFound: 404,
    ExchangeNotFound: 404,
    MessageNotFound: 404,
    SubscriptionNotFound: 404,
    GroupNotFound: 404,
    ScheduleNotFound: 404,
    NotFound: 404,
    PermissionDenied: 403,
    QueueAlreadyExists: 409,
    ExchangeAlreadyExists: 409,
    ExchangeInUse: 409,
    StaleReceipt: 409,
    SubscriptionAlreadyExists: 409,
    QueuePaused: 409,
    QueueFull: 409,
    TooManySchedules: 409,
    ConnectionLost: 503,
    NotMigrated: 503,
}
DEFAULT_STATUS = 400


def http_status(error: type[PgqError] | PgqError) -> int:
    """The HTTP status of a PgqError (class or instance), by :data:`HTTP_STATUS`."""
    cls = error if isinstance(error, type) else type(error)
    for klass in cls.__mro__:
        status = HTTP_STATUS.get(klass)
        if status is not None:
            return status
    return DEFAULT_STATUS


# DRF's codes, renamed where ours are clearer to a client.
_DRF_CODES = {
    "parse_error": "malformed_request",
    "invalid": "invalid_argument",
    "not_authenticated": "not_authenticated",
    "authentication_failed": "authentication_failed",
    "permission_denied": "permission_denied",
    "not_found": "not_found",
    "method_not_allowed": "method_not_allowed",
    "not_acceptable": "not_acceptable",
    "unsupported_media_type": "unsupported_media_type",
    "throttled": "throttled",
}


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or {}}}


def _drf_error(exc: drf.APIException) -> tuple[str, str, Any]:
    if isinstance(exc, drf.ValidationError):
        detail = exc.detail if isinstance(exc.detail, dict) else {"errors": exc.detail}
        return "invalid_argument", "The request is not valid; see details.", detail
    code = _DRF_CODES.get(exc.default_code, exc.default_code)
    return code, str(exc.detail), {}


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's ``EXCEPTION_HANDLER`` for pgq_django's views (set on the views themselves)."""
    headers: dict[str, str] = {}
    if isinstance(exc, PgqError):
        status, body = http_status(exc), {"error": exc.as_dict()}
    elif isinstance(exc, drf.APIException):
        code, message, details = _drf_error(exc)
        status, body = exc.status_code, error_body(code, message, details)
        if getattr(exc, "auth_header", None):
            headers["WWW-Authenticate"] = exc.auth_header
        if getattr(exc, "wait", None):
            headers["Retry-After"] = str(int(exc.wait))
    elif isinstance(exc, Http404):
        status, body = 404, error_body("not_found", "There is nothing at this address.")
    elif isinstance(exc, DjangoPermissionDenied):
        status, body = 403, error_body("permission_denied", "You may not do this.")
    elif availability.is_unreachable(exc):
        # Met before any API call (authentication and grant look-ups query the database):
        # the same answer the API's DatabaseUnavailable gets, not a 500.
        status = http_status(DatabaseUnavailable)
        body = error_body(
            DatabaseUnavailable.code, "The database cannot be reached; try again later."
        )
    else:
        return None
    if body["error"]["code"] == DatabaseUnavailable.code:
        # A client may try again once the process's next reconnection round is due.
        headers["Retry-After"] = str(int(availability.RECONNECT_CAP))
    set_rollback()
    return Response(body, status=status, headers=headers)
