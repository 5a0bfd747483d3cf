"""The ASGI site bench/sqs.py serves the endpoint from (``bench.sqs_server:application``).

Django is configured here from ``PGQ_BENCH_DSN`` (the benchmark's database), with only what
the endpoint needs, and served the way docs/sqs.md recommends: by
``pgq_django.asgi.get_asgi_application()``, which runs every request's database work on one
of ``PGQ["ASGI_THREADS"]`` threads, each keeping its connection between requests
(``CONN_MAX_AGE``). Django's own ASGI handler would start a thread, and so open a database
connection, for every request. ``PGQ_BENCH_SQS_LEAN=1`` serves the endpoint through the lean
ASGI path, ``0`` through Django's request cycle (the view).
"""

from __future__ import annotations

import os

import django
from django.conf import settings

from pgq_django.testing import dsn_to_django

if not settings.configured:
    settings.configure(
        DEBUG=False,
        USE_TZ=True,
        SECRET_KEY=os.environ["PGQ_BENCH_SECRET_KEY"],
        ALLOWED_HOSTS=["127.0.0.1"],
        INSTALLED_APPS=["django.contrib.auth", "django.contrib.contenttypes", "pgq_django"],
        DATABASES={"default": {**dsn_to_django(os.environ["PGQ_BENCH_DSN"]), "CONN_MAX_AGE": 600}},
        ROOT_URLCONF=__name__,
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        MIDDLEWARE=[],
    )
    django.setup()

from django.urls import include, path

from pgq_django.asgi import get_asgi_application

urlpatterns = [path("sqs/", include("pgq_django.sqs.urls"))]

application = get_asgi_application(sqs_lean=os.environ.get("PGQ_BENCH_SQS_LEAN") == "1")
