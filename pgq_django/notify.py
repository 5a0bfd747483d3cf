"""LISTEN/NOTIFY wake-ups.

A committed send on a queue runs ``pg_notify(<channel>, <queue name>)`` in its own statement,
so a consumer waiting here learns of a new message within milliseconds instead of polling.
Each thread keeps one listening connection, opened on first use with the same parameters as
the Django database, and reuses it for later waits.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from django.db import connections

from .conf import settings

_local = threading.local()
_all: list[Listener] = []
_all_lock = threading.Lock()


def connection_params(alias: str | None = None) -> dict[str, Any]:
    """psycopg.connect() keyword arguments equivalent to a Django database alias."""
    params = dict(connections[alias or settings.DATABASE].get_connection_params())
    for key in ("cursor_factory", "context", "prepare_threshold", "client_encoding"):
        params.pop(key, None)
    return params


class Listener:
    """One connection that LISTENs on the notify channel and waits for queue names."""

    def __init__(self, alias: str | None = None) -> None:
        self.channel = settings.NOTIFY_CHANNEL
        self.conn = psycopg.connect(**connection_params(alias), autocommit=True)
        self.conn.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(self.channel)))
        self.pending: set[str] = set()

    def drain(self) -> set[str]:
        """Queue names notified since the last call, without waiting."""
        for note in self.conn.notifies(timeout=0):
            self.pending.add(note.payload)
        names, self.pending = self.pending, set()
        return names

    def wait(self, timeout: float) -> set[str]:
        """Wait up to ``timeout`` seconds for any notification; returns the queue names."""
        if not self.pending:
            for note in self.conn.notifies(timeout=max(timeout, 0), stop_after=1):
                self.pending.add(note.payload)
        return self.drain()

    def wait_for(self, queue: str | set[str], timeout: float) -> bool:
        """Wait until one of the given queues is notified or ``timeout`` passes."""
        wanted = {queue} if isinstance(queue, str) else queue
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if self.wait(remaining) & wanted:
                return True

    def close(self) -> None:
        self.conn.close()


@contextmanager
def listener(alias: str | None = None) -> Iterator[Listener]:
    """This thread's listener, connected and listening before the caller's first read."""
    key = alias or settings.DATABASE
    cached: dict[str, Listener] = getattr(_local, "listeners", None) or {}
    _local.listeners = cached
    current = cached.get(key)
    if current is None or current.conn.closed:
        current = cached[key] = Listener(alias)
        with _all_lock:
            _all.append(current)
    try:
        yield current
    except BaseException:
        cached.pop(key, None)
        current.close()
        raise


class AsyncListener:
    """The asyncio form of :class:`Listener`, for ``aread_with_poll`` and async workers.

    Waiting happens on the event loop, so a long poll does not hold the thread that Django's
    ``sync_to_async`` uses for database work.
    """

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self.conn = conn

    @classmethod
    async def connect(cls, alias: str | None = None) -> AsyncListener:
        conn = await psycopg.AsyncConnection.connect(**connection_params(alias), autocommit=True)
        channel = psycopg.sql.Identifier(settings.NOTIFY_CHANNEL)
        await conn.execute(psycopg.sql.SQL("LISTEN {}").format(channel))
        return cls(conn)

    async def wait_for(self, queue: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            async for note in self.conn.notifies(timeout=remaining, stop_after=1):
                if note.payload == queue:
                    return True
        return False

    async def close(self) -> None:
        await self.conn.close()


def close_all() -> None:
    """Close every thread's cached listener (tests, process shutdown, database teardown)."""
    with _all_lock:
        listeners, _all[:] = list(_all), []
    for item in listeners:
        item.close()


def notify_queue(queue: str, alias: str | None = None) -> None:
    """Wake consumers of ``queue`` (after a resume, a redrive or a manual change)."""
    with connections[alias or settings.DATABASE].cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, %s)", [settings.NOTIFY_CHANNEL, queue])
