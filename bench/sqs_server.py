"""The ASGI site bench/sqs.py serves the endpoint from (``bench.sqs_server:application``).

Django is configured here from ``PGQ_BENCH_DSN`` (the benchmark's database), with only what
the endpoint needs. Connections come from psycopg's pool when it is installed: under ASGI each
request runs its database work in a thread of its own, so without a pool every request would
open a new PostgreSQL connection (the set-up a production deployment would use).
"""

from __future__ import annotations

import importlib.util
import os

import django
from django.conf import settings

from pgq_django.testing import dsn_to_django

if not settings.configured:
    database = dsn_to_django(os.environ["PGQ_BENCH_DSN"])
    if importlib.util.find_spec("psycopg_pool") is not None:
        database["OPTIONS"]["pool"] = {"min_size": 2, "max_size": 8}
    settings.configure(
        DEBUG=False,
        USE_TZ=True,
        SECRET_KEY=os.environ["PGQ_BENCH_SECRET_KEY"],
        ALLOWED_HOSTS=["127.0.0.1"],
        INSTALLED_APPS=["django.contrib.auth", "django.contrib.contenttypes", "pgq_django"],
        DATABASES={"default": database},
        ROOT_URLCONF=__name__,
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        MIDDLEWARE=[],
    )
    django.setup()

from django.core.asgi import get_asgi_application
from django.urls import include, path

urlpatterns = [path("sqs/", include("pgq_django.sqs.urls"))]

application = get_asgi_application()
