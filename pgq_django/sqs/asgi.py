"""The lean ASGI path: SQS requests answered without Django's request cycle.

Django's ASGI handler spends more CPU on an SQS request than the work the request asks
for: request signals sent across thread hops, the middleware, URL resolution, an
HttpRequest, a task watching for the client to go away. :class:`LeanEndpoint` answers the
requests for the SQS endpoint's URLs directly from the ASGI scope, in one hop to the
database thread, through the same :func:`.protocol.respond` as the Django view — the same
signature check, key re-check, grant rule, actions, error format and body-size limit.

What it keeps of Django, exactly as Django does it: Host validation against
``ALLOWED_HOSTS`` (``HttpRequest.get_host``, on every request), headers whose names contain
an underscore being ignored, ``DATA_UPLOAD_MAX_MEMORY_SIZE``, ``request_started`` and
``request_finished`` (sent in the request's database thread, so connections are checked
and recycled as Django does at each request's start and end), and the client going away
cancelling a long poll. What it skips is the project's middleware; so a request it should
not decide alone goes to Django's path untouched: one whose Host is not allowed (Django
answers 400), one over plain HTTP when ``SECURE_SSL_REDIRECT`` is on (the project's
SecurityMiddleware redirects it), or any request while ``PGQ["SQS_ENABLED"]`` is off.

The endpoint's URLs are where the project's URLconf mounts ``pgq_django.sqs.urls`` (its
default instance, ``reverse("pgq_sqs:endpoint")``), found on the first request and checked
to resolve to the endpoint view; a project that does not mount it is served by Django.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from typing import Any

from django.conf import settings as django_settings
from django.core import signals
from django.core.exceptions import DisallowedHost, SuspiciousOperation
from django.core.handlers.asgi import get_script_prefix
from django.http import HttpRequest
from django.urls import NoReverseMatch, Resolver404, get_resolver, reverse
from django.urls import get_script_prefix as get_url_prefix

from ..conf import settings
from . import protocol, views
from .errors import SqsError


class _HostProbe(HttpRequest):
    """Just enough of a request for Django's own Host and scheme rules (``get_host``,
    ``is_secure``, ``build_absolute_uri``), without building a whole HttpRequest."""

    def __init__(self, scope: dict[str, Any], headers: dict[str, str]) -> None:
        self._scope_scheme = scope.get("scheme") or "http"
        server = scope.get("server")
        meta = {
            "SERVER_NAME": str(server[0]) if server else "unknown",
            "SERVER_PORT": str(server[1]) if server else "0",
        }
        for name, value in headers.items():
            meta["HTTP_" + name.upper().replace("-", "_")] = value
        self.META = meta
        self.path = scope["path"]

    def _get_scheme(self) -> str:
        return str(self._scope_scheme)


def _headers(scope: dict[str, Any]) -> dict[str, str]:
    """Lower-case names to values, as Django reads them: latin-1, repeated headers joined
    by commas, and names with an underscore dropped (they could pose as hyphenated ones)."""
    found: dict[str, str] = {}
    for raw_name, raw_value in scope.get("headers", ()):
        name = raw_name.decode("latin1").lower()
        if "_" in name:
            continue
        value = raw_value.decode("latin1")
        found[name] = f"{found[name]},{value}" if name in found else value
    return found


class LeanEndpoint:
    """Serves the SQS endpoint's URLs straight from ASGI (see the module docstring)."""

    def __init__(self) -> None:
        self._mount: str | None = None
        self._found = False

    # -- which requests ------------------------------------------------------------------

    def mount(self) -> str | None:
        """The endpoint's path below the script prefix (``/sqs/``), or None when the
        URLconf does not route it to the endpoint view."""
        if not self._found:
            self._mount = _find_mount()
            self._found = True
        return self._mount

    def serves(self, scope: dict[str, Any]) -> bool:
        mount = self.mount()
        if mount is None:
            return False
        path: str = scope["path"]
        script_name = get_script_prefix(scope)
        if script_name:
            path = path.removeprefix(script_name)
        if path == mount:
            return True
        if not path.startswith(mount):
            return False
        account, slash, queue = path[len(mount) :].partition("/")
        return bool(account and slash and queue) and "/" not in queue

    # -- serving -------------------------------------------------------------------------

    async def __call__(
        self,
        scope: dict[str, Any],
        receive: Callable[[], Awaitable[dict[str, Any]]],
        send: Callable[[dict[str, Any]], Awaitable[None]],
        executor: Executor | None = None,
    ) -> bool:
        """Answer the request and return True, or return False, having read nothing, for a
        request Django's path must answer.

        ``executor`` is the request's database thread (one of pgq_django.asgi's): the
        request's work is handed to it directly, without asgiref's bookkeeping for
        ``sync_to_async``, which this work does not need (it calls no ``async_to_sync``
        and reads no request-scoped ``Local``). Without one, ``sync_to_async`` picks it.
        """
        if scope["type"] != "http" or not settings.SQS_ENABLED or not self.serves(scope):
            return False
        headers = _headers(scope)
        probe = _HostProbe(scope, headers)
        try:
            probe.get_host()
        except DisallowedHost:
            return False
        if django_settings.SECURE_SSL_REDIRECT and not probe.is_secure():
            return False
        try:
            if scope["method"] != "POST":
                raise SqsError("InvalidAction", "SQS requests are POSTed.")
            body = await _read_body(receive, headers)
        except SqsError as exc:
            await _send(send, protocol.error_answer(exc, xml=protocol.is_query(headers)))
            return True
        except _ClientGone:
            return True
        mount = self.mount() or "/"
        script_name = get_script_prefix(scope).rstrip("/")
        raw_path = scope.get("raw_path")
        request = protocol.WireRequest(
            method="POST",
            # What the client signed: the path as sent (an ASGI server that does not pass it
            # gets the decoded path encoded again, as the view does).
            raw_path=(
                raw_path.split(b"?", 1)[0]
                if isinstance(raw_path, bytes)
                else views.encoded_path(scope["path"])
            ),
            query=scope.get("query_string", b"").decode("latin1"),
            headers=headers,
            body=body,
            endpoint_url=lambda: probe.build_absolute_uri(script_name + mount),
        )

        def started() -> None:
            signals.request_started.send(sender=LeanEndpoint, scope=scope)

        def finished() -> None:
            signals.request_finished.send(sender=LeanEndpoint)

        try:
            answer = await protocol.respond(
                request,
                before=started,
                after=finished,
                disconnected=_disconnect_of(receive),
                run_sync=_runner(executor) if executor is not None else None,
            )
        except SuspiciousOperation as exc:
            # Django logs these to django.security and answers 400; so does this path, in
            # SQS's shape. (A disallowed Host was handed to Django before reading anything;
            # this is for settings changed meanwhile and the like.)
            logging.getLogger(f"django.security.{exc.__class__.__name__}").error(str(exc))
            answer = protocol.error_answer(
                SqsError("InvalidParameterValue", "Bad request."), xml=request.is_query
            )
        if answer is not None:
            await _send(send, answer)
        return True


def _runner(executor: Executor) -> protocol.RunSync:
    async def run(function: Callable[[], Any]) -> Any:
        context = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(executor, context.run, function)

    return run


class _ClientGone(Exception):
    """The client disconnected before its request's body arrived."""


async def _read_body(
    receive: Callable[[], Awaitable[dict[str, Any]]], headers: dict[str, str]
) -> bytes:
    """The whole body, refused (before reading on, when Content-Length says so) once past
    ``DATA_UPLOAD_MAX_MEMORY_SIZE``, as Django's ``request.body`` refuses it."""
    limit = django_settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    declared = headers.get("content-length", "")
    if limit is not None and declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise protocol.too_big()
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if limit is not None and size > limit:
            raise protocol.too_big()
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _disconnect_of(
    receive: Callable[[], Awaitable[dict[str, Any]]],
) -> Callable[[], Awaitable[None]]:
    async def disconnected() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    return disconnected


async def _send(send: Callable[[dict[str, Any]], Awaitable[None]], answer: protocol.Answer) -> None:
    headers = [
        (b"content-type", answer.content_type.encode("latin1")),
        (b"content-length", str(len(answer.body)).encode("latin1")),
    ]
    headers.extend(
        (name.encode("latin1"), value.encode("latin1")) for name, value in answer.headers
    )
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": answer.body})


def _find_mount() -> str | None:
    try:
        path = reverse("pgq_sqs:endpoint")
    except NoReverseMatch:
        return None
    prefix = get_url_prefix()
    if not path.startswith(prefix):
        return None
    mount = "/" + path[len(prefix) :]
    resolver = get_resolver()
    try:
        # The URLconf's first match, for the endpoint and for a queue URL, must be the view.
        for probe in (mount, f"{mount}000000000000/q"):
            if resolver.resolve(probe).func is not views.endpoint:
                return None
    except Resolver404:
        return None
    return mount
