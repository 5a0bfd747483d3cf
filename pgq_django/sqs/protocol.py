"""One SQS request, from its bytes to its answer, whichever server path and protocol
brought it.

Both of SQS's wire protocols are served on the same URL: AWS JSON 1.0 (``X-Amz-Target:
AmazonSQS.<Action>``, a JSON body) and the Query protocol of older SDKs (a form with
``Action=<Action>``, XML answers), which :mod:`.query` reads into the same parameters and
writes back; everything between is shared.

Two adapters feed this module: the Django view (:mod:`.views`, for WSGI servers and any
ASGI server running Django's handler) and the lean ASGI path (:mod:`.asgi`, which
:func:`pgq_django.asgi.get_asgi_application` serves without Django's middleware, URL
resolution or HttpRequest). Each turns its request into a :class:`WireRequest`; everything
after that — signature, key state, grants, the action, long polling, the error format — is
this module's and the same for both, so the two paths cannot drift apart.

A request's database work runs in one hop to Django's database thread
(``sync_to_async(thread_sensitive=True)``: under :mod:`pgq_django.asgi`, one of its fixed
threads): authentication, the one query that looks the queue and the caller's right up,
and the action. Only a long-polling ReceiveMessage comes back to the event loop to wait.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.core.exceptions import SuspiciousOperation
from django.db import close_old_connections

from ..api.waiting import ClientGone
from ..exceptions import DatabaseUnavailable, PgqError
from ..store import availability
from . import query, receiving
from .actions import ACTIONS, QUEUE_RIGHTS, RECEIVE, UNSUPPORTED
from .auth import authenticate, confirm
from .errors import UNSUPPORTED as UNSUPPORTED_CODE
from .errors import SqsError, from_pgq_error
from .lookup import prefetch
from .params import Call

logger = logging.getLogger("pgq_django.sqs")

CONTENT_TYPE = "application/x-amz-json-1.0"
TARGET_PREFIX = "AmazonSQS."
TOO_BIG = "The request body is larger than this server accepts (DATA_UPLOAD_MAX_MEMORY_SIZE)."


@dataclass(frozen=True)
class WireRequest:
    """What the endpoint reads of an HTTP request.

    ``headers`` maps lower-case names to values (a repeated header's values joined by
    commas, as Django joins them). ``raw_path`` is the path as the client sent it, still
    percent-encoded (what it signed); bytes that are not UTF-8 are refused as a bad
    signature. ``endpoint_url`` answers the endpoint's absolute URL, ending in ``/``; it is
    called (in the database thread) only by the actions that answer a queue URL.
    """

    method: str
    raw_path: str | bytes
    query: str
    headers: Mapping[str, str]
    body: bytes
    endpoint_url: Callable[[], str]

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())

    @property
    def is_query(self) -> bool:
        """Whether the request speaks SQS's Query protocol (a form naming its Action) rather
        than AWS JSON 1.0 (an X-Amz-Target header)."""
        return is_query(self.headers)

    @property
    def content_type(self) -> str:
        """The media type of Content-Type, lower-cased, without parameters."""
        return (self.headers.get("content-type") or "").split(";", 1)[0].strip().lower()


def is_query(headers: Mapping[str, str]) -> bool:
    """Whether lower-cased request ``headers`` are a Query protocol request's: a form body
    and no X-Amz-Target."""
    media = (headers.get("content-type") or "").split(";", 1)[0].strip().lower()
    return media == query.CONTENT_TYPE and "x-amz-target" not in headers


@dataclass(frozen=True)
class Answer:
    """An HTTP answer: status, headers (beyond Content-Type), the body and its type."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes
    content_type: str = CONTENT_TYPE


RunSync = Callable[[Callable[[], Any]], Awaitable[Any]]


async def _thread_sensitive(function: Callable[[], Any]) -> Any:
    return await sync_to_async(function, thread_sensitive=True)()


# json.dumps with separators builds a new encoder on every call; this one is made once.
_to_json = json.JSONEncoder(separators=(",", ":")).encode


def _answer(status: int, body: dict[str, Any], request_id: str, *extra: tuple[str, str]) -> Answer:
    return Answer(status, (("x-amzn-RequestId", request_id), *extra), _to_json(body).encode())


def error_answer(error: SqsError, request_id: str | None = None, *, xml: bool = False) -> Answer:
    """SQS's answer to a refused request (the body and header botocore turns into the
    matching ClientError): JSON, or with ``xml`` the Query protocol's ErrorResponse."""
    request_id = request_id or str(uuid.uuid4())
    if xml:
        return Answer(
            error.status,
            (("x-amzn-RequestId", request_id),),
            query.render_error(error, request_id),
            query.XML_CONTENT_TYPE,
        )
    return _answer(
        error.status,
        error.as_body(),
        request_id,
        ("x-amzn-query-error", error.query_error_header()),
    )


def success_answer(request: WireRequest, result: dict[str, Any], request_id: str) -> Answer:
    """An action's answer in the request's protocol: JSON, or the Query protocol's XML."""
    if request.is_query:
        body = query.render(query.action_of(request.body), result, request_id)
        return Answer(200, (("x-amzn-RequestId", request_id),), body, query.XML_CONTENT_TYPE)
    return _answer(200, result, request_id)


def too_big() -> SqsError:
    return SqsError("InvalidParameterValue", TOO_BIG)


def _read(request: WireRequest) -> tuple[str, dict[str, Any]]:
    """The request's action and its parameters, from either protocol: the Query protocol's
    form is read into the same parameters a JSON request of the action carries."""
    if request.is_query:
        action, params = query.read(request.body)
        return _known(action), params
    target = request.header("x-amz-target") or ""
    if not target.startswith(TARGET_PREFIX):
        raise SqsError(
            "InvalidAction",
            "This endpoint speaks AWS JSON 1.0 (POST with X-Amz-Target: AmazonSQS.<Action>) "
            "and the Query protocol (a form with Action=<Action>).",
        )
    return _known(target[len(TARGET_PREFIX) :]), _params(request)


def _known(action: str) -> str:
    if action in UNSUPPORTED:
        raise SqsError(UNSUPPORTED_CODE, f"pgq_django does not support {action}.")
    if action not in ACTIONS and action != RECEIVE:
        raise SqsError(
            "InvalidAction", f"The action {action[:100]} is not valid for this endpoint."
        )
    return action


def _params(request: WireRequest) -> dict[str, Any]:
    if request.content_type != CONTENT_TYPE:
        raise SqsError("SerializationException", f"The Content-Type must be {CONTENT_TYPE}.")
    body = request.body
    try:
        params = json.loads(body) if body else {}
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise SqsError("SerializationException", "The request body is not valid JSON.") from None
    if not isinstance(params, dict):
        raise SqsError("SerializationException", "The request body must be a JSON object.")
    return params


def handle(request: WireRequest) -> dict[str, Any] | receiving.Receive:
    """Authenticate, read and run one request (in Django's database thread): the answer's
    JSON object, or a ReceiveMessage that must wait for messages."""
    caller = authenticate(request)
    try:
        action, params = _read(request)
        trace_header = request.header("x-amzn-trace-id")
        call = Call(action, params, caller, request.endpoint_url, trace_header=trace_header)
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


def refusal(exc: Exception, request_id: str, *, xml: bool = False) -> Answer:
    """SQS's answer to an exception raised while serving a request: its own SqsError, the
    SQS form of a PgqError, or InternalError (logged) for anything unexpected. A
    SuspiciousOperation (a Host outside ALLOWED_HOSTS and the like) is raised again: the
    adapter answers it as Django does."""
    if isinstance(exc, SqsError):
        return error_answer(exc, request_id, xml=xml)
    if isinstance(exc, PgqError):
        return error_answer(from_pgq_error(exc), request_id, xml=xml)
    if isinstance(exc, SuspiciousOperation):
        raise exc
    if availability.is_unreachable(exc):
        # Met before any API call (the key's look-up): the answer the API's own
        # DatabaseUnavailable gets, a 503 the SDKs retry, without a traceback per request.
        error = from_pgq_error(DatabaseUnavailable("The database cannot be reached."))
        return error_answer(error, request_id, xml=xml)
    logger.exception("event=sqs_internal_error request_id=%s", request_id, exc_info=exc)
    error = SqsError("InternalError", "The server could not answer.")
    return error_answer(error, request_id, xml=xml)


async def respond(
    request: WireRequest,
    *,
    before: Callable[[], None] | None = None,
    after: Callable[[], None] | None = None,
    disconnected: Callable[[], Awaitable[None]] | None = None,
    run_sync: RunSync | None = None,
) -> Answer | None:
    """The answer to ``request``: one hop to the database thread, and, for a ReceiveMessage
    that must wait, the wait on the event loop and one more hop to answer.

    ``before`` and ``after`` run in the database thread at the start of the first hop and
    at the end of the last one (the lean path sends Django's request signals there, so a
    request keeps the connection handling Django gives it, without hops of its own).
    ``disconnected``, if given, returns once the client has gone away: a long poll then
    stops waiting and there is no answer (None). (Django's handler cancels the view
    instead.) ``run_sync(function)`` runs a function in the database thread (default:
    ``sync_to_async(function, thread_sensitive=True)()``).
    """
    request_id = str(uuid.uuid4())
    hop = run_sync or _thread_sensitive

    def first() -> Any:
        result: Any = None
        if before is not None:
            before()
        try:
            result = handle(request)
        except Exception as exc:
            result = refusal(exc, request_id, xml=request.is_query)
        finally:
            if after is not None and not isinstance(result, receiving.Receive):
                after()
        return result

    result = await hop(first)
    if isinstance(result, receiving.Receive):
        result = await _wait_and_finish(
            result, request_id, after, disconnected, hop, xml=request.is_query
        )
        if result is None:
            return None
    if isinstance(result, Answer):
        return result
    return success_answer(request, result, request_id)


async def _wait_and_finish(
    plan: receiving.Receive,
    request_id: str,
    after: Callable[[], None] | None,
    disconnected: Callable[[], Awaitable[None]] | None,
    hop: RunSync,
    *,
    xml: bool,
) -> Any:
    """Long poll on the event loop, then answer in the database thread (None if the client
    went away meanwhile)."""

    def last() -> Any:
        try:
            return receiving.finish(plan)
        except Exception as exc:
            return refusal(exc, request_id, xml=xml)
        finally:
            if after is not None:
                after()

    try:
        await plan.wait_for_messages(disconnected)
    except ClientGone:
        if after is not None:
            await hop(after)
        return None
    except Exception as exc:
        if after is not None:
            await hop(after)
        return refusal(exc, request_id, xml=xml)
    except BaseException:  # cancelled: the client went away
        if after is not None:
            await hop(after)
        raise
    return await hop(last)
