"""``/v1/queues/{id}/messages``: send (one or a batch), consume (long-poll), ack and nack.

The send/consume view may wait: a consume with ``wait_seconds`` that finds nothing waits for
the queue's NOTIFY on the event loop, as every long poll does
(:class:`pgq_django.api.waiting.MessageWait`), so under :mod:`pgq_django.asgi` a waiting
client costs a coroutine and a socket. Database work — authentication, the grant check,
each lease — runs on the request's thread, one short call at a time; everything else (a
send, a consume that does not wait) is served by :mod:`pgq_django.asgi` in one hop to that
thread. On a WSGI server a waiting request keeps its thread but closes its database
connections while it waits, and at most ``PGQ["REST_MAX_THREAD_WAITS"]`` wait at once
(see :class:`LongPoll`).

A consume changes state, so it is never served for ``HEAD`` and, authenticated by the
session, needs the CSRF token (:func:`require_csrf_for_session`).
"""

from __future__ import annotations

import asyncio
import copy
import json
import math
import re
import threading
from functools import partial
from typing import Any

from django.db import transaction
from django.http import HttpRequest
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, PolymorphicProxySerializer, extend_schema
from rest_framework import exceptions as drf
from rest_framework.authentication import SessionAuthentication
from rest_framework.request import Request
from rest_framework.response import Response

import pgq_django as pgq

from ... import telemetry
from ...api.waiting import MessageWait, close_connections
from ...conf import settings
from ...exceptions import InvalidArgument, MessageNotFound, PermissionDenied, StaleReceipt
from ...validation import is_ascii_digits
from .. import serializers as s
from ..permissions import require_queue
from .base import AsyncPgqView, PgqView, Wait, no_content
from .params import parse_query, seconds, text, whole
from .queues import ERRORS

_RECEIPT = re.compile(r"([0-9]{1,18}):([0-9]{1,9})")
MAX_MSG_ID = 2**63 - 1

SEND_BODY = PolymorphicProxySerializer(
    component_name="SendRequest",
    serializers=[s.SendIn, s.BatchIn],
    resource_type_field_name=None,
)


def message_ref(value: Any) -> int | pgq.Receipt:
    """A message id (int or digits) or a receipt ``"<id>:<delivery_attempts>"``."""
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_MSG_ID:
        return value
    if isinstance(value, str):
        if is_ascii_digits(value) and len(value) <= 19 and 1 <= int(value) <= MAX_MSG_ID:
            return int(value)
        match = _RECEIPT.fullmatch(value)
        if match:
            return pgq.Receipt(int(match[1]), int(match[2]))
    raise InvalidArgument(
        f"{value!r} is not a message id or a receipt ('<id>:<delivery_attempts>').",
        field="message_id",
    )


def refused(queue: str, ref: int | pgq.Receipt) -> Exception:
    """Why an ack or nack matched nothing: a stale receipt (409) or no such message (404)."""
    msg_id = ref.msg_id if isinstance(ref, pgq.Receipt) else ref
    if isinstance(ref, pgq.Receipt) and pgq.read_by_id(queue, msg_id) is not None:
        return StaleReceipt(
            f"Message {msg_id} was delivered again since receipt {ref} was issued; "
            "the newer consumer holds it.",
            message_id=msg_id,
            receipt=str(ref),
        )
    return MessageNotFound(
        f"Message {msg_id} is not in queue {queue!r}.", message_id=msg_id, queue=queue
    )


def send_messages(queue: str, items: list[dict[str, Any]]) -> list[int]:
    """Send items (each a MessageIn) in input order: one round trip per run of equal options.

    Items whose options differ are sent in several statements inside one transaction, so
    the batch lands whole or not at all.
    """
    if len(items) > settings.REST_MAX_BATCH:
        raise InvalidArgument(
            f"A batch holds at most {settings.REST_MAX_BATCH} messages, not {len(items)}.",
            field="messages",
        )
    runs: list[tuple[dict[str, Any], list[Any]]] = []
    previous = None
    for item in items:
        options = {k: v for k, v in item.items() if k != "body"}
        key = json.dumps(options, sort_keys=True, default=str) if options else ""
        if key != previous or options.get("dedup_id") is not None:
            runs.append((options, []))
            previous = key
        runs[-1][1].append(item.get("body"))
    if len(runs) == 1:
        return _send_run(queue, runs[0][1], runs[0][0])
    ids: list[int] = []
    with transaction.atomic(using=settings.DATABASE):
        for options, bodies in runs:
            ids += _send_run(queue, bodies, options)
    return ids


def _send_run(queue: str, bodies: list[Any], options: dict[str, Any]) -> list[int]:
    """One send_batch, in the trace context its messages came with (if any)."""
    with telemetry.continuing(options.pop("traceparent", None), options.pop("tracestate", None)):
        return pgq.send_batch(queue, bodies, **options)


def require_csrf_for_session(request: Request, http_request: HttpRequest) -> None:
    """Refuse a consume authenticated by the session cookie alone, without the CSRF token.

    A consume changes state (it hides messages for their lease) but is a GET, which Django's
    CSRF protection lets through: any page on another site could navigate a logged-in user
    to a consume URL. A consume authenticated by the session therefore passes the same CSRF
    check as a POST (the ``X-CSRFToken`` header, and the ``Origin``/``Referer`` checks);
    token and basic authentication are not sent by a browser on its own and need none.
    """
    if not isinstance(request.successful_authenticator, SessionAuthentication):
        return
    probe = copy.copy(http_request)  # checked as an unsafe method; the request is unchanged
    probe.method = "PUT"
    try:
        SessionAuthentication().enforce_csrf(probe)
    except drf.PermissionDenied as exc:
        raise PermissionDenied(
            "A consume authenticated by the session needs the CSRF token (the "
            "X-CSRFToken header), as a POST does; token and basic authentication need none. "
            f"{exc.detail}"
        ) from None


class MessagesView(AsyncPgqView):
    # HEAD is left out: Django would answer it with get(), and a proxy or a link checker
    # sending it must not lease messages (405, nothing leased).
    http_method_names = ["get", "post", "options"]

    def initialize_request(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Request:
        self.http_request = request  # Django's request, for require_csrf_for_session
        return super().initialize_request(request, *args, **kwargs)

    @extend_schema(
        operation_id="messages_consume",
        parameters=[
            OpenApiParameter(
                "limit",
                {"type": "integer", "minimum": 1, "maximum": 1000},
                description="Most messages (10; at most PGQ['REST_MAX_LIMIT']).",
            ),
            OpenApiParameter("label", OpenApiTypes.STR, description="Only with this label."),
            OpenApiParameter(
                "visibility_timeout_seconds",
                {"type": "number", "minimum": 0, "maximum": 43200},
                description="Lease length; the queue's ack deadline by default.",
            ),
            OpenApiParameter(
                "wait_seconds",
                {"type": "number", "minimum": 0, "maximum": 20},
                description="Long-poll: wait this long for a message when none is ready "
                "(at most PGQ['REST_MAX_WAIT_SECONDS']).",
            ),
        ],
        responses={200: s.ConsumeOut, **ERRORS},
    )
    def get(self, request: Request, queue: str) -> Response | Wait:
        """Consume: lease up to ``limit`` messages, each hidden until acked or its lease
        ends; with ``wait_seconds``, wait that long for one when none is ready. With
        session authentication, the CSRF token is required as for a POST."""
        require_csrf_for_session(request, self.http_request)
        query = parse_query(
            request,
            {
                "limit": whole("limit", 1, settings.REST_MAX_LIMIT),
                "label": text("label"),
                "visibility_timeout_seconds": seconds("visibility_timeout_seconds", 12 * 3600.0),
                "wait_seconds": seconds("wait_seconds", float(settings.REST_MAX_WAIT_SECONDS)),
            },
        )
        limit = query.get("limit", settings.REST_DEFAULT_LIMIT)
        require_queue(request.user, "read", queue)
        options: dict[str, Any] = {
            "vt": query.get("visibility_timeout_seconds"),
            "qty": limit,
            "filters": {"label": query["label"]} if "label" in query else None,
        }
        wait = query.get("wait_seconds", 0)
        if wait <= 0:
            return consumed(queue, pgq.read(queue, **options), limit)
        return LongPoll(self.loop, queue, options, wait).start()

    @extend_schema(
        operation_id="messages_send", request=SEND_BODY, responses={201: s.SentOut, **ERRORS}
    )
    def post(self, request: Request, queue: str) -> Response:
        """Send one message (``{"body": …}``) or a batch (``{"messages": [...]}``), which
        lands whole or not at all."""
        data = request.data
        if isinstance(data, dict) and "messages" in data:
            items = self.body(request, s.BatchIn)["messages"]
            require_queue(request.user, "write", queue)
            return Response({"ids": send_messages(queue, items)}, status=201)
        item = self.body(request, s.SendIn)
        require_queue(request.user, "write", queue)
        reply_to = item.pop("reply_to", None)
        if reply_to is None:
            return Response({"id": send_messages(queue, [item])[0]}, status=201)
        # Where the reply goes is checked against the caller's rights like the queue itself:
        # a reply is a send into that queue on the caller's behalf.
        require_queue(request.user, "write", reply_to)
        body = item.pop("body", None)
        with telemetry.continuing(item.pop("traceparent", None), item.pop("tracestate", None)):
            msg_id = pgq.send(queue, body, reply_to=reply_to, **item)
        return Response({"id": msg_id}, status=201)

    @classmethod
    def needs_async(cls, scope: dict[str, Any]) -> bool:
        """Only a consume that may wait (``wait_seconds``) needs the event loop."""
        return scope.get("method") == "GET" and b"wait_seconds" in scope.get("query_string", b"")


def consumed(queue: str, found: list[Any], limit: int) -> Response:
    return Response({"data": [s.message_json(m, queue) for m in found], "limit": limit})


class TooManyWaits(drf.APIException):
    """503: this process already has ``PGQ["REST_MAX_THREAD_WAITS"]`` long-polls waiting on
    threads of their own; the client should try again shortly (``Retry-After``)."""

    status_code = 503
    default_code = "too_many_waits"

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"This server already holds {limit} waiting long-polls "
            "(PGQ['REST_MAX_THREAD_WAITS']); try again shortly, or consume without "
            "wait_seconds."
        )
        self.wait = max(1, math.ceil(settings.REST_POLL_INTERVAL))


class ThreadWaits:
    """How many long-polls of this process wait while holding a thread of their own."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0

    def acquire(self) -> bool:
        """Take a place, or False when ``PGQ["REST_MAX_THREAD_WAITS"]`` are taken."""
        with self._lock:
            if self.count >= settings.REST_MAX_THREAD_WAITS:
                return False
            self.count += 1
            return True

    def release(self) -> None:
        with self._lock:
            self.count -= 1


thread_waits = ThreadWaits()

# The threads of pgq_django.asgi's pool are named so; each serves many requests.
SHARED_THREAD_PREFIX = "pgq-asgi-"


def holds_own_thread() -> bool:
    """Whether the calling thread serves this request alone, until it ends: a WSGI server's
    request thread, or the thread Django's own ASGI handler gives each request — not one of
    the threads :mod:`pgq_django.asgi` shares among all requests."""
    return not threading.current_thread().name.startswith(SHARED_THREAD_PREFIX)


class LongPoll:
    """A consume that waits for the queue's NOTIFY: a
    :class:`~pgq_django.api.waiting.MessageWait` with the REST consume's rules.

    :meth:`start` runs on the request's thread: the wait registers for wake-ups first (so a
    send committed after the lease below cannot be missed) and leases once. With nothing
    found, it answers a :class:`Wait` that waits on the event loop, or waits on this thread
    when the request has no event loop.

    Every long-poll of a queue joins one wake-up group (``"rest"``), keyed by its label
    filter: a send wakes one waiter, not all, and a waiter that leaves with a full batch
    hands the wake-up on. Only the group's head re-checks on ``PGQ["REST_POLL_INTERVAL"]``,
    and after its own empty lease it asks once which of the other waiters' labels have a
    visible message
    (:meth:`~pgq_django.store.managers.queryset.MessageQuerySet.ready_labels`), waking one waiter
    of each: idle waiters cost one check per interval however many labels they wait for.

    A wait that holds a thread of its own (see :func:`holds_own_thread`) closes the thread's
    database connections while it waits and counts against ``PGQ["REST_MAX_THREAD_WAITS"]``
    (503 beyond it); under :mod:`pgq_django.asgi` a wait holds neither.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop | None,
        queue: str,
        options: dict[str, Any],
        wait: float,
    ) -> None:
        self.queue = queue
        self.limit = options["qty"]
        self.loop = loop
        self.own_thread = holds_own_thread()
        self.counted = False
        self.waiting = MessageWait(
            queue,
            partial(pgq.read, queue, **options),
            seconds=wait,
            poll_interval=settings.REST_POLL_INTERVAL,
            limit=self.limit,
            group="rest",
            label=(options["filters"] or {}).get("label"),
            release=close_connections if self.own_thread else None,
            give_back=partial(pgq.release_leases, queue),
        )
        self.waiting.register(loop)

    def start(self) -> Response | Wait:
        try:
            found = self.waiting.look()
            if not found and self.own_thread:
                if not thread_waits.acquire():
                    raise TooManyWaits(settings.REST_MAX_THREAD_WAITS)
                self.counted = True
                self.waiting.release()
        except BaseException:
            self.cancel()
            raise
        if found:
            return self.done(found)
        if self.loop is None:
            return self.wait_here()
        return Wait(self.run, self.cancel)

    async def run(self) -> Response:
        try:
            found = await self.waiting.await_rest()
        except BaseException:
            self.cancel()
            raise
        return self.done(found)

    def wait_here(self) -> Response:
        """The wait of a request served without an event loop, on its thread."""
        try:
            found = self.waiting.wait()
        except BaseException:
            self.cancel()
            raise
        return self.done(found)

    def done(self, found: list[Any]) -> Response:
        self.leave(found)
        return consumed(self.queue, found, self.limit)

    def cancel(self) -> None:
        self.leave(None)

    def leave(self, found: list[Any] | None) -> None:
        if self.counted:
            self.counted = False
            thread_waits.release()
        self.waiting.leave(found)


class AckView(PgqView):
    @extend_schema(operation_id="messages_ack", request=None, responses={204: None, **ERRORS})
    def put(self, request: Request, queue: str, message: str) -> Response:
        """Acknowledge (delete) a message; a receipt refuses a stale consumer with 409."""
        ref = message_ref(message)
        require_queue(request.user, "read", queue)
        if not pgq.delete(queue, ref):
            raise refused(queue, ref)
        return no_content()


class NackView(PgqView):
    @extend_schema(operation_id="messages_nack", request=s.NackIn, responses={204: None, **ERRORS})
    def put(self, request: Request, queue: str, message: str) -> Response:
        """Give a message back: visible again after ``visibility_timeout_seconds``."""
        ref = message_ref(message)
        data = self.body(request, s.NackIn)
        require_queue(request.user, "read", queue)
        if not pgq.nack(queue, ref, delay=data.get("visibility_timeout_seconds")):
            raise refused(queue, ref)
        return no_content()


class AckBatchView(PgqView):
    @extend_schema(
        operation_id="messages_ack_batch",
        request=s.AckBatchIn,
        responses={200: s.AckedOut, **ERRORS},
    )
    def put(self, request: Request, queue: str) -> Response:
        """Acknowledge many messages at once; answers the ids that were acked."""
        ids = self.body(request, s.AckBatchIn)["ids"]
        if len(ids) > settings.REST_MAX_BATCH:
            raise InvalidArgument(
                f"Ack at most {settings.REST_MAX_BATCH} messages at once.", field="ids"
            )
        refs = [message_ref(value) for value in ids]
        require_queue(request.user, "read", queue)
        acked = pgq.delete(queue, refs) if refs else []
        return Response({"acked": acked})


class MessagesSlashView(MessagesView):
    """``…/messages/`` as psqlqueue's README spells one consume; left out of the schema."""

    schema = None
