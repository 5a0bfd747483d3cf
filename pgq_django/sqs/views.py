"""The SQS endpoint: one async view for every action.

A request is read, authenticated (SigV4, :mod:`.auth`) and dispatched in Django's database
thread (``sync_to_async``); only a long-polling ReceiveMessage comes back to the event loop
to wait for messages. Served by :func:`pgq_django.asgi.get_asgi_application`, that thread is
one of a fixed pool, so a waiting client holds neither a thread nor a database connection:
just a coroutine, its socket and its place in the process's one LISTEN connection. Every
refusal is an SQS error response (see :mod:`.errors`); PgqErrors raised by the functional API
are translated there, in one place.
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

from asgiref.sync import sync_to_async
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.db import close_old_connections
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt

from ..conf import settings
from ..exceptions import PgqError
from . import receiving
from .actions import ACTIONS, QUEUE_RIGHTS, RECEIVE, UNSUPPORTED
from .auth import authenticate, confirm
from .errors import UNSUPPORTED as UNSUPPORTED_CODE
from .errors import SqsError, from_pgq_error
from .lookup import prefetch
from .params import Call

logger = logging.getLogger("pgq_django.sqs")

CONTENT_TYPE = "application/x-amz-json-1.0"
TARGET_PREFIX = "AmazonSQS."


def _response(status: int, body: dict[str, Any], request_id: str) -> HttpResponse:
    response = HttpResponse(
        json.dumps(body, separators=(",", ":")), status=status, content_type=CONTENT_TYPE
    )
    response["x-amzn-RequestId"] = request_id
    return response


def _error(error: SqsError, request_id: str) -> HttpResponse:
    response = _response(error.status, error.as_body(), request_id)
    response["x-amzn-query-error"] = error.query_error_header()
    return response


def _body(request: HttpRequest) -> bytes:
    try:
        return request.body
    except RequestDataTooBig:
        raise SqsError(
            "InvalidParameterValue",
            "The request body is larger than this server accepts (DATA_UPLOAD_MAX_MEMORY_SIZE).",
        ) from None


def _base_url(request: HttpRequest) -> str:
    match = request.resolver_match
    namespace = ":".join(match.namespaces) if match is not None else ""
    path = reverse(f"{namespace}:endpoint" if namespace else "endpoint")
    return request.build_absolute_uri(path)


def _action(request: HttpRequest) -> str:
    target = request.headers.get("X-Amz-Target", "")
    if not target.startswith(TARGET_PREFIX):
        raise SqsError(
            "InvalidAction",
            "This endpoint speaks the AWS JSON 1.0 protocol: POST with "
            "X-Amz-Target: AmazonSQS.<Action>.",
        )
    action = target[len(TARGET_PREFIX) :]
    if action in UNSUPPORTED:
        raise SqsError(UNSUPPORTED_CODE, f"pgq_django does not support {action}.")
    if action not in ACTIONS and action != RECEIVE:
        raise SqsError(
            "InvalidAction", f"The action {action[:100]} is not valid for this endpoint."
        )
    return action


def _params(request: HttpRequest, body: bytes) -> dict[str, Any]:
    content_type = (request.content_type or "").lower()
    if content_type != CONTENT_TYPE:
        raise SqsError("SerializationException", f"The Content-Type must be {CONTENT_TYPE}.")
    try:
        params = json.loads(body) if body else {}
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise SqsError("SerializationException", "The request body is not valid JSON.") from None
    if not isinstance(params, dict):
        raise SqsError("SerializationException", "The request body must be a JSON object.")
    return params


def _handle(request: HttpRequest, body: bytes) -> dict[str, Any] | receiving.Receive:
    """Authenticate, read and run one request (in Django's database thread)."""
    caller = authenticate(request, body)
    try:
        action = _action(request)
        call = Call(action, _params(request, body), caller, lambda: _base_url(request))
    except SqsError:
        confirm(caller)  # a dead key is refused as such before the request's own mistakes
        raise
    # Nothing runs for a caller whose key's row has not been read in this request.
    call = prefetch(call, QUEUE_RIGHTS.get(action))
    if not call.caller.confirmed:  # prefetch always confirms; never act on a hope
        raise SqsError("InternalError", "The request's key was not checked.")
    if action == RECEIVE:
        plan = receiving.start(call)
        if not plan.must_wait:
            return receiving.finish(plan)
        # The wait is on the event loop; let go of the connection first, as Django does at
        # the end of a request (kept if CONN_MAX_AGE keeps it: then it is the thread's, and
        # serves the thread's other requests meanwhile, not this waiting one).
        close_old_connections()
        return plan
    return ACTIONS[action](call)


@csrf_exempt
async def endpoint(request: HttpRequest, **_url: str) -> HttpResponse:
    """Every SQS action, posted to the endpoint URL (or to a queue URL)."""
    if not settings.SQS_ENABLED:
        raise Http404("The SQS endpoint is switched off (PGQ['SQS_ENABLED']).")
    request_id = str(uuid.uuid4())
    try:
        if request.method != "POST":
            raise SqsError("InvalidAction", "SQS requests are POSTed (AWS JSON 1.0 protocol).")
        body = _body(request)
        result = await sync_to_async(_handle, thread_sensitive=True)(request, body)
        if isinstance(result, receiving.Receive):
            await result.wait_for_messages()
            result = await sync_to_async(receiving.finish, thread_sensitive=True)(result)
        return _response(200, result, request_id)
    except SqsError as exc:
        return _error(exc, request_id)
    except PgqError as exc:
        return _error(from_pgq_error(exc), request_id)
    except SuspiciousOperation:
        raise  # a Host outside ALLOWED_HOSTS and the like: Django answers 400
    except Exception:
        logger.exception("event=sqs_internal_error request_id=%s", request_id)
        return _error(SqsError("InternalError", "The server could not answer."), request_id)
