"""What a test's Django connection sent PostgreSQL: libpq's protocol trace, read back."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection


@contextmanager
def protocol_trace() -> Iterator[list[str]]:
    """What the client sent PostgreSQL meanwhile, one line per protocol message (libpq's trace)."""
    from psycopg.pq import Trace

    connection.ensure_connection()
    pgconn = connection.connection.pgconn
    sent: list[str] = []
    with tempfile.TemporaryFile("w+") as out:
        pgconn.trace(out.fileno())
        pgconn.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS)
        try:
            yield sent
        finally:
            pgconn.untrace()
            out.seek(0)
            sent.extend(line for line in out.read().splitlines() if line.startswith("F"))


def message_kinds(sent: list[str]) -> list[str]:
    """The type of each traced message (``Query``, ``Parse``, ``Bind``, …), in order: the
    third tab-separated field of libpq's trace line."""
    return [line.split("\t")[2] for line in sent]
