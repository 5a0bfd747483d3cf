"""The SQS endpoint as a Django view: one async view for every action.

This is the path for WSGI servers, and for ASGI servers running Django's own handler; the
lean ASGI path of :func:`pgq_django.asgi.get_asgi_application` (``sqs_lean``) answers the
same requests without Django's request cycle. Both turn their request into a
:class:`~.protocol.WireRequest` and let :func:`.protocol.respond` do the rest, so they
authenticate, check grants, act and refuse identically.
"""

from __future__ import annotations

import uuid
from urllib.parse import quote

from django.core.exceptions import RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt

from ..conf import settings
from . import protocol
from .errors import SqsError


def to_response(answer: protocol.Answer) -> HttpResponse:
    response = HttpResponse(answer.body, status=answer.status, content_type=answer.content_type)
    for name, value in answer.headers:
        response[name] = value
    return response


def _body(request: HttpRequest) -> bytes:
    try:
        return request.body
    except RequestDataTooBig:
        raise protocol.too_big() from None


def _raw_path(request: HttpRequest) -> str | bytes:
    """The path exactly as the client sent it (still percent-encoded), which is what it
    signed. ASGI servers pass it as ``raw_path``; some WSGI servers as RAW_URI/REQUEST_URI;
    otherwise the decoded path is encoded again, which gives the same text for every path
    an SDK produces."""
    scope = getattr(request, "scope", None)
    raw = scope.get("raw_path") if isinstance(scope, dict) else None
    if isinstance(raw, bytes):
        return raw.split(b"?", 1)[0]
    for key in ("RAW_URI", "REQUEST_URI"):
        uri = request.META.get(key)
        if uri:
            return str(uri).split("?", 1)[0]
    return encoded_path(request.path)


def encoded_path(path: str) -> str:
    """A decoded path encoded again, which gives the text an SDK sent for every path it
    produces."""
    return quote(path, safe="/~!$&'()*+,;=:@")


def _base_url(request: HttpRequest) -> str:
    match = request.resolver_match
    namespace = ":".join(match.namespaces) if match is not None else ""
    path = reverse(f"{namespace}:endpoint" if namespace else "endpoint")
    return request.build_absolute_uri(path)


def wire_request(request: HttpRequest) -> protocol.WireRequest:
    return protocol.WireRequest(
        method=request.method or "",
        raw_path=_raw_path(request),
        query=request.META.get("QUERY_STRING", ""),
        headers={name.lower(): value for name, value in request.headers.items()},
        body=_body(request),
        endpoint_url=lambda: _base_url(request),
    )


@csrf_exempt
async def endpoint(request: HttpRequest, **_url: str) -> HttpResponse:
    """Every SQS action, posted to the endpoint URL (or to a queue URL)."""
    if not settings.SQS_ENABLED:
        raise Http404("The SQS endpoint is switched off (PGQ['SQS_ENABLED']).")
    xml = protocol.is_query({name.lower(): value for name, value in request.headers.items()})
    try:
        if request.method != "POST":
            raise SqsError("InvalidAction", "SQS requests are POSTed.")
        wire = wire_request(request)
    except Exception as exc:
        return to_response(protocol.refusal(exc, str(uuid.uuid4()), xml=xml))
    # A SuspiciousOperation (a Host outside ALLOWED_HOSTS) goes on to Django: it answers 400.
    answer = await protocol.respond(wire)
    assert answer is not None  # only a request that can tell it was abandoned goes unanswered
    return to_response(answer)
