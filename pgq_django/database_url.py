"""A libpq connection string (``DATABASE_URL``) as a Django ``DATABASES`` entry.

Production settings import :func:`dsn_to_django` from here. It needs nothing but psycopg's
parser, so settings that use it never load :mod:`pgq_django.testing`, whose helpers start
an embedded PostgreSQL and serve tests; ``pgq_django.testing`` re-exports it for settings
written before this module existed.
"""

from __future__ import annotations

from typing import Any

from psycopg.conninfo import conninfo_to_dict

__all__ = ["dsn_to_django"]

# libpq keywords that have a key of their own in a Django database dict; any other keyword
# (sslmode, connect_timeout, application_name, …) goes to OPTIONS and so reaches psycopg.
_KEYS = {"dbname": "NAME", "user": "USER", "password": "PASSWORD", "host": "HOST", "port": "PORT"}


def dsn_to_django(dsn: str) -> dict[str, Any]:
    """A libpq URI or key=value string as a Django database dict.

    Both forms libpq accepts work, including a Unix socket directory as ``host``. Django
    needs a ``NAME``: a string without a database name gets ``postgres``, the database
    every server has.
    """
    parts = conninfo_to_dict(dsn)
    db: dict[str, Any] = {"ENGINE": "django.db.backends.postgresql", "OPTIONS": {}}
    for key, value in parts.items():
        if key in _KEYS:
            db[_KEYS[key]] = value
        else:
            db["OPTIONS"][key] = value
    db.setdefault("NAME", "postgres")
    return db
