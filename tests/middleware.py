"""A test-only middleware: marks every response that went through Django's middleware.

The SQS tests run against a server of each kind (tests/sqs/conftest.py); the mark tells
which path answered, so a test can prove that the lean ASGI path really skipped Django's
request cycle and that the Django path really went through it.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

MARK = "X-Pgq-Test-Middleware"


def mark_responses(
    get_response: Callable[[HttpRequest], HttpResponse],
) -> Callable[..., HttpResponse]:
    def middleware(request: HttpRequest) -> HttpResponse:
        response = get_response(request)
        response[MARK] = "1"
        return response

    return middleware
