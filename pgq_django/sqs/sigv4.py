"""AWS Signature Version 4, the server's half: rebuild what the client signed and compare.

Written from the published algorithm (and checked in tests against botocore's own signer on
many generated requests). A signature covers the canonical request (method, path, query,
the headers the client chose to sign, and the SHA-256 of the body) under a key derived from
the secret, the date, the region and the service, so a request cannot be altered, and
cannot be replayed with another body, without the secret.

Nothing here touches Django or the database: :mod:`.auth` supplies the request's parts and
the secret, and turns the outcome into an authenticated user.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import quote, unquote

from .errors import SqsError

ALGORITHM = "AWS4-HMAC-SHA256"
TERMINATOR = "aws4_request"
AMZ_DATE_FORMAT = "%Y%m%dT%H%M%SZ"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()

_CREDENTIAL_RE = re.compile(
    r"(?P<key_id>[A-Za-z0-9]{1,128})/(?P<date>[0-9]{8})/(?P<region>[a-z0-9-]{1,64})/"
    r"(?P<service>[a-z0-9-]{1,64})/(?P<terminator>[a-z0-9_]{1,32})"
)
_SIGNATURE_RE = re.compile(r"[0-9a-f]{64}")
_AMZ_DATE_RE = re.compile(r"([0-9]{4})([0-9]{2})([0-9]{2})T([0-9]{2})([0-9]{2})([0-9]{2})Z")
_HEADER_NAME_RE = re.compile(r"[a-z0-9!#$%&'*+.^_`|~-]+")
# The header exactly as SDKs write it, read with one expression; anything else (other
# spacing or order, or a mistake to report) goes through the general reading.
_USUAL_AUTHORIZATION_RE = re.compile(
    r"AWS4-HMAC-SHA256 Credential=([A-Za-z0-9]{1,128})/([0-9]{8})/([a-z0-9-]{1,64})/"
    r"([a-z0-9-]{1,64})/aws4_request, ?SignedHeaders=((?:[a-z0-9!#$%&'*+.^_`|~-]+;)*"
    r"[a-z0-9!#$%&'*+.^_`|~-]+), ?Signature=([0-9a-f]{64})"
)


@dataclass(frozen=True)
class Authorization:
    """The parts of an ``Authorization: AWS4-HMAC-SHA256 …`` header."""

    key_id: str
    date: str
    region: str
    service: str
    signed_headers: tuple[str, ...]
    signature: str

    @property
    def scope(self) -> str:
        return f"{self.date}/{self.region}/{self.service}/{TERMINATOR}"


def parse_amz_date(text: str) -> datetime | None:
    """The UTC time of an ``X-Amz-Date`` (``yyyymmddThhmmssZ``, exactly), or None. (Eight
    times faster than ``strptime``, which each request used to call twice.)"""
    found = _AMZ_DATE_RE.fullmatch(text)
    if found is None:
        return None
    try:
        year, month, day, hour, minute, second = (int(part) for part in found.groups())
        return datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    except ValueError:  # no such day or time
        return None


def _incomplete(message: str) -> SqsError:
    return SqsError("IncompleteSignature", message)


def parse_authorization(header: str) -> Authorization:
    """Read the Authorization header; anything malformed is IncompleteSignature."""
    usual = _USUAL_AUTHORIZATION_RE.fullmatch(header)
    if usual is not None:
        key_id, date, region, service, names, signature = usual.groups()
        signed = tuple(names.split(";"))
        if list(signed) == sorted(set(signed)):
            return Authorization(key_id, date, region, service, signed, signature)
    algorithm, _, rest = header.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise _incomplete(f"Only {ALGORITHM} signatures are accepted.")
    parts: dict[str, str] = {}
    for item in rest.split(","):
        name, sep, value = item.strip().partition("=")
        if not sep or name in parts:
            raise _incomplete("The Authorization header is malformed.")
        parts[name] = value.strip()
    if set(parts) != {"Credential", "SignedHeaders", "Signature"}:
        raise _incomplete(
            "The Authorization header must have exactly Credential, SignedHeaders and Signature."
        )
    credential = _CREDENTIAL_RE.fullmatch(parts["Credential"])
    if credential is None or credential["terminator"] != TERMINATOR:
        raise _incomplete("Credential must be <key id>/<yyyymmdd>/<region>/<service>/aws4_request.")
    signed = tuple(parts["SignedHeaders"].split(";"))
    if not all(_HEADER_NAME_RE.fullmatch(h) for h in signed) or list(signed) != sorted(set(signed)):
        raise _incomplete("SignedHeaders must be sorted, distinct, lower-case header names.")
    if not _SIGNATURE_RE.fullmatch(parts["Signature"]):
        raise _incomplete("Signature must be 64 lower-case hexadecimal digits.")
    return Authorization(
        key_id=credential["key_id"],
        date=credential["date"],
        region=credential["region"],
        service=credential["service"],
        signed_headers=signed,
        signature=parts["Signature"],
    )


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 dot-segment removal; AWS also drops empty segments (``//``)."""
    kept: list[str] = []
    for segment in path.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if kept:
                kept.pop()
        else:
            kept.append(segment)
    lead = "/" if path.startswith("/") else ""
    trail = "/" if path.endswith("/") and kept else ""
    return lead + "/".join(kept) + trail


@functools.lru_cache(maxsize=256)
def canonical_path(raw_path: str) -> str:
    """The path as signed: normalised, then percent-encoded once more (every AWS service but
    S3 signs the already-encoded path encoded again). Remembered for the few paths an
    endpoint sees (its URL and its queues' URLs): quoting cost as much as the HMAC."""
    if not raw_path:
        return "/"
    return quote(_remove_dot_segments(raw_path), safe="/~")


def canonical_query(raw_query: str) -> str:
    """Each name and value decoded, re-encoded with only unreserved characters left bare,
    then sorted by name and value."""
    pairs = []
    for item in raw_query.split("&"):
        if not item:
            continue
        name, _, value = item.partition("=")
        pairs.append((quote(unquote(name), safe="-_.~"), quote(unquote(value), safe="-_.~")))
    return "&".join(f"{name}={value}" for name, value in sorted(pairs))


def _trim_all(value: str) -> str:
    return " ".join(value.split())


def canonical_request(
    *,
    method: str,
    raw_path: str,
    raw_query: str,
    header: Callable[[str], str | None],
    signed_headers: tuple[str, ...],
    payload_hash: str,
) -> str:
    """The text whose hash is signed. ``header(name)`` answers a request header's value
    (several values joined by commas) or None; a signed header that is absent is an error."""
    lines = []
    for name in signed_headers:
        value = header(name)
        if value is None:
            raise SqsError(
                "SignatureDoesNotMatch", f"The signed header {name!r} is not in the request."
            )
        lines.append(f"{name}:{_trim_all(value)}")
    return "\n".join(
        [
            method.upper(),
            canonical_path(raw_path),
            canonical_query(raw_query),
            "\n".join(lines) + "\n",
            ";".join(signed_headers),
            payload_hash,
        ]
    )


def string_to_sign(amz_date: str, scope: str, canonical: str) -> str:
    digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    return f"{ALGORITHM}\n{amz_date}\n{scope}\n{digest}"


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode("utf-8"), hashlib.sha256).digest()


def signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    """The key a signature is made with, derived from the secret for one day and scope."""
    key = _hmac(f"AWS4{secret}".encode(), date)
    for part in (region, service, TERMINATOR):
        key = _hmac(key, part)
    return key


def signature(key: bytes, text: str) -> str:
    return hmac.new(key, text.encode("utf-8"), hashlib.sha256).hexdigest()


def matches(expected: str, given: str) -> bool:
    """Constant-time comparison, so timing does not reveal how much of a guess was right."""
    return hmac.compare_digest(expected.encode(), given.encode())
