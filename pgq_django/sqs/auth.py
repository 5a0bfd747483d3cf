"""Who sent an SQS request: verify its SigV4 signature against an AccessKey row.

The key's secret is stored encrypted (see :class:`~pgq_django.models.AccessKey`) because
SigV4 needs the secret itself to recompute the HMAC. A request is accepted only if its key
is active, its owner is active, its timestamp is within ``PGQ["SQS_CLOCK_SKEW"]`` seconds of
the server's clock (15 minutes, as AWS), its body hashes to what was signed, and the
signature matches. ``host`` and ``x-amz-target`` (the action) must be among the signed
headers, so neither can be swapped on a captured request.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import quote

from django.http import HttpRequest
from django.utils import timezone

from ..conf import settings
from ..models import AccessKey
from . import sigv4
from .errors import SqsError

logger = logging.getLogger("pgq_django.sqs")

SERVICE = "sqs"
REQUIRED_SIGNED_HEADERS = ("host", "x-amz-target")
# last_used_at is refreshed at most this often, so busy keys do not write on every call.
_TOUCH_INTERVAL = timedelta(seconds=60)


@dataclass(frozen=True)
class Caller:
    """An authenticated request's key, its owner and the region the client signed for."""

    key_id: str
    user: Any
    region: str


def _raw_path(request: HttpRequest) -> str:
    """The path exactly as the client sent it (still percent-encoded), which is what it
    signed. ASGI servers pass it as ``raw_path``; some WSGI servers as RAW_URI/REQUEST_URI;
    otherwise the decoded path is encoded again, which gives the same text for every path
    an SDK produces."""
    scope = getattr(request, "scope", None)
    raw = scope.get("raw_path") if isinstance(scope, dict) else None
    if isinstance(raw, bytes):
        try:
            return raw.decode("utf-8").split("?", 1)[0]
        except UnicodeDecodeError:
            raise SqsError("SignatureDoesNotMatch", "The request path is not UTF-8.") from None
    for key in ("RAW_URI", "REQUEST_URI"):
        uri = request.META.get(key)
        if uri:
            return str(uri).split("?", 1)[0]
    return quote(request.path, safe="/~!$&'()*+,;=:@")


def _request_time(request: HttpRequest) -> str:
    """The signed timestamp, as ``yyyymmddThhmmssZ``: X-Amz-Date, or the Date header."""
    amz_date = request.headers.get("X-Amz-Date")
    if amz_date:
        try:
            datetime.strptime(amz_date, sigv4.AMZ_DATE_FORMAT)
        except ValueError:
            raise SqsError(
                "IncompleteSignature", "X-Amz-Date must be an ISO 8601 basic-format UTC time."
            ) from None
        return amz_date
    date = request.headers.get("Date")
    if date:
        try:
            parsed = parsedate_to_datetime(date)
        except (TypeError, ValueError):
            parsed = None
        if parsed is not None and parsed.tzinfo is not None:
            return parsed.astimezone(UTC).strftime(sigv4.AMZ_DATE_FORMAT)
    raise SqsError("IncompleteSignature", "The request must carry an X-Amz-Date or Date header.")


def _check_clock(amz_date: str, now: datetime) -> None:
    signed_at = datetime.strptime(amz_date, sigv4.AMZ_DATE_FORMAT).replace(tzinfo=UTC)
    window = timedelta(seconds=float(settings.SQS_CLOCK_SKEW))
    stamp = now.strftime(sigv4.AMZ_DATE_FORMAT)
    minutes = f"{window.total_seconds() / 60:g} min."
    if signed_at < now - window:
        oldest = (now - window).strftime(sigv4.AMZ_DATE_FORMAT)
        raise SqsError(
            "SignatureDoesNotMatch",
            f"Signature expired: {amz_date} is now earlier than {oldest} ({stamp} - {minutes})",
        )
    if signed_at > now + window:
        latest = (now + window).strftime(sigv4.AMZ_DATE_FORMAT)
        raise SqsError(
            "SignatureDoesNotMatch",
            f"Signature not yet current: {amz_date} is still later than {latest} "
            f"({stamp} + {minutes})",
        )


def _payload_hash(request: HttpRequest, body: bytes) -> str:
    computed = hashlib.sha256(body).hexdigest()
    claimed = request.headers.get("X-Amz-Content-SHA256")
    if claimed is not None and claimed != computed:
        # An unsigned or streaming payload would leave the body unauthenticated.
        raise SqsError(
            "SignatureDoesNotMatch",
            "X-Amz-Content-SHA256 must be the SHA-256 of the body; unsigned payloads are "
            "not accepted.",
        )
    return computed


def _find_key(key_id: str) -> AccessKey:
    try:
        return AccessKey.objects.active().select_related("user").get(key_id=key_id)
    except AccessKey.DoesNotExist:
        raise SqsError(
            "InvalidClientTokenId", "The security token included in the request is invalid."
        ) from None


def authenticate(request: HttpRequest, body: bytes) -> Caller:
    """The verified caller of ``request`` (whose body is ``body``), or an SqsError."""
    try:
        return _authenticate(request, body)
    except SqsError as exc:
        logger.info("event=sqs_auth_refused code=%s", exc.code)
        raise


def _authenticate(request: HttpRequest, body: bytes) -> Caller:
    header = request.headers.get("Authorization")
    if not header:
        raise SqsError(
            "MissingAuthenticationToken",
            "The request must be signed with AWS Signature Version 4 (Authorization header); "
            "presigned URLs are not accepted.",
        )
    auth = sigv4.parse_authorization(header)
    if auth.service != SERVICE:
        raise SqsError(
            "SignatureDoesNotMatch", f"Credential should be scoped to the service '{SERVICE}'."
        )
    for name in REQUIRED_SIGNED_HEADERS:
        if name not in auth.signed_headers:
            raise SqsError("IncompleteSignature", f"The {name} header must be signed.")
    amz_date = _request_time(request)
    if amz_date[:8] != auth.date:
        raise SqsError(
            "SignatureDoesNotMatch",
            f"Date in Credential scope ({auth.date}) does not match the request's date "
            f"({amz_date[:8]}).",
        )
    now = timezone.now()
    _check_clock(amz_date, now)
    payload = _payload_hash(request, body)
    key = _find_key(auth.key_id)
    canonical = sigv4.canonical_request(
        method=request.method or "",
        raw_path=_raw_path(request),
        raw_query=request.META.get("QUERY_STRING", ""),
        header=request.headers.get,
        signed_headers=auth.signed_headers,
        payload_hash=payload,
    )
    expected = sigv4.signature(
        sigv4.signing_key(key.secret, auth.date, auth.region, auth.service),
        sigv4.string_to_sign(amz_date, auth.scope, canonical),
    )
    if not sigv4.matches(expected, auth.signature):
        raise SqsError(
            "SignatureDoesNotMatch",
            "The request signature we calculated does not match the signature you provided. "
            "Check your AWS Secret Access Key and signing method.",
        )
    if key.last_used_at is None or now - key.last_used_at > _TOUCH_INTERVAL:
        AccessKey.objects.filter(pk=key.pk).update(last_used_at=now)
    return Caller(key_id=key.key_id, user=key.user, region=auth.region)
