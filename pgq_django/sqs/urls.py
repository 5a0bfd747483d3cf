"""Mount with ``path("sqs/", include("pgq_django.sqs.urls"))``; SDKs then use
``endpoint_url="https://<host>/sqs/"``. Queue URLs (``…/sqs/<account>/<queue>``) accept the
same requests, for clients that post to the queue URL."""

from __future__ import annotations

from django.urls import path

from . import views

app_name = "pgq_sqs"

urlpatterns = [
    path("", views.endpoint, name="endpoint"),
    path("<str:account>/<str:queue>", views.endpoint, name="queue"),
]
