"""Settings of the example project: a small shop whose orders travel through pgq_django queues.

The database is ``DATABASE_URL`` when set, otherwise the embedded PostgreSQL in
``.pgdata/demo`` (started on first use, stopped with the last process using it; see
``python -m pgq_django.embedded status .pgdata/demo``).
Not production settings: the secret key and DEBUG are for a local demo.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pgq_django.testing import database_settings

BASE_DIR = Path(__file__).resolve().parent
REPO_DIR = BASE_DIR.parent

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-project-demo-only-not-secret")
DEBUG = os.environ.get("DEMO_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "[::1]"]

DATABASES = {"default": database_settings(REPO_DIR / ".pgdata" / "demo")}
# Keep connections between requests where a fixed set of threads serves them (uvicorn
# through pgq_django.asgi, as make demo serves it; gunicorn). Not under runserver: its thread
# per client connection would keep one idle PostgreSQL connection per open HTTP connection.
# docs/howto/connections.md says what to set for each kind of server.
if "runserver" not in sys.argv:
    DATABASES["default"]["CONN_MAX_AGE"] = 60
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "pgq_django",
    "example_project.demo_app",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Static files (the admin's CSS, Swagger UI's scripts) under uvicorn, as docs/rest.md
    # shows; with DEBUG on it finds them where runserver would, no collectstatic needed.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
ROOT_URLCONF = "example_project.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

USE_TZ = True
TIME_ZONE = "UTC"
STATIC_URL = "/static/"
STATIC_ROOT = REPO_DIR / ".static"  # manage.py collectstatic, for DEMO_DEBUG=0

REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.BasicAuthentication",
        "rest_framework.authentication.TokenAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
}
SPECTACULAR_SETTINGS = {"TITLE": "pgq_django example", "VERSION": "0.1.0"}

# django.tasks (Django 6) or the django-tasks backport (5.2) run through pgq_django: a task's
# queue_name maps to the pgq queue "tasks_<queue_name>", served by pgq_worker.
TASKS = {"default": {"BACKEND": "pgq_django.tasks.PgqBackend"}}

# Every key is documented in docs/reference/settings.md; these differ from the defaults to
# make the demo lively (short leases so redeliveries are visible within a minute) and to serve
# /sqs/ through pgq_django.asgi's lean path (no middleware for SQS calls; see docs/sqs.md).
PGQ = {
    "DEFAULT_VISIBILITY_TIMEOUT": 20,
    "DEFAULT_RETRY_DELAY": 5,
    "SQS_ASGI_LEAN": True,
    # PGMQ's SQL functions over these queues, for PGMQ clients in any language (docs/pgmq.md).
    "PGMQ_SCHEMA": "pgmq",
    # With OpenTelemetry's SDK configured (docs/observability.md), the admin links each
    # message's trace id to a local Jaeger:
    # "TRACE_URL": "http://localhost:16686/trace/{trace_id}",
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {
        "pgq_django": {"handlers": ["console"], "level": "INFO"},
        "example_project": {"handlers": ["console"], "level": "INFO"},
    },
}
