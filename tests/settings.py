"""Settings for the test suite: a real PostgreSQL (DATABASE_URL or embedded)."""

import json
import os
from pathlib import Path

from pgq_django.testing import database_settings

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "tests-only-not-secret"
DEBUG = False
USE_TZ = True
ALLOWED_HOSTS = ["*"]
# PGQ_TEST_NO_DATABASE=1 (`make test-unit`): no server is started or attached to; unit tests
# never connect (tests/unit/conftest.py refuses database fixtures), so none is needed.
_NOWHERE = {"ENGINE": "django.db.backends.postgresql", "NAME": "no_database_in_unit_tests"}
DATABASES = {
    "default": _NOWHERE
    if os.environ.get("PGQ_TEST_NO_DATABASE")
    else database_settings(BASE_DIR / ".pgdata" / "tests")
}
# PGQ_TEST_DB lets several test runs share one server; worker subprocesses started by
# tests get PGQ_USE_TEST_DB=1 so they connect to the test database instead of the main one.
# Under pytest-xdist each worker has a database of its own, named for the worker
# (PYTEST_XDIST_WORKER, which the children a worker starts inherit, so they find it too);
# tests/conftest.py keeps pytest-django from adding a suffix of its own.
TEST_DB_NAME = os.environ.get("PGQ_TEST_DB", "pgq_test")
if os.environ.get("PYTEST_XDIST_WORKER"):
    TEST_DB_NAME += "_" + os.environ["PYTEST_XDIST_WORKER"]
DATABASES["default"]["TEST"] = {"NAME": TEST_DB_NAME}
if os.environ.get("PGQ_USE_TEST_DB"):
    DATABASES["default"]["NAME"] = TEST_DB_NAME
# PGQ_TEST_CONN_MAX_AGE: a live server whose threads keep their connections between requests,
# as a production site's do (the reconnect tests end those connections under it).
if os.environ.get("PGQ_TEST_CONN_MAX_AGE"):
    DATABASES["default"]["CONN_MAX_AGE"] = int(os.environ["PGQ_TEST_CONN_MAX_AGE"])
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
    # The test harness's own commands (a flush that survives a deadlock: see its module).
    "tests.harness",
]
MIDDLEWARE = [
    "tests.middleware.mark_responses",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
# A server of the SQS tests that checks what the lean ASGI path hands back to Django: a
# Host outside ALLOWED_HOSTS, and plain HTTP when HTTPS is required (tests/sqs/test_sqs_lean.py).
if os.environ.get("PGQ_TEST_STRICT_HOSTS"):
    ALLOWED_HOSTS = ["127.0.0.1"]
    SECURE_SSL_REDIRECT = True
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    MIDDLEWARE.insert(0, "django.middleware.security.SecurityMiddleware")
ROOT_URLCONF = "tests.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
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
STATIC_URL = "/static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
PGQ: dict[str, object] = {"DEFAULT_VISIBILITY_TIMEOUT": 30}
# PGQ_TEST_PGQ: JSON laid over PGQ, for a live server with other settings.
if os.environ.get("PGQ_TEST_PGQ"):
    PGQ.update(json.loads(os.environ["PGQ_TEST_PGQ"]))
# Settings every test's own PGQ override keeps (tests/conftest.py lays them over it): the
# pooler's below, and PGQ_TEST_FAST_PATHS=0 (a CI row) for the public-API path of every
# shortcut in pgq_django.seams.
PINNED_PGQ: dict[str, object] = {}
if os.environ.get("PGQ_TEST_FAST_PATHS") == "0":
    PINNED_PGQ["FAST_PATHS"] = False
# Behind a transaction-mode pooler (.ci/test-pgbouncer: DATABASE_URL goes through PgBouncer,
# DIRECT_DATABASE_URL reaches the same server without it), with the settings
# docs/howto/pgbouncer.md gives: no prepared statements, no server-side cursors, and LISTEN
# on a direct connection.
if os.environ.get("DIRECT_DATABASE_URL"):
    from pgq_django.testing import dsn_to_django

    _direct = dsn_to_django(os.environ["DIRECT_DATABASE_URL"])
    _direct.pop("NAME")  # follow the test database
    _direct.pop("ENGINE")
    for _key in ("HOST", "PORT", "USER", "PASSWORD"):  # each replaces the pooler's
        _direct.setdefault(_key, "")
    # tests/conftest.py lays these over any PGQ a test overrides, as a project keeps them.
    # A PgBouncer that keeps prepared statements (1.21+ with max_prepared_statements; python
    # -m bench.pgbouncer --setting max_prepared_statements=N says so) takes them as they are.
    _prepared = os.environ.get("POOLER_KEEPS_PREPARED") == "1"
    PINNED_PGQ.update(PREPARED_STATEMENTS=_prepared, LISTEN_CONNECTION=_direct)
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
PGQ.update(PINNED_PGQ)

# The django.tasks backend and a second, non-pgq backend, as
# tests/acceptance/test_security.py uses them in-process (override_settings) and in worker
# processes it starts with PGQ_TEST_TASKS=1.
try:
    import django.tasks  # noqa: F401

    _DUMMY_BACKEND = "django.tasks.backends.dummy.DummyBackend"
except ImportError:
    _DUMMY_BACKEND = "django_tasks.backends.dummy.DummyBackend"
TEST_TASKS = {
    "default": {
        "BACKEND": "pgq_django.tasks.PgqBackend",
        "QUEUES": ["default"],
        "OPTIONS": {"queue_prefix": "tasks_"},
    },
    "other": {"BACKEND": _DUMMY_BACKEND},
}
if os.environ.get("PGQ_TEST_TASKS"):
    TASKS = TEST_TASKS
REST_FRAMEWORK = {"DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema"}
# Fast hashing: REST tests authenticate every request with HTTP basic.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# Server errors of the live servers the REST tests start reach the test output.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "loggers": {"django.request": {"handlers": ["stderr"], "level": "ERROR"}},
}
