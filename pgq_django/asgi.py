"""An ASGI application for projects that serve many waiting clients (REST long-polls).

Django's own ASGI handler gives every request a thread of its own for synchronous work,
kept until the request ends: five hundred clients long-polling means five hundred idle
threads, each holding a database connection. :func:`get_asgi_application` returns Django's
handler with one change: a request's synchronous work runs on one of a fixed set of
``PGQ["ASGI_THREADS"]`` single-thread executors (round robin), so a waiting client costs a
coroutine and a socket, and the database sees at most that many connections from the
process. A request still runs all its synchronous work on one thread, so connections and
transactions behave as Django documents; a slow synchronous view delays the requests that
share its thread, so keep those on a WSGI server, or raise the setting.

Use it in ``asgi.py``::

    from pgq_django.asgi import get_asgi_application

    application = get_asgi_application()

With an asgiref whose ``ThreadSensitiveContext`` takes no ``executor``, this falls back
to Django's handler unchanged.
"""

from __future__ import annotations

import inspect
import itertools
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import django
from asgiref.sync import ThreadSensitiveContext
from django.core.handlers.asgi import ASGIHandler

_CAN_PIN = "executor" in inspect.signature(ThreadSensitiveContext).parameters


class PooledASGIHandler(ASGIHandler):
    """Django's ASGI handler with a fixed pool of threads for synchronous work."""

    def __init__(self, threads: int) -> None:
        super().__init__()
        self.executors = [
            ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"pgq-asgi-{n}")
            for n in range(max(1, threads))
        ]
        self._next = itertools.cycle(self.executors)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            # Django answers only HTTP; let the server see the same refusal.
            return await super().__call__(scope, receive, send)
        async with ThreadSensitiveContext(executor=next(self._next)):
            await self.handle(scope, receive, send)


def get_asgi_application(threads: int | None = None) -> ASGIHandler:
    """``django.core.asgi.get_asgi_application()`` with a bounded pool of sync threads."""
    django.setup(set_prefix=False)
    if not _CAN_PIN:
        return ASGIHandler()
    from .conf import settings

    return PooledASGIHandler(threads if threads is not None else settings.ASGI_THREADS)
