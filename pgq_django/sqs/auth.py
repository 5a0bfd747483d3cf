"""Who sent an SQS request: verify its SigV4 signature against an AccessKey row.

The key's secret is stored encrypted (see :class:`~pgq_django.models.AccessKey`) because
SigV4 needs the secret itself to recompute the HMAC. A request is accepted only if its key
is active, its owner is active, its timestamp is within ``PGQ["SQS_CLOCK_SKEW"]`` seconds of
the server's clock (15 minutes, as AWS), its body hashes to what was signed, and the
signature matches. ``host`` and ``x-amz-target`` (the action) must be among the signed
headers, so neither can be swapped on a captured request; a Query protocol request names
its action in its body, which is signed whole, and must sign ``host``.

Speed without a stale answer. Decrypting the secret (Fernet) and deriving the day's signing
key on every request costs more than the work most requests ask for, so a verified key's
signing keys are remembered per process (:class:`_Known`; never the secret itself). A
request verified that way gets a *provisional* :class:`Caller`: its signature is proven, but
whether the key is still active, its owner still active and still (or still not) a
superuser has yet to be read from the database. :func:`confirm` reads it (one indexed
EXISTS), or the queue look-up of the request does it in the same query
(:func:`still_valid`, used by :func:`pgq_django.sqs.lookup.prefetch`). Every request is
checked against the rows as they are now, so a revoked key or a deactivated owner is refused
on the very next request, in every process.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import threading
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any

from django.db.models import Exists
from django.utils import timezone

from ..api.recovery import drop_dead_connections
from ..conf import settings
from ..models import AccessKey
from . import sigv4
from .errors import SqsError

if TYPE_CHECKING:
    from .protocol import WireRequest

logger = logging.getLogger("pgq_django.sqs")

SERVICE = "sqs"
REQUIRED_SIGNED_HEADERS = ("host", "x-amz-target")
QUERY_SIGNED_HEADERS = ("host",)
# last_used_at is refreshed at most this often, so busy keys do not write on every call.
_TOUCH_INTERVAL = timedelta(seconds=60)
# Keys remembered per process; past this many the oldest is forgotten (it is looked up again).
_MAX_KNOWN = 1024
# Signing keys remembered per key: (day, region, service) scopes, oldest forgotten first.
_MAX_SCOPES = 8


@dataclass(frozen=True)
class Caller:
    """An authenticated request's key, its owner and the region the client signed for.

    ``confirmed`` is False while the key's row has not been read in this request (the
    signature was checked with a remembered signing key): nothing may be done for such a
    caller until :func:`confirm`, or a query filtered by :func:`still_valid`, says the key
    may still be used. ``user`` is then the owner as they were when the key was last read,
    a copy of its own for this request.
    """

    key_id: str
    user: Any
    region: str
    key_pk: int | None = None
    confirmed: bool = True


@dataclass
class _Known:
    """What a verified key's row said, remembered to check the next signatures quickly."""

    key_pk: int
    user: Any
    last_used_at: datetime | None
    signing_keys: dict[tuple[str, str, str], bytes] = field(default_factory=dict)


_known: dict[str, _Known] = {}
_known_lock = threading.Lock()


def _remember(key: AccessKey, scope: tuple[str, str, str], signing_key: bytes) -> None:
    with _known_lock:
        known = _known.get(key.key_id)
        if known is None or known.key_pk != key.pk:
            if len(_known) >= _MAX_KNOWN:
                _known.pop(next(iter(_known)))
            known = _known[key.key_id] = _Known(key.pk, key.user, key.last_used_at)
        known.user = key.user
        if len(known.signing_keys) >= _MAX_SCOPES:
            known.signing_keys.pop(next(iter(known.signing_keys)))
        known.signing_keys[scope] = signing_key


def forget(key_id: str) -> None:
    """Drop what this process remembers of a key (its next request reads the row again)."""
    with _known_lock:
        _known.pop(key_id, None)


def own_copy(user: Any) -> Any:
    """A copy of ``user`` for one request, so what a request caches on it (Django's
    permission caches) stays with that request: what ``copy.copy`` makes of a model
    instance (its fields and a copy of its ``_state``, from ``Model.__getstate__``), without
    the pickle protocol's detour through the app registry, which cost twice as much."""
    state = user.__getstate__()
    if "_memoryview_attrs" in state:  # a binary field: let copy.copy restore it
        return copy.copy(user)
    clone = user.__class__.__new__(user.__class__)
    clone.__dict__.update(state)
    return clone


def _raw_path(request: WireRequest) -> str:
    """The path exactly as the client sent it (still percent-encoded): what it signed."""
    raw = request.raw_path
    if isinstance(raw, bytes):
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise SqsError("SignatureDoesNotMatch", "The request path is not UTF-8.") from None
    return raw


def _request_time(request: WireRequest) -> tuple[str, datetime]:
    """The signed timestamp, as ``yyyymmddThhmmssZ`` and as a time: X-Amz-Date, or the Date
    header."""
    amz_date = request.header("x-amz-date")
    if amz_date:
        signed_at = sigv4.parse_amz_date(amz_date)
        if signed_at is None:
            raise SqsError(
                "IncompleteSignature", "X-Amz-Date must be an ISO 8601 basic-format UTC time."
            )
        return amz_date, signed_at
    date = request.header("date")
    if date:
        try:
            parsed = parsedate_to_datetime(date)
        except (TypeError, ValueError):
            parsed = None
        if parsed is not None and parsed.tzinfo is not None:
            signed_at = parsed.astimezone(UTC).replace(microsecond=0)
            return signed_at.strftime(sigv4.AMZ_DATE_FORMAT), signed_at
    raise SqsError("IncompleteSignature", "The request must carry an X-Amz-Date or Date header.")


def _check_clock(amz_date: str, signed_at: datetime, now: datetime) -> None:
    window = timedelta(seconds=float(settings.SQS_CLOCK_SKEW))
    if now - window <= signed_at <= now + window:
        return
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


def _payload_hash(request: WireRequest) -> str:
    computed = hashlib.sha256(request.body).hexdigest()
    claimed = request.header("x-amz-content-sha256")
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


def authenticate(request: WireRequest) -> Caller:
    """The verified caller of ``request``, or an SqsError.

    First drops a connection the server ended (a PostgreSQL restart), as the API does, so
    the key and queue look-ups of the request run on a live one.
    """
    drop_dead_connections()
    try:
        return _authenticate(request)
    except SqsError as exc:
        logger.info("event=sqs_auth_refused code=%s", exc.code)
        raise


def _authenticate(request: WireRequest) -> Caller:
    header = request.header("authorization")
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
    # A Query protocol request names its action in the body, which the signature covers.
    required = QUERY_SIGNED_HEADERS if request.is_query else REQUIRED_SIGNED_HEADERS
    for name in required:
        if name not in auth.signed_headers:
            raise SqsError("IncompleteSignature", f"The {name} header must be signed.")
    amz_date, signed_at = _request_time(request)
    if amz_date[:8] != auth.date:
        raise SqsError(
            "SignatureDoesNotMatch",
            f"Date in Credential scope ({auth.date}) does not match the request's date "
            f"({amz_date[:8]}).",
        )
    now = timezone.now()
    _check_clock(amz_date, signed_at, now)
    payload = _payload_hash(request)
    canonical = sigv4.canonical_request(
        method=request.method,
        raw_path=_raw_path(request),
        raw_query=request.query,
        header=request.header,
        signed_headers=auth.signed_headers,
        payload_hash=payload,
    )
    to_sign = sigv4.string_to_sign(amz_date, auth.scope, canonical)
    scope = (auth.date, auth.region, auth.service)
    known = _known.get(auth.key_id)
    signing_key = known.signing_keys.get(scope) if known is not None else None
    if (
        known is not None
        and signing_key is not None
        and sigv4.matches(sigv4.signature(signing_key, to_sign), auth.signature)
    ):
        return Caller(
            key_id=auth.key_id,
            user=own_copy(known.user),
            region=auth.region,
            key_pk=known.key_pk,
            confirmed=False,
        )
    # Not signed with this key's secret (or a row changed since): read it again.
    key = _find_key(auth.key_id)
    signing_key = sigv4.signing_key(key.secret, auth.date, auth.region, auth.service)
    if not sigv4.matches(sigv4.signature(signing_key, to_sign), auth.signature):
        raise SqsError(
            "SignatureDoesNotMatch",
            "The request signature we calculated does not match the signature you provided. "
            "Check your AWS Secret Access Key and signing method.",
        )
    _remember(key, scope, signing_key)
    caller = Caller(key_id=key.key_id, user=own_copy(key.user), region=auth.region, key_pk=key.pk)
    touch(caller, now)
    return caller


def still_valid(key_pk: Any, user: Any) -> Exists:
    """True while key ``key_pk`` is unrevoked and its owner active, and the owner is
    ``user``, with the same superuser flag (which decides rights)."""
    return Exists(
        AccessKey.objects.active().filter(
            pk=key_pk, user_id=user.pk, user__is_superuser=user.is_superuser
        )
    )


def confirm(caller: Caller, *, checked: bool = False) -> Caller:
    """The caller, once its key's row says it may still be used; InvalidClientTokenId if not.

    ``checked`` says a query filtered by :func:`still_valid` already answered yes in this
    request. Otherwise one EXISTS query answers; when it says no, the row is read again: a
    revoked key or an inactive owner is refused, a changed owner (a superuser flag flipped)
    is taken as the row says now.
    """
    if caller.confirmed:
        return caller
    now = timezone.now()
    if checked or AccessKey.objects.filter(still_valid(caller.key_pk, caller.user)).exists():
        confirmed = replace(caller, confirmed=True)
        touch(confirmed, now)
        return confirmed
    forget(caller.key_id)
    key = _find_key(caller.key_id)
    fresh = replace(caller, user=own_copy(key.user), key_pk=key.pk, confirmed=True)
    touch(fresh, now)
    return fresh


def touch(caller: Caller, now: datetime) -> None:
    """Record when a key was last used, at most once a minute per process (no write per call)."""
    if caller.key_pk is None:
        return
    known = _known.get(caller.key_id)
    last = known.last_used_at if known is not None else None
    if last is not None and now - last <= _TOUCH_INTERVAL:
        return
    if known is not None:
        known.last_used_at = now
    AccessKey.objects.filter(pk=caller.key_pk).update(last_used_at=now)
