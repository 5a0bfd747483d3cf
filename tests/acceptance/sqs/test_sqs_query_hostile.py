"""Query-protocol forms crafted to break the parser, signed and posted over real HTTP: each
answers 400 InvalidParameterValue in XML that parses, and changes nothing."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest
import urllib3
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from defusedxml import ElementTree

import pgq_django as pgq
from pgq_django.models import AccessKey

NS = "{http://queue.amazonaws.com/doc/2012-11-05/}"


def _post_form(endpoint: str, user: Any, body: bytes) -> tuple[int, Any]:
    """POST a signed Query form; the status and the parsed XML answer."""
    key, secret = AccessKey.objects.create_key(user)
    request = AWSRequest(
        method="POST",
        url=endpoint,
        data=body,
        headers={"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"},
    )
    SigV4Auth(Credentials(key.key_id, secret), "sqs", "us-east-1").add_auth(request)
    prepared = request.prepare()
    response = urllib3.request(
        "POST", prepared.url, body=body, headers=dict(prepared.headers), retries=False
    )
    return response.status, ElementTree.fromstring(response.data)


def _forms(queue: str) -> dict[str, bytes]:
    base = f"Version=2012-11-05&QueueUrl={quote(queue)}"
    nested = "SendMessageBatchRequestEntry.1." * 3000
    return {
        "a list index of 5,000 digits": (
            f"Action=SendMessage&{base}&MessageBody=x&MessageAttribute.{'9' * 5000}.Name=n"
            f"&MessageAttribute.{'9' * 5000}.Value.DataType=String"
            f"&MessageAttribute.{'9' * 5000}.Value.StringValue=v"
        ).encode(),
        "entries nested 3,000 deep": (
            f"Action=SendMessageBatch&{base}&{nested}Id=a&{nested}MessageBody=x"
        ).encode(),
        "a control character in Action": f"Action=Send%01Message&{base}&MessageBody=x".encode(),
        "a control character in a name": f"Action=SendMessage&{base}&Message%0BBody=x".encode(),
    }


@pytest.mark.parametrize(
    "form",
    [
        "a list index of 5,000 digits",
        "entries nested 3,000 deep",
        "a control character in Action",
        "a control character in a name",
    ],
)
def test_a_hostile_query_form_is_a_400_in_xml_that_parses(
    sqs_endpoint: str, user: Any, new_name: Any, form: str
) -> None:
    name = new_name()
    pgq.create_queue(name, owner=user)
    pgq.send(name, "kept")
    status, answer = _post_form(sqs_endpoint, user, _forms(name)[form])
    assert status == 400
    assert answer.tag == NS + "ErrorResponse"
    assert answer.find(f"{NS}Error/{NS}Type").text == "Sender"
    assert answer.find(f"{NS}Error/{NS}Code").text == "InvalidParameterValue"
    assert answer.find(f"{NS}Error/{NS}Message").text
    assert [m.message for m in pgq.read(name, qty=10)] == ["kept"]
