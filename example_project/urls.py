"""URLs of the example project.

The admin is always there. The REST API (with its Swagger UI and Prometheus metrics) and the
SQS endpoint are mounted when their pgq_django modules are present, so the example keeps
working while those parts of the app are optional or still being built.
"""

from __future__ import annotations

import importlib
from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import include, path, reverse


def _has_module(dotted: str) -> bool:
    try:
        importlib.import_module(dotted)
    except ModuleNotFoundError as exc:
        # Only "the module is not there" means optional; a broken import inside it is a bug
        # that should surface.
        if exc.name and dotted.startswith(exc.name):
            return False
        raise
    return True


def home(request: HttpRequest) -> HttpResponse:
    """A one-line index so http://127.0.0.1:8000/ is not a 404."""
    admin_url = reverse("admin:index")
    return HttpResponse(
        f'<h1>pgq_django example</h1><p><a href="{admin_url}">Admin</a></p>',
        content_type="text/html",
    )


urlpatterns: list[Any] = [
    path("admin/", admin.site.urls),
    path("", home, name="home"),
]

if _has_module("pgq_django.rest.urls"):
    urlpatterns.append(path("", include("pgq_django.rest.urls")))
if _has_module("pgq_django.sqs.urls"):
    urlpatterns.append(path("sqs/", include("pgq_django.sqs.urls")))
