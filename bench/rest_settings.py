"""Settings of the REST benchmark's server and client: the benchmark database, the REST API."""

import os

from bench.common import _bench_database

SECRET_KEY = "bench-only-not-secret"
DEBUG = False
USE_TZ = True
ALLOWED_HOSTS = ["127.0.0.1"]
DATABASES = {"default": {**_bench_database(), "CONN_MAX_AGE": 600}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "pgq_django",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
ROOT_URLCONF = "pgq_django.rest.urls"
REST_FRAMEWORK = {"DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema"}
# PGQ_BENCH_FAST_PATHS: "0" takes no shortcut of pgq_django.seams, or a comma-separated list
# of the shortcuts to take (default: all), to measure what one is worth.
_FAST_PATHS = os.environ.get("PGQ_BENCH_FAST_PATHS")
PGQ = {} if _FAST_PATHS is None else {"FAST_PATHS": _FAST_PATHS != "0" and _FAST_PATHS.split(",")}
