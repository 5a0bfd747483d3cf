"""A libpq connection string (``DATABASE_URL``) as a Django ``DATABASES`` entry.

Production settings import :func:`dsn_to_django` from here. It needs nothing but psycopg's
parser (and Django's ``ImproperlyConfigured``), so settings that use it never load
:mod:`pgq_django.testing`, whose helpers start an embedded PostgreSQL and serve tests;
``pgq_django.testing`` re-exports it for settings written before this module existed.

A string libpq cannot parse is reported as ``ImproperlyConfigured`` naming the setting,
never with the string itself: libpq's own message quotes the part it choked on, which is
often the password (``invalid percent-encoded token: "s3cr%et"``).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote

import psycopg
from django.core.exceptions import ImproperlyConfigured
from psycopg.conninfo import conninfo_to_dict

__all__ = ["dsn_to_django"]

# libpq keywords that have a key of their own in a Django database dict; any other keyword
# (sslmode, connect_timeout, application_name, …) goes to OPTIONS and so reaches psycopg.
_KEYS = {"dbname": "NAME", "user": "USER", "password": "PASSWORD", "host": "HOST", "port": "PORT"}


def dsn_to_django(dsn: str, *, setting: str = "DATABASE_URL") -> dict[str, Any]:
    """A libpq URI or key=value string as a Django database dict.

    Both forms libpq accepts work, including a Unix socket directory as ``host``. Django
    needs a ``NAME``: a string without a database name gets ``postgres``, the database
    every server has. A string that is not a connection string, or whose port is not a
    number, raises ``ImproperlyConfigured`` naming ``setting`` (where the string came from)
    with any password masked.
    """
    try:
        parts = conninfo_to_dict(dsn)
    except psycopg.Error as exc:
        said = str(exc).strip().splitlines()
        reason = _masked(said[0] if said else "libpq cannot parse it", dsn)
        raise ImproperlyConfigured(
            f"{setting} is not a valid PostgreSQL connection string ({reason}). Expected "
            "postgresql://USER:PASSWORD@HOST:PORT/NAME (percent-encode '@', ':', '/', '%' "
            "in the password) or key=value pairs such as 'host=... dbname=...'; the value "
            "is not shown because it may hold a password."
        ) from None
    for port in str(parts.get("port") or "").split(","):
        if port and not (port.isascii() and port.isdigit()):
            # Not echoed: an unencoded "@" in a password moves the rest of it into the port.
            raise ImproperlyConfigured(
                f"{setting} names a port that is not a number; an '@', ':' or '/' in the "
                "password must be percent-encoded ('%40', '%3A', '%2F'). The value is not "
                "shown because it may hold a password."
            )
    db: dict[str, Any] = {"ENGINE": "django.db.backends.postgresql", "OPTIONS": {}}
    for key, value in parts.items():
        if key in _KEYS:
            db[_KEYS[key]] = value
        else:
            db["OPTIONS"][key] = value
    db.setdefault("NAME", "postgres")
    return db


# Where a password can sit in a string libpq could not parse: a URI's user information
# (``scheme://user:password@``), a ``password=`` query parameter or keyword.
_URI_USERINFO = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://(?P<info>[^/?#]*)@")
_PASSWORD = re.compile(r"\bpassword\s*=\s*(?P<secret>'(?:\\.|[^'])*'?|[^\s&#]+)")
_QUOTED = re.compile(r'"[^"]*"')
MASK = "****"


def _masked(message: str, dsn: str) -> str:
    """libpq's message without any part of ``dsn`` longer than two characters.

    libpq quotes the piece of the string it stopped at, and that piece may be (or hold a
    fragment of) the password wherever it sits: a URI without its scheme, an unquoted
    password with a space in it. Which quoted piece is safe cannot be told reliably, so
    every one longer than a punctuation mark (``"]"``, ``"="``) is masked; then any
    password found in ``dsn`` is masked wherever it still appears.
    """
    message = _QUOTED.sub(lambda m: m.group(0) if len(m.group(0)) <= 4 else f'"{MASK}"', message)
    secrets: list[str] = []
    info = _URI_USERINFO.match(dsn)
    if info:
        secrets += [info.group("info"), info.group("info").partition(":")[2]]
    secrets += [m.group("secret").strip("'") for m in _PASSWORD.finditer(dsn)]
    for secret in sorted({*secrets, *map(unquote, secrets)} - {""}, key=len, reverse=True):
        message = message.replace(secret, MASK)
    return message
