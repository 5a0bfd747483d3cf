"""The base views: DRF's request cycle with pgq_django's parser, authentication and errors.

:class:`PgqView` is a plain DRF ``APIView``. :class:`AsyncPgqView` runs the same cycle, but a
handler may end by returning a :class:`Wait`: authentication, permissions and the handler's
database work run in one hop to a thread, while the wait (a long-poll) happens on the event
loop, so under an ASGI server a waiting client holds a coroutine, not a thread (DRF's own
``APIView`` is sync only).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import async_to_sync, markcoroutinefunction, sync_to_async
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ...api.recovery import drop_dead_connections
from ..authentication import authentication_classes
from ..exceptions import NotFound, exception_handler
from ..parsers import LimitedJSONParser
from ..permissions import IsAuthenticated
from ..serializers import Strict


class PgqView(APIView):
    # pgq_django.asgi may refuse a request for this view before reading its body.
    pgq_refuses_early = True
    parser_classes = [LimitedJSONParser]
    renderer_classes = [JSONRenderer]
    permission_classes = [IsAuthenticated]
    throttle_classes: list[Any] = []

    def get_authenticators(self) -> list[Any]:
        return [cls() for cls in authentication_classes()]

    def get_exception_handler(self) -> Any:
        return exception_handler

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        """DRF's checks, on a live connection: authentication and the grant look-ups query
        the database before any API call, so a connection the server ended (a PostgreSQL
        restart) is dropped first, as the API itself does."""
        drop_dead_connections()
        super().initial(request, *args, **kwargs)

    def get_authenticate_header(self, request: Request) -> str | None:
        """Answer 401 (not 403) when any authenticator can ask for credentials.

        DRF asks only the first authenticator, so with session authentication listed
        first a missing login would answer 403; a client should learn it may authenticate.
        """
        for authenticator in self.get_authenticators():
            header = authenticator.authenticate_header(request)
            if header:
                return str(header)
        return None

    # Helpers for handlers -----------------------------------------------------------------

    def body(self, request: Request, serializer: type[Strict]) -> dict[str, Any]:
        """The request's JSON body checked by ``serializer`` (ValidationError → 400)."""
        data = request.data
        if not isinstance(data, dict) and hasattr(data, "dict"):  # an empty QueryDict
            data = data.dict()
        checked = serializer(data=data)
        checked.is_valid(raise_exception=True)
        return dict(checked.validated_data)

    def user(self, request: Request) -> Any:
        return request.user


class Wait:
    """What a handler returns to finish its answer on the event loop (a long-poll's wait).

    ``run`` is a coroutine function answering the Response; ``cancel`` undoes what the
    handler set up for it, when the wait never runs.
    """

    def __init__(self, run: Callable[[], Awaitable[Any]], cancel: Callable[[], None]) -> None:
        self.run = run
        self.cancel = cancel


class AsyncPgqView(PgqView):
    """A :class:`PgqView` whose requests may end with a wait on the event loop.

    Handlers are plain methods: authentication, permissions and the handler's database work
    run in one call on a thread (one hop from the event loop), and a handler that has to wait
    returns a :class:`Wait`, which then runs on the event loop, holding no thread.

    The URL gets an ``async def`` view, so Django's ASGI handler (and a WSGI server, through
    ``async_to_sync``) serve it correctly. It carries the synchronous view as
    ``pgq_sync_view`` and :meth:`needs_async` as ``pgq_needs_async``:
    :mod:`pgq_django.asgi` serves a request that cannot wait with the synchronous view, in
    one hop with the middleware.
    """

    # Set on the instance serving a request from the event loop (adispatch).
    awaiting = False
    loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def needs_async(cls, scope: dict[str, Any]) -> bool:
        """Whether the request of an ASGI ``scope`` may wait (needs the event loop)."""
        return True

    @classmethod
    def as_view(cls, **initkwargs: Any) -> Any:
        sync_view = super().as_view(**initkwargs)

        async def view(request: Any, *args: Any, **kwargs: Any) -> Any:
            self = cls(**initkwargs)
            self.setup(request, *args, **kwargs)
            return await self.adispatch(request, *args, **kwargs)

        # What DRF and Django put on their view (cls, initkwargs, view_class, csrf_exempt …),
        # which drf-spectacular and the CSRF middleware read.
        view.__dict__.update(sync_view.__dict__)
        view.__doc__ = sync_view.__doc__
        view.__module__ = sync_view.__module__
        view.pgq_sync_view = sync_view  # type: ignore[attr-defined]
        view.pgq_needs_async = cls.needs_async  # type: ignore[attr-defined]
        return markcoroutinefunction(view)

    def dispatch(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        """DRF's dispatch, except that a handler may answer a :class:`Wait`.

        From :meth:`adispatch` the Wait is returned for the event loop to run; served
        synchronously (``pgq_sync_view``), it runs here, blocking this thread.
        """
        self.args = args
        self.kwargs = kwargs
        drf_request = self.initialize_request(request, *args, **kwargs)
        self.request = drf_request
        self.headers = self.default_response_headers
        try:
            self.initial(drf_request, *args, **kwargs)
            method = drf_request.method.lower()
            handler = getattr(self, method, None) if method in self.http_method_names else None
            response = (handler or self.http_method_not_allowed)(drf_request, *args, **kwargs)
        except Exception as exc:
            response = self.handle_exception(exc)
        if isinstance(response, Wait):
            if self.awaiting:
                return response
            response = async_to_sync(self._finish)(response)
        self.response = self.finalize_response(drf_request, response, *args, **kwargs)
        return self.response

    async def adispatch(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        self.awaiting = True
        self.loop = asyncio.get_running_loop()
        hop = asyncio.ensure_future(
            sync_to_async(self.dispatch, thread_sensitive=True)(request, *args, **kwargs)
        )
        try:
            result = await asyncio.shield(hop)
        except asyncio.CancelledError:
            # The client left while the thread worked: undo a wait it may still set up.
            hop.add_done_callback(_cancel_wait)
            raise
        if not isinstance(result, Wait):
            return result
        response = await self._finish(result)
        self.response = self.finalize_response(self.request, response, *args, **kwargs)
        return self.response

    async def _finish(self, wait: Wait) -> Any:
        try:
            return await wait.run()
        except Exception as exc:
            return await sync_to_async(self.handle_exception, thread_sensitive=True)(exc)


def _cancel_wait(hop: asyncio.Future[Any]) -> None:
    if not hop.cancelled() and hop.exception() is None and isinstance(hop.result(), Wait):
        hop.result().cancel()


def no_content() -> Response:
    return Response(status=204)


class UnknownPathView(PgqView):
    """Any other path under /v1/: a JSON 404 instead of the project's HTML page."""

    schema = None
    pgq_refuses_early = False
    permission_classes: list[Any] = []
    authentication_classes: list[Any] = []

    def get_authenticators(self) -> list[Any]:
        return []

    def initial(self, request: Any, *args: Any, **kwargs: Any) -> None:

        super().initial(request, *args, **kwargs)
        raise NotFound(f"There is no endpoint at {request.path}.", path=request.path)
