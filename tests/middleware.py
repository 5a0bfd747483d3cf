"""A test-only middleware: marks every response that went through Django's middleware.

The SQS tests run against a server of each kind (tests/sqs/conftest.py); the mark tells
which path answered, so a test can prove that the lean ASGI path really skipped Django's
request cycle and that the Django path really went through it. It is sync and async
capable, as Django's own middleware is: a sync-only middleware would make Django run an
async view (a long poll) from a thread, holding it for the whole wait.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from asgiref.sync import iscoroutinefunction
from django.utils.decorators import sync_and_async_middleware

MARK = "X-Pgq-Test-Middleware"


@sync_and_async_middleware
def mark_responses(get_response: Callable[..., Any]) -> Callable[..., Any]:
    if iscoroutinefunction(get_response):

        async def async_middleware(request: Any) -> Any:
            response = await get_response(request)
            response[MARK] = "1"
            return response

        return async_middleware

    def middleware(request: Any) -> Any:
        response = get_response(request)
        response[MARK] = "1"
        return response

    return middleware
