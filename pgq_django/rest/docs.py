"""The OpenAPI schema (``/v1/schema``) and Swagger UI (``/v1/docs``) of the REST API.

The schema covers pgq_django's own endpoints only, whatever else the project serves. Swagger
UI loads its JavaScript and CSS from ``drf_spectacular_sidecar``'s static files when that app
is installed (``pip install pgq-django`` brings it), so the page needs no CDN; without it,
drf-spectacular's ``SWAGGER_UI_DIST`` setting decides.

Both ask for the API's own authentication (and answer its JSON errors) unless
``PGQ["PUBLIC_API_SCHEMA"]`` is True: the schema lists every endpoint and field, which a
site may prefer to keep to its users.
"""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.templatetags.static import static
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.permissions import AllowAny, BasePermission
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request

from .. import __version__
from ..conf import settings
from .authentication import authentication_classes
from .exceptions import exception_handler
from .permissions import IsAuthenticated

DESCRIPTION = (
    "psqlqueue-compatible queues, topics and subscriptions over pgq_django. Errors answer "
    '`{"error": {"code", "message", "details"}}`. Authenticate with HTTP basic, a session, '
    "or a DRF token; every call checks the caller's grants."
)


class _Guarded:
    """The API's authentication, errors and (unless PUBLIC_API_SCHEMA) login requirement."""

    def get_authenticators(self) -> list[Any]:
        return [cls() for cls in authentication_classes()]

    def get_permissions(self) -> list[BasePermission]:
        return [AllowAny() if settings.PUBLIC_API_SCHEMA else IsAuthenticated()]

    def get_exception_handler(self) -> Any:
        return exception_handler

    def get_authenticate_header(self, request: Request) -> str | None:
        """401 with a challenge when any authenticator can ask for credentials."""
        for authenticator in self.get_authenticators():
            header = authenticator.authenticate_header(request)
            if header:
                return str(header)
        return None

    def handle_exception(self, exc: Exception) -> Any:
        # A refusal answers the API's JSON error, whatever the page's own renderer.
        request = getattr(self, "request", None)
        if request is not None:
            request.accepted_renderer = JSONRenderer()
            request.accepted_media_type = JSONRenderer.media_type
        return super().handle_exception(exc)  # type: ignore[misc]


class SchemaView(_Guarded, SpectacularAPIView):
    urlconf = "pgq_django.rest.urls"
    custom_settings: dict[str, Any] = {
        "TITLE": "pgq_django REST API",
        "VERSION": __version__,
        "DESCRIPTION": DESCRIPTION,
        "COMPONENT_SPLIT_REQUEST": True,
    }


class SwaggerView(_Guarded, SpectacularSwaggerView):
    title = "pgq_django REST API"

    @staticmethod
    def _swagger_ui_resource(filename: str) -> str:
        if apps.is_installed("drf_spectacular_sidecar"):
            return static(f"drf_spectacular_sidecar/swagger-ui-dist/{filename}")
        resource: str = SpectacularSwaggerView._swagger_ui_resource(filename)
        return resource

    @staticmethod
    def _swagger_ui_favicon() -> str:
        if apps.is_installed("drf_spectacular_sidecar"):
            return static("drf_spectacular_sidecar/swagger-ui-dist/favicon-32x32.png")
        favicon: str = SpectacularSwaggerView._swagger_ui_favicon()
        return favicon
