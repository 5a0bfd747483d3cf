"""An ASGI application for projects that serve many waiting clients (REST long-polls).

Django's own ASGI handler gives every request a thread of its own for synchronous work,
kept until the request ends: five hundred clients long-polling means five hundred idle
threads, each holding a database connection. :func:`get_asgi_application` returns Django's
handler with two changes:

- A request's synchronous work runs on one of a fixed set of ``PGQ["ASGI_THREADS"]``
  single-thread executors (round robin), so a waiting client costs a coroutine and a
  socket, and the database sees at most that many connections from the process. A request
  still runs all its synchronous work on one thread, so connections and transactions behave
  as Django documents; a slow synchronous view delays the requests that share its thread,
  so keep those on a WSGI server, or raise the setting.
- A request for a synchronous view — every pgq_django endpoint except a long-poll — runs
  the whole of Django's request cycle (``request_started``, the middleware, the view) in
  one hop to its thread, as a WSGI server would run it, instead of Django's ASGI path,
  which crosses from the event loop to a thread and back for every synchronous middleware
  hook and again for the view: ten crossings for a send with a typical middleware stack.
  Requests for asynchronous views (a long-poll) take Django's ASGI path unchanged, so they
  wait on the event loop.

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
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import django
from asgiref.sync import ThreadSensitiveContext, iscoroutinefunction, sync_to_async
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.core.handlers.base import BaseHandler
from django.urls import Resolver404, ResolverMatch, get_resolver, set_script_prefix

if TYPE_CHECKING:
    from .sqs.asgi import LeanEndpoint

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


class PooledASGIHandler(ASGIHandler):
    """Django's ASGI handler with a fixed pool of threads and one hop per synchronous view;
    with ``sqs_lean``, the SQS endpoint's requests are answered by the lean path."""

    def __init__(self, threads: int, *, sqs_lean: bool = False) -> None:
        super().__init__()
        self.sqs: LeanEndpoint | None = None
        if sqs_lean:
            from .sqs.asgi import LeanEndpoint  # the models it needs load after setup()

            self.sqs = LeanEndpoint()
        self.sync_chain = _SyncChain()
        # Middleware that cannot run synchronously would block its thread on the event loop
        # in the synchronous cycle; with any such middleware, keep Django's path for all.
        self.one_hop = all(getattr(m, "sync_capable", True) for m in self._middleware_classes())
        self.executors = [
            ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"pgq-asgi-{n}")
            for n in range(max(1, threads))
        ]
        self._next = itertools.cycle(self.executors)

    @staticmethod
    def _middleware_classes() -> list[Any]:
        from django.conf import settings
        from django.utils.module_loading import import_string

        return [import_string(path) for path in settings.MIDDLEWARE]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            # Django answers only HTTP; let the server see the same refusal.
            return await super().__call__(scope, receive, send)
        executor = next(self._next)
        async with ThreadSensitiveContext(executor=executor):
            if self.sqs is not None and await self.sqs(scope, receive, send, executor):
                return
            if self.one_hop:
                needs_loop, match = resolve_scope(scope)
                if not needs_loop:
                    return await self.handle_sync(scope, receive, send, match)
            await self.handle(scope, receive, send)

    async def handle_sync(
        self, scope: Any, receive: Any, send: Any, match: ResolverMatch | None = None
    ) -> None:
        """Serve a request for a synchronous view with one hop to this request's thread."""
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        set_script_prefix(get_script_prefix(scope))
        try:
            response = await sync_to_async(self._respond, thread_sensitive=True)(
                scope, body_file, match
            )
            try:
                await self.send_response(response, send)
            finally:
                # Closing sends request_finished (Django closes stale connections there).
                await sync_to_async(response.close, thread_sensitive=True)()
        finally:
            body_file.close()

    def _respond(self, scope: Any, body_file: Any, match: ResolverMatch | None) -> Any:
        signals.request_started.send(sender=self.__class__, scope=scope)
        request, error_response = self.create_request(scope, body_file)
        if request is None:
            return error_response
        if match is not None:
            request._pgq_resolved = match  # type: ignore[attr-defined]
        return self.sync_chain.get_response(request)


def get_asgi_application(
    threads: int | None = None, *, sqs_lean: bool | None = None
) -> ASGIHandler:
    """``django.core.asgi.get_asgi_application()`` with a bounded pool of sync threads.

    ``sqs_lean`` (default ``PGQ["SQS_ASGI_LEAN"]``) answers the SQS endpoint's requests
    without Django's middleware (:mod:`pgq_django.sqs.asgi`).
    """
    django.setup(set_prefix=False)
    if not _CAN_PIN:
        return ASGIHandler()
    from .conf import settings

    return PooledASGIHandler(
        threads if threads is not None else settings.ASGI_THREADS,
        sqs_lean=settings.SQS_ASGI_LEAN if sqs_lean is None else sqs_lean,
    )
