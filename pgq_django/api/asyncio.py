"""``a``-prefixed async twins of the functional API.

Each twin runs its sync function through ``asgiref.sync_to_async`` in Django's thread for
database work, so it shares that thread's connection and transaction rules.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import sync_to_async


def make_async(func: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    wrapped = sync_to_async(func, thread_sensitive=True)

    @functools.wraps(func)
    async def twin(*args: Any, **kwargs: Any) -> Any:
        return await wrapped(*args, **kwargs)

    twin.__name__ = twin.__qualname__ = "a" + func.__name__
    twin.__doc__ = f"Async twin of :func:`pgq_django.{func.__name__}`."
    return twin
