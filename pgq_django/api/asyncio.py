"""``a``-prefixed async twins of the functional API.

Each twin runs its sync function through ``asgiref.sync_to_async`` in Django's thread for
database work, so it shares that thread's connection and transaction rules. The twin keeps
its function's parameters (``ParamSpec``), so a type checker sees ``pgq.asend`` take what
``pgq.send`` takes and answer an awaitable of what it answers.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

from asgiref.sync import sync_to_async

P = ParamSpec("P")
R = TypeVar("R")


def make_async(func: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    wrapped = sync_to_async(func, thread_sensitive=True)

    @functools.wraps(func)
    async def twin(*args: P.args, **kwargs: P.kwargs) -> R:
        return await wrapped(*args, **kwargs)

    twin.__name__ = twin.__qualname__ = "a" + func.__name__
    twin.__doc__ = f"Async twin of :func:`pgq_django.{func.__name__}`."
    return twin
