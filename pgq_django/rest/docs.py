"""The OpenAPI schema (``/v1/schema``) and Swagger UI (``/v1/docs``) of the REST API.

The schema covers pgq_django's own endpoints only, whatever else the project serves. Swagger
UI loads its JavaScript and CSS from ``drf_spectacular_sidecar``'s static files when that app
is installed (``pip install pgq-django`` brings it), so the page needs no CDN; without it,
drf-spectacular's ``SWAGGER_UI_DIST`` setting decides.
"""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.templatetags.static import static
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from .. import __version__

DESCRIPTION = (
    "psqlqueue-compatible queues, topics and subscriptions over pgq_django. Errors answer "
    '`{"error": {"code", "message", "details"}}`. Authenticate with HTTP basic, a session, '
    "or a DRF token; every call checks the caller's grants."
)


class SchemaView(SpectacularAPIView):
    urlconf = "pgq_django.rest.urls"
    custom_settings: dict[str, Any] = {
        "TITLE": "pgq_django REST API",
        "VERSION": __version__,
        "DESCRIPTION": DESCRIPTION,
        "COMPONENT_SPLIT_REQUEST": True,
    }


class SwaggerView(SpectacularSwaggerView):
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
