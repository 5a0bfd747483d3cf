"""The pieces of SigV4 one at a time, each against botocore's signer (the reference an SDK
uses) and against AWS's published worked examples.

:mod:`tests.unit.sqs.test_sigv4` checks whole generated requests end to end; these tests pin
each step so that a failure there says which step broke.
"""

from __future__ import annotations

import hashlib
from urllib.parse import quote

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.utils import percent_encode_sequence
from hypothesis import given, settings
from hypothesis import strategies as st

from pgq_django.sqs import sigv4
from pgq_django.sqs.errors import SqsError

QUICK = settings(database=None, max_examples=150, deadline=None)
SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"  # AWS's documentation example secret
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)


def _botocore(region: str = "us-east-1", service: str = "sqs") -> SigV4Auth:
    return SigV4Auth(Credentials("AKIDEXAMPLE", SECRET), service, region)


# -- canonical path and query ---------------------------------------------------------------


@given(st.lists(st.one_of(TEXT, st.sampled_from([".", "..", ""])), max_size=6), st.booleans())
@QUICK
def test_canonical_path_is_botocores_for_any_encoded_path(segments, trailing) -> None:
    raw = "/" + "/".join(quote(s, safe="~") for s in segments) + ("/" if trailing else "")
    assert sigv4.canonical_path(raw) == _botocore()._normalize_url_path(raw)


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("", "/"),
        ("/", "/"),
        ("/a/./b/../c", "/a/c"),
        ("//a//b//", "/a/b/"),
        ("/..", "/"),
        ("/../a/", "/a/"),
        ("/a/..", "/"),
        ("/q%20name", "/q%2520name"),  # every service but S3 encodes the encoded path again
        ("/caf%C3%A9", "/caf%25C3%25A9"),
        ("/~user/x", "/~user/x"),
    ],
)
def test_canonical_path_normalises_then_encodes_the_path_again(raw: str, canonical: str) -> None:
    assert sigv4.canonical_path(raw) == canonical


@given(st.lists(st.tuples(TEXT, TEXT), max_size=5))
@QUICK
def test_canonical_query_is_botocores_for_any_parameters(params) -> None:
    raw = percent_encode_sequence(params)
    assert sigv4.canonical_query(raw) == _botocore()._canonical_query_string_params(params)


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("", ""),
        ("b=2&a=1", "a=1&b=2"),
        ("a=2&a=1&a=10", "a=1&a=10&a=2"),  # repeated names sorted by value, as text
        ("flag", "flag="),
        ("a=1&&b=2&", "a=1&b=2"),
        (
            "x=a%20b&y=a+b",
            "x=a%20b&y=a%2Bb",
        ),  # percent-decoding, not form-decoding: "+" stays a plus
        ("n=%7e%2d", "n=~-"),  # unreserved characters are left bare
        ("k=%c3%a9", "k=%C3%A9"),  # hex digits upper-cased
    ],
)
def test_canonical_query_decodes_reencodes_and_sorts(raw: str, canonical: str) -> None:
    assert sigv4.canonical_query(raw) == canonical


# -- canonical request ----------------------------------------------------------------------


def _canonical(headers: dict[str, str], signed: tuple[str, ...], body: bytes = b"") -> str:
    return sigv4.canonical_request(
        method="post",
        raw_path="/",
        raw_query="",
        header=lambda name: headers.get(name),
        signed_headers=signed,
        payload_hash=hashlib.sha256(body).hexdigest(),
    )


def test_canonical_request_has_the_six_parts_in_order_with_trimmed_header_values() -> None:
    text = _canonical(
        {"host": "h", "x-amz-date": "  20260314T150926Z ", "x-a": "a   b\t c"},
        ("host", "x-a", "x-amz-date"),
    )
    assert text.split("\n") == [
        "POST",
        "/",
        "",
        "host:h",
        "x-a:a b c",
        "x-amz-date:20260314T150926Z",
        "",
        "host;x-a;x-amz-date",
        sigv4.EMPTY_SHA256,
    ]


def test_a_signed_header_missing_from_the_request_is_a_signature_mismatch() -> None:
    with pytest.raises(SqsError) as caught:
        _canonical({"host": "h"}, ("host", "x-amz-target"))
    assert caught.value.code == "SignatureDoesNotMatch"
    assert "'x-amz-target'" in caught.value.message


def test_a_signed_header_present_but_empty_is_signed_as_empty() -> None:
    assert "x-amz-target:\n" in _canonical(
        {"host": "h", "x-amz-target": ""}, ("host", "x-amz-target")
    )


# -- keys, strings to sign, signatures ------------------------------------------------------


def test_the_signing_key_is_the_one_the_aws_documentation_derives() -> None:
    """ "Examples of how to derive a signing key for Signature Version 4" (AWS General
    Reference): 20120215, us-east-1, iam."""
    key = sigv4.signing_key(SECRET, "20120215", "us-east-1", "iam")
    assert key.hex() == "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d"


def test_get_vanilla_of_the_aws_signature_v4_test_suite() -> None:
    """The suite's first case: GET / to example.amazonaws.com, service "service"."""
    canonical = sigv4.canonical_request(
        method="GET",
        raw_path="/",
        raw_query="",
        header={"host": "example.amazonaws.com", "x-amz-date": "20150830T123600Z"}.get,
        signed_headers=("host", "x-amz-date"),
        payload_hash=sigv4.EMPTY_SHA256,
    )
    scope = "20150830/us-east-1/service/aws4_request"
    to_sign = sigv4.string_to_sign("20150830T123600Z", scope, canonical)
    assert to_sign.split("\n")[3] == (
        "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63"
    )
    key = sigv4.signing_key(SECRET, "20150830", "us-east-1", "service")
    assert sigv4.signature(key, to_sign) == (
        "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
    )


@pytest.mark.parametrize(
    ("region", "service", "amz_date"),
    [("us-east-1", "sqs", "20260314T150926Z"), ("eu-west-3", "sqs", "20240229T000000Z")],
)
def test_string_to_sign_and_signature_are_botocores(region, service, amz_date) -> None:
    request = AWSRequest(method="POST", url="http://h/", data=b"{}", headers={"Host": "h"})
    request.context["timestamp"] = amz_date
    signer = _botocore(region, service)
    canonical = "POST\n/\n\nhost:h\n\nhost\n" + hashlib.sha256(b"{}").hexdigest()
    scope = f"{amz_date[:8]}/{region}/{service}/aws4_request"
    ours = sigv4.string_to_sign(amz_date, scope, canonical)
    assert ours == signer.string_to_sign(request, canonical)
    key = sigv4.signing_key(SECRET, amz_date[:8], region, service)
    assert sigv4.signature(key, ours) == signer.signature(ours, request)


def test_a_signature_depends_on_every_part_of_the_scope() -> None:
    keys = {
        sigv4.signing_key(SECRET, "20260314", "us-east-1", "sqs"),
        sigv4.signing_key(SECRET, "20260315", "us-east-1", "sqs"),
        sigv4.signing_key(SECRET, "20260314", "us-east-2", "sqs"),
        sigv4.signing_key(SECRET, "20260314", "us-east-1", "sns"),
        sigv4.signing_key(SECRET + "x", "20260314", "us-east-1", "sqs"),
    }
    assert len(keys) == 5


@pytest.mark.parametrize(
    ("expected", "given", "same"),
    [("ab" * 32, "ab" * 32, True), ("ab" * 32, "ab" * 31, False), ("ab" * 32, "AB" * 32, False)],
)
def test_matches_compares_exactly(expected: str, given: str, same: bool) -> None:
    assert sigv4.matches(expected, given) is same


# -- the Authorization header ---------------------------------------------------------------


def test_the_authorization_header_is_read_into_its_parts_and_scope() -> None:
    header = (
        "AWS4-HMAC-SHA256 Credential=AKID1/20260314/eu-west-1/sqs/aws4_request, "
        "SignedHeaders=content-type;host;x-amz-date, Signature=" + "0f" * 32
    )
    auth = sigv4.parse_authorization(header)
    assert auth == sigv4.Authorization(
        key_id="AKID1",
        date="20260314",
        region="eu-west-1",
        service="sqs",
        signed_headers=("content-type", "host", "x-amz-date"),
        signature="0f" * 32,
    )
    assert auth.scope == "20260314/eu-west-1/sqs/aws4_request"


@pytest.mark.parametrize(
    ("header", "message"),
    [
        (
            "AWS4-HMAC-SHA256 Credential=K/20260314/r/sqs/aws4_request, "
            "Credential=K/20260314/r/sqs/aws4_request, SignedHeaders=host, Signature=" + "0" * 64,
            "malformed",
        ),
        (
            "AWS4-HMAC-SHA256 Credential=K/20260314/r/sqs/aws4_request, SignedHeaders=host, "
            "Signature=" + "0" * 64 + ", Extra=1",
            "exactly Credential, SignedHeaders and Signature",
        ),
        (
            "AWS4-HMAC-SHA256 Credential=K/20260314/r/sqs/aws5_request, SignedHeaders=host, "
            "Signature=" + "0" * 64,
            "Credential must be",
        ),
        (
            "AWS4-HMAC-SHA256 Credential=K/20260314/r/sqs/aws4_request, SignedHeaders=host, "
            "Signature=" + "A" * 64,
            "64 lower-case hexadecimal digits",
        ),
        (
            "AWS4-HMAC-SHA256 Credential=K-1/20260314/r/sqs/aws4_request, SignedHeaders=host, "
            "Signature=" + "0" * 64,
            "Credential must be",
        ),
        ("Bearer abc", "Only AWS4-HMAC-SHA256"),
    ],
)
def test_each_malformed_part_is_named_in_the_incomplete_signature_error(header, message):
    with pytest.raises(SqsError) as caught:
        sigv4.parse_authorization(header)
    assert caught.value.code == "IncompleteSignature"
    assert message in caught.value.message
