"""An ASGI application for projects that serve many waiting clients (REST long-polls).

Django's own ASGI handler gives every request a thread of its own for synchronous work,
kept until the request ends: five hundred clients long-polling means five hundred idle
threads, each holding a database connection. :func:`get_asgi_application` returns an ASGI
application around Django's (``django.core.asgi.get_asgi_application()``), which does its
own work at the ASGI protocol level, before and around Django's:

- A request's synchronous work runs on one of a fixed set of ``PGQ["ASGI_THREADS"]``
  single-thread executors (round robin, through asgiref's ``ThreadSensitiveContext``), so
  a waiting client costs a coroutine and a socket, and the database sees at most that many
  connections from the process. A request still runs all its synchronous work on one
  thread, so connections and transactions behave as Django documents; a slow synchronous
  view delays the requests that share its thread, so keep those on a WSGI server, or raise
  the setting.
- A request for a REST API view (:mod:`pgq_django.rest`) is refused before its body is read
  when it must be: a declared body over ``PGQ["REST_MAX_BODY_SIZE"]`` answers 413, a body
  without any credentials 401, and HTTP basic credentials are checked first, on the
  password threads of :mod:`pgq_django.rest.authentication` (401, or 429 when throttled);
  an undeclared (chunked) body is read at most one byte past the limit. Such refusals are
  answered by the application itself, without the project's middleware.
- A request for a synchronous view — every pgq_django endpoint except a long-poll — runs
  the whole of Django's request cycle (``request_started``, the middleware, the view) in
  one hop to its thread, as a WSGI server would run it, instead of Django's ASGI path,
  which crosses from the event loop to a thread and back for every synchronous middleware
  hook and again for the view. This borrows two steps of Django's handler (building the
  request, sending the response), so it is a shortcut of :mod:`pgq_django.seams`
  (``asgi_one_hop``): without it (``PGQ["FAST_PATHS"]`` off, or a Django whose handler
  lacks them) every request takes Django's ASGI path, with the same answers. Requests for
  asynchronous views (a long-poll) always take Django's path, so they wait on the event
  loop.

A view tells the handler which way to go: a coroutine function is asynchronous, anything
else synchronous; a view function may carry ``pgq_needs_async(scope) -> bool`` and
``pgq_sync_view`` (the REST messages endpoint does: only a consume with ``wait_seconds``
needs the event loop) to be served synchronously when the request allows.

Use it in ``asgi.py``::

    from pgq_django.asgi import get_asgi_application

    application = get_asgi_application()

With an asgiref whose ``ThreadSensitiveContext`` takes no ``executor``, this falls back
to Django's handler unchanged.
"""

from __future__ import annotations

import inspect
import itertools
import json
import logging
import tempfile
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import django
from asgiref.sync import ThreadSensitiveContext, iscoroutinefunction, sync_to_async
from django.conf import settings as django_settings
from django.core import signals
from django.core.asgi import get_asgi_application as django_asgi_application
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import get_script_prefix
from django.core.handlers.base import BaseHandler
from django.db import InterfaceError, OperationalError
from django.urls import Resolver404, ResolverMatch, get_resolver, set_script_prefix
from django.utils.module_loading import import_string
from rest_framework.exceptions import APIException

from . import seams
from .conf import settings
from .rest import authentication
from .rest.exceptions import error_body
from .validation import is_ascii_digits

if TYPE_CHECKING:
    from .sqs.asgi import LeanEndpoint

logger = logging.getLogger("pgq_django")

_CAN_PIN = "executor" in inspect.signature(ThreadSensitiveContext).parameters


class _SyncChain(BaseHandler):
    """Django's synchronous request cycle (as the WSGI handler builds it) for ASGI requests.

    A view that offers a synchronous twin (``pgq_sync_view``) is served by the twin.
    """

    def __init__(self) -> None:
        super().__init__()
        self.load_middleware(is_async=False)

    def resolve_request(self, request: Any) -> ResolverMatch:
        match: ResolverMatch | None = getattr(request, "_pgq_resolved", None)
        if match is not None and not hasattr(request, "urlconf"):
            # Resolved already, with the same (default) URLconf, to pick this path.
            request.resolver_match = match
        else:
            match = super().resolve_request(request)
        twin = getattr(match.func, "pgq_sync_view", None)
        if twin is not None:
            match.func = twin
        return match


def resolve_scope(scope: dict[str, Any]) -> tuple[bool, ResolverMatch | None]:
    """Whether the request of ``scope`` is for a view that must run on the event loop, and
    the default URLconf's match for its path (None when nothing matches)."""
    script_name = get_script_prefix(scope)
    path = scope["path"]
    if script_name and path.startswith(script_name):
        path = path[len(script_name) :]
    try:
        match = get_resolver().resolve(path or "/")
    except Resolver404:
        return False, None  # Django's 404 page (or the project's handler404) is synchronous
    func = match.func
    decide = getattr(func, "pgq_needs_async", None)
    if decide is not None:
        return bool(decide(scope)), match
    return iscoroutinefunction(func), match


class _BodyTooLarge(Exception):
    """A request body went past ``PGQ["REST_MAX_BODY_SIZE"]`` while it was read."""


def _header(scope: dict[str, Any], name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key == name:  # ASGI servers give header names in lower case
            return bytes(value)
    return None


def refuses_early(match: ResolverMatch | None) -> bool:
    """Whether ``match`` is a REST API view whose refusals may come before its body."""
    view_class = getattr(match.func, "view_class", None) if match is not None else None
    return bool(getattr(view_class, "pgq_refuses_early", False))


def _too_large() -> tuple[int, dict[str, Any], dict[str, str]]:
    limit = settings.REST_MAX_BODY_SIZE
    body = error_body(
        "request_too_large",
        f"The request body is larger than {limit} bytes.",
        {"max_body_size": limit},
    )
    return 413, body, {}


def _has_session_cookie(scope: dict[str, Any]) -> bool:
    cookies = _header(scope, b"cookie")
    name = django_settings.SESSION_COOKIE_NAME.encode("latin-1")
    return cookies is not None and any(
        part.strip().startswith(name + b"=") for part in cookies.split(b";")
    )


async def early_refusal(scope: dict[str, Any]) -> tuple[int, dict[str, Any], dict[str, str]] | None:
    """(status, JSON body, headers) refusing a REST API request before its body is read, or
    None to serve it.

    Checked in this order: a declared Content-Length over the limit (413); HTTP basic
    credentials, on the password threads (401 when wrong, 429 when throttled); a body sent
    with no credentials at all — no Authorization header, no session cookie — when the API
    authenticates only with DRF's basic, session and token classes (401).
    """
    declared = _header(scope, b"content-length")
    if declared is not None:
        text = declared.decode("latin-1").strip()
        if is_ascii_digits(text) and int(text) > settings.REST_MAX_BODY_SIZE:
            return _too_large()
    classes = authentication.authentication_classes()
    header = _header(scope, b"authorization")
    if header is not None:
        if authentication.BasicAuthentication not in classes:
            return None
        try:
            await authentication.check_basic_early(scope, header)
        except APIException as exc:
            return _api_refusal(exc)
        except (OperationalError, InterfaceError):
            # The database unreachable (an outage, a failover): the request's own
            # authentication meets it too and answers 503; the process's outage record
            # logs it once, not a traceback per request.
            pass
        except Exception:
            # Neither a refusal nor the database: serve the request, whose own
            # authentication meets the same error and answers it as Django does.
            logger.warning("event=rest_early_auth_failed", exc_info=True)
        return None
    chunked = b"chunked" in (_header(scope, b"transfer-encoding") or b"").lower()
    has_body = chunked or (declared is not None and declared.strip() not in (b"", b"0"))
    if not has_body or _has_session_cookie(scope):
        return None
    if not all(cls in authentication.KNOWN_CLASSES for cls in classes):
        return None  # a project's own authentication may read credentials from elsewhere
    message = "Authentication credentials were not provided."
    challenge = authentication.BasicAuthentication().authenticate_header(None)
    headers = {"WWW-Authenticate": challenge} if challenge else {}
    return 401, error_body("not_authenticated", message), headers


def _api_refusal(exc: APIException) -> tuple[int, dict[str, Any], dict[str, str]]:
    headers: dict[str, str] = {}
    if exc.status_code == 401:
        headers["WWW-Authenticate"] = authentication.BasicAuthentication().authenticate_header(None)
    wait = getattr(exc, "wait", None)
    if wait:
        headers["Retry-After"] = str(int(wait))
    return exc.status_code, error_body(str(exc.default_code), str(exc.detail)), headers


async def send_refusal(
    send: Any, status: int, body: dict[str, Any], headers: dict[str, str]
) -> None:
    """Answer a refusal as JSON and ask the server to close the connection (the request's
    body, unread, cannot be skipped on a kept-alive one)."""
    payload = json.dumps(body).encode()
    raw = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(payload)).encode()),
        (b"connection", b"close"),
    ]
    raw += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": payload})


async def read_body_within(receive: Any, limit: int | None) -> Any:
    """The request body from ASGI messages into a file, as Django's handler reads it
    (spooled to disk past ``FILE_UPLOAD_MAX_MEMORY_SIZE``), stopping one byte past
    ``limit`` when given (raises _BodyTooLarge)."""
    body_file = tempfile.SpooledTemporaryFile(  # noqa: SIM115 (the caller closes it)
        max_size=django_settings.FILE_UPLOAD_MAX_MEMORY_SIZE, mode="w+b"
    )
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            body_file.close()
            raise RequestAborted()
        chunk = message.get("body", b"")
        size += len(chunk)
        if limit is not None and size > limit:
            body_file.close()
            raise _BodyTooLarge()
        body_file.write(chunk)
        if not message.get("more_body", False):
            break
    body_file.seek(0)
    return body_file


class _CappedReceive:
    """The request's ``receive``, cut off one byte past ``limit`` bytes of body.

    Past the limit it answers as if the client had gone away, so Django's handler stops
    reading and answers nothing; the caller then answers 413 (``exceeded``).
    """

    def __init__(self, receive: Any, limit: int) -> None:
        self.receive = receive
        self.limit = limit
        self.size = 0
        self.body_done = False
        self.exceeded = False

    async def __call__(self) -> Any:
        if self.exceeded:
            return {"type": "http.disconnect"}
        message = await self.receive()
        if not self.body_done and message["type"] == "http.request":
            self.size += len(message.get("body", b""))
            if self.size > self.limit:
                self.exceeded = True
                return {"type": "http.disconnect"}
            self.body_done = not message.get("more_body", False)
        return message


class PooledASGIHandler:
    """An ASGI application around Django's own (``django.core.asgi.get_asgi_application``):
    a fixed pool of threads, REST refusals before the body, and one hop per synchronous
    view; with ``sqs_lean``, the SQS endpoint's requests are answered by the lean path."""

    def __init__(self, threads: int, *, sqs_lean: bool = False) -> None:
        self.django = django_asgi_application()
        self.sqs: LeanEndpoint | None = None
        if sqs_lean:
            from .sqs.asgi import LeanEndpoint  # the models it needs load after setup()

            self.sqs = LeanEndpoint()
        self.sync_chain = _SyncChain()
        # Middleware that cannot run synchronously would block its thread on the event loop
        # in the synchronous cycle; with any such middleware, keep Django's path for all.
        self.one_hop = all(getattr(m, "sync_capable", True) for m in _middleware_classes())
        self.executors = [
            ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"pgq-asgi-{n}")
            for n in range(max(1, threads))
        ]
        self._next = itertools.cycle(self.executors)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            # Django answers only HTTP; let the server see the same refusal.
            return await self.django(scope, receive, send)
        executor = next(self._next)
        # Django's handler opens a context of its own inside this one; the outer one, with
        # the executor, decides the thread.
        async with ThreadSensitiveContext(executor=executor):
            if self.sqs is not None and await self.sqs(scope, receive, send, executor):
                return
            needs_loop, match = resolve_scope(scope)
            gated = refuses_early(match)
            if gated:
                refusal = await early_refusal(scope)
                if refusal is not None:
                    return await send_refusal(send, *refusal)
            steps = None
            if self.one_hop and not needs_loop:
                steps = seams.asgi_request_steps(self.django)
            if steps is not None:
                return await self.handle_sync(steps, scope, receive, send, match, capped=gated)
            await self.handle(scope, receive, send, capped=gated)

    async def handle(self, scope: Any, receive: Any, send: Any, *, capped: bool = False) -> None:
        """Serve a request through Django's own ASGI handler; ``capped`` stops reading a
        body past ``PGQ["REST_MAX_BODY_SIZE"]`` and answers 413."""
        if not capped:
            return await self.django(scope, receive, send)
        limited = _CappedReceive(receive, settings.REST_MAX_BODY_SIZE)
        await self.django(scope, limited, send)
        if limited.exceeded:
            await send_refusal(send, *_too_large())

    async def handle_sync(
        self,
        steps: seams.RequestSteps,
        scope: Any,
        receive: Any,
        send: Any,
        match: ResolverMatch | None = None,
        *,
        capped: bool = False,
    ) -> None:
        """Serve a request for a synchronous view with one hop to this request's thread;
        ``capped`` stops reading a body past ``PGQ["REST_MAX_BODY_SIZE"]`` and answers 413."""
        limit = settings.REST_MAX_BODY_SIZE if capped else None
        try:
            body_file = await read_body_within(receive, limit)
        except RequestAborted:
            return
        except _BodyTooLarge:
            return await send_refusal(send, *_too_large())
        set_script_prefix(get_script_prefix(scope))
        try:
            response = await sync_to_async(self._respond, thread_sensitive=True)(
                steps, scope, body_file, match
            )
            try:
                await steps.send_answer(response, send)
            finally:
                # Closing sends request_finished (Django closes stale connections there).
                await sync_to_async(response.close, thread_sensitive=True)()
        finally:
            body_file.close()

    def _respond(
        self,
        steps: seams.RequestSteps,
        scope: Any,
        body_file: Any,
        match: ResolverMatch | None,
    ) -> Any:
        signals.request_started.send(sender=type(self.django), scope=scope)
        request, error_response = steps.build_request(scope, body_file)
        if request is None:
            return error_response
        if match is not None:
            request._pgq_resolved = match
        return self.sync_chain.get_response(request)


def _middleware_classes() -> list[Any]:
    return [import_string(path) for path in django_settings.MIDDLEWARE]


def get_asgi_application(threads: int | None = None, *, sqs_lean: bool | None = None) -> Any:
    """``django.core.asgi.get_asgi_application()`` with a bounded pool of sync threads.

    ``sqs_lean`` (default ``PGQ["SQS_ASGI_LEAN"]``) answers the SQS endpoint's requests
    without Django's middleware (:mod:`pgq_django.sqs.asgi`).
    """
    if not _CAN_PIN:
        return django_asgi_application()
    django.setup(set_prefix=False)
    return PooledASGIHandler(
        threads if threads is not None else settings.ASGI_THREADS,
        sqs_lean=settings.SQS_ASGI_LEAN if sqs_lean is None else sqs_lean,
    )
