"""The base views: DRF's request cycle with pgq_django's parser, authentication and errors.

:class:`PgqView` is a plain DRF ``APIView``. :class:`AsyncPgqView` runs the same cycle with
``async def`` handlers: authentication, permissions and every database call go through
``sync_to_async`` while waiting (a long-poll) happens on the event loop, so under an ASGI
server a waiting client holds a coroutine, not a thread (DRF's own ``APIView`` is sync only).
"""

from __future__ import annotations

import asyncio
from typing import Any

from asgiref.sync import sync_to_async
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ..exceptions import exception_handler
from ..parsers import LimitedJSONParser
from ..permissions import IsAuthenticated, authentication_classes
from ..serializers import Strict


class PgqView(APIView):
    parser_classes = [LimitedJSONParser]
    renderer_classes = [JSONRenderer]
    permission_classes = [IsAuthenticated]
    throttle_classes: list[Any] = []

    def get_authenticators(self) -> list[Any]:
        return [cls() for cls in authentication_classes()]

    def get_exception_handler(self) -> Any:
        return exception_handler

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


class AsyncPgqView(PgqView):
    """A :class:`PgqView` whose handlers are coroutines."""

    @classmethod
    def as_view(cls, **initkwargs: Any) -> Any:
        view = super().as_view(**initkwargs)
        from asgiref.sync import markcoroutinefunction

        return markcoroutinefunction(view)

    async def dispatch(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        self.args = args
        self.kwargs = kwargs
        drf_request = self.initialize_request(request, *args, **kwargs)
        self.request = drf_request
        self.headers = self.default_response_headers
        try:
            # Authentication, permissions and content negotiation may query the database.
            await sync_to_async(self.initial)(drf_request, *args, **kwargs)
            method = drf_request.method.lower()
            handler = getattr(self, method, None) if method in self.http_method_names else None
            if handler is None:
                handler = self.http_method_not_allowed
            response = handler(drf_request, *args, **kwargs)
            if asyncio.iscoroutine(response):
                response = await response
        except Exception as exc:
            response = self.handle_exception(exc)
        self.response = self.finalize_response(drf_request, response, *args, **kwargs)
        return self.response


def no_content() -> Response:
    return Response(status=204)


class UnknownPathView(PgqView):
    """Any other path under /v1/: a JSON 404 instead of the project's HTML page."""

    schema = None
    permission_classes: list[Any] = []
    authentication_classes: list[Any] = []

    def get_authenticators(self) -> list[Any]:
        return []

    def initial(self, request: Any, *args: Any, **kwargs: Any) -> None:
        from ..exceptions import NotFound

        super().initial(request, *args, **kwargs)
        raise NotFound(f"There is no endpoint at {request.path}.", path=request.path)
