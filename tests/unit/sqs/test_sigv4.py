"""Our SigV4 verifier agrees with botocore's own signer, and the digests with SQS's samples.

Hundreds of requests are generated (paths with unicode, spaces, dot segments and doubled
slashes, query strings, extra headers with odd spacing, empty and binary bodies), signed by
botocore's ``SigV4Auth`` exactly as an SDK signs them, and verified by
:mod:`pgq_django.sqs.sigv4` from the parts a server sees: the raw path and query of the URL,
the header values and the body. No database is needed.
"""

from __future__ import annotations

import datetime
import hashlib
import random
from typing import Any
from urllib.parse import quote, urlsplit

import botocore.auth
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.utils import percent_encode_sequence

from pgq_django.sqs import sigv4
from pgq_django.sqs.digests import md5_of_attributes, md5_of_body
from pgq_django.sqs.errors import SqsError

KEY_ID = "PGQEXAMPLEKEY0000001"
SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
NOW = datetime.datetime(2026, 3, 14, 15, 9, 26, tzinfo=datetime.UTC)

_SEGMENT_ALPHABET = "abcXYZ019-_.~ é€😀!$'()*,;=:@+%&"


@pytest.fixture(autouse=True)
def _fixed_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """botocore signs with the current time; pin it so failures reproduce."""
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: NOW)


def _segment(rng: random.Random) -> str:
    choice = rng.random()
    if choice < 0.08:
        return "."
    if choice < 0.14:
        return ".."
    if choice < 0.2:
        return ""
    return "".join(rng.choice(_SEGMENT_ALPHABET) for _ in range(rng.randint(1, 8)))


def _request(rng: random.Random) -> tuple[str, str, dict[str, str], bytes]:
    """A random request as botocore would send it: path and query already percent-encoded."""
    segments = [_segment(rng) for _ in range(rng.randint(0, 5))]
    path = "/" + "/".join(quote(s, safe="~") for s in segments)
    if rng.random() < 0.3:
        path += "/"
    query = ""
    if rng.random() < 0.6:
        params = [
            (
                "".join(rng.choice(_SEGMENT_ALPHABET) for _ in range(rng.randint(1, 6))),
                "".join(rng.choice(_SEGMENT_ALPHABET) for _ in range(rng.randint(0, 6))),
            )
            for _ in range(rng.randint(1, 4))
        ]
        query = "?" + percent_encode_sequence(params)
    headers = {
        "X-Amz-Target": rng.choice(["AmazonSQS.SendMessage", "AmazonSQS.ListQueues"]),
        "Content-Type": "application/x-amz-json-1.0",
    }
    for i in range(rng.randint(0, 3)):
        headers[f"X-Extra-{i}"] = rng.choice(["a  b", " padded ", "x,y", "tab\there", "plain"])
    body = rng.choice([b"", b"{}", '{"MessageBody": "h\u00e9"}'.encode(), bytes(range(256))])
    method = rng.choice(["POST", "POST", "GET", "PUT"])
    host = rng.choice(["127.0.0.1:8000", "sqs.example.test", "[::1]:9324"])
    return method, f"http://{host}{path}{query}", headers, body


def _sign(method: str, url: str, headers: dict[str, str], body: bytes, region: str) -> Any:
    request = AWSRequest(method=method, url=url, data=body, headers=headers)
    SigV4Auth(Credentials(KEY_ID, SECRET), "sqs", region).add_auth(request)
    return request


def _verify(request: Any, secret: str = SECRET) -> tuple[bool, str]:
    """What a server holding ``secret`` concludes, from what it receives."""
    prepared = request.prepare()
    auth = sigv4.parse_authorization(prepared.headers["Authorization"])
    url = urlsplit(prepared.url)
    received = {k.lower(): str(v) for k, v in prepared.headers.items()}
    received.setdefault("host", url.netloc)
    # An HTTP server hands over header values without surrounding whitespace.
    received = {k: v.strip() for k, v in received.items()}
    canonical = sigv4.canonical_request(
        method=prepared.method,
        raw_path=url.path,
        raw_query=url.query,
        header=lambda name: received.get(name.lower()),
        signed_headers=auth.signed_headers,
        payload_hash=hashlib.sha256(prepared.body or b"").hexdigest(),
    )
    expected = sigv4.signature(
        sigv4.signing_key(secret, auth.date, auth.region, auth.service),
        sigv4.string_to_sign(received["x-amz-date"], auth.scope, canonical),
    )
    return sigv4.matches(expected, auth.signature), canonical


@pytest.mark.parametrize("seed", range(300))
def test_verifier_accepts_what_botocore_signs(seed: int) -> None:
    rng = random.Random(seed)
    method, url, headers, body = _request(rng)
    region = rng.choice(["us-east-1", "eu-west-1", "ap-southeast-2"])
    request = _sign(method, url, headers, body, region)
    ok, canonical = _verify(request)
    assert ok, canonical
    # The same text botocore signed (its signer run again, without the header it added).
    authorization = request.headers["Authorization"]
    del request.headers["Authorization"]
    signer = SigV4Auth(Credentials(KEY_ID, SECRET), "sqs", region)
    assert canonical == signer.canonical_request(request)
    request.headers["Authorization"] = authorization


@pytest.mark.parametrize("seed", range(60))
def test_verifier_refuses_any_change_to_a_signed_request(seed: int) -> None:
    rng = random.Random(1000 + seed)
    method, url, headers, body = _request(rng)
    request = _sign(method, url, headers, body, "us-east-1")
    change = seed % 5
    if change == 0:
        request.data = (request.data or b"") + b" "
    elif change == 1:
        request.url = request.url.replace("://", "://x", 1)  # another host
    elif change == 2:
        request.headers.replace_header("X-Amz-Target", "AmazonSQS.DeleteQueue")
    elif change == 3:
        path = urlsplit(request.url)
        request.url = f"{path.scheme}://{path.netloc}{path.path}extra?{path.query}"
    else:
        assert not _verify(request, secret=SECRET + "x")[0]
        return
    assert not _verify(request)[0]


@pytest.mark.parametrize(
    "header",
    [
        "AWS4-HMAC-SHA1 Credential=K/20260314/us-east-1/sqs/aws4_request, "
        "SignedHeaders=host, Signature=" + "0" * 64,
        "AWS4-HMAC-SHA256 Credential=K/2026/us-east-1/sqs/aws4_request, "
        "SignedHeaders=host, Signature=" + "0" * 64,
        "AWS4-HMAC-SHA256 Credential=K/20260314/us-east-1/sqs/aws4_request, "
        "SignedHeaders=x-amz-date;host, Signature=" + "0" * 64,
        "AWS4-HMAC-SHA256 Credential=K/20260314/us-east-1/sqs/aws4_request, "
        "SignedHeaders=host, Signature=XYZ",
        "AWS4-HMAC-SHA256 Credential=K/20260314/us-east-1/sqs/aws4_request, SignedHeaders=host",
        "AWS4-HMAC-SHA256 garbage",
        "",
    ],
)
def test_malformed_authorization_headers_are_incomplete_signatures(header: str) -> None:
    with pytest.raises(SqsError) as caught:
        sigv4.parse_authorization(header)
    assert caught.value.code == "IncompleteSignature"


@pytest.mark.parametrize(
    "header",
    [
        "AWS4-HMAC-SHA256 Credential=AKID1/20260314/us-east-1/sqs/aws4_request, "
        "SignedHeaders=content-type;host;x-amz-date;x-amz-target, Signature=" + "ab" * 32,
        "AWS4-HMAC-SHA256 Credential=AKID1/20260314/eu-west-3/sqs/aws4_request,"
        "SignedHeaders=host;x-amz-target,Signature=" + "0" * 64,
        "  AWS4-HMAC-SHA256 Signature=" + "1" * 64 + " , SignedHeaders=host;x-amz-target, "
        "Credential=K/20260314/us-east-1/sqs/aws4_request ",
    ],
)
def test_the_usual_header_is_read_as_the_general_reading_reads_it(header: str) -> None:
    """SDKs' own layout is read by one expression; it must agree with the general reading,
    which takes any spacing and order."""
    general = sigv4.parse_authorization(" " + header + " ")  # never the one expression
    assert sigv4.parse_authorization(header) == general


@pytest.mark.parametrize(
    "names", ["x-amz-date;host", "host;host", "host;;x-amz-target", "Host;x-amz-target"]
)
def test_unsorted_repeated_or_empty_signed_header_names_are_refused_in_the_usual_layout(
    names: str,
) -> None:
    header = (
        "AWS4-HMAC-SHA256 Credential=K/20260314/us-east-1/sqs/aws4_request, "
        f"SignedHeaders={names}, Signature=" + "0" * 64
    )
    with pytest.raises(SqsError) as caught:
        sigv4.parse_authorization(header)
    assert caught.value.code == "IncompleteSignature"


def test_body_digest_is_the_md5_of_the_utf8_bytes() -> None:
    assert md5_of_body("hé") == hashlib.md5("hé".encode()).hexdigest()


def test_attribute_digests_match_the_samples_of_the_sqs_documentation() -> None:
    # The SQS developer guide's worked examples, also used by the AWS SDKs' own tests.
    strings = {
        "test_attribute_name_2": {"DataType": "String", "StringValue": "test_attribute_value_2"},
        "test_attribute_name_1": {"DataType": "String", "StringValue": "test_attribute_value_1"},
    }
    assert md5_of_attributes(strings) == "d53f3b558fe951154770f25cb63dbba9"
    binary = {
        "test_attribute_name": {"DataType": "Binary", "BinaryValue": "dGVzdF9hdHRyaWJ1dGVfdmFsdWU="}
    }
    assert md5_of_attributes(binary) == "23f6bd27ea87aab7dfeadcc9aebee495"
    assert md5_of_attributes({}) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("20261123T181800Z", datetime.datetime(2026, 11, 23, 18, 18, 0, tzinfo=datetime.UTC)),
        ("20240229T235959Z", datetime.datetime(2024, 2, 29, 23, 59, 59, tzinfo=datetime.UTC)),
        ("20230229T000000Z", None),  # no such day
        ("20261323T000000Z", None),  # no such month
        ("20261123T240000Z", None),
        ("20261123T235960Z", None),
        ("2026112T181800Z", None),  # a digit short
        ("20261123T181800", None),  # not UTC
        ("20261123 181800Z", None),
        ("\u0662\u0660\u0662\u06661123T181800Z", None),  # Arabic-Indic digits
        ("", None),
    ],
)
def test_amz_dates_are_read_exactly_in_their_one_format(text, expected):
    assert sigv4.parse_amz_date(text) == expected
