"""The floor of bench/sqs.py: an ASGI app that answers every call with a fixed answer.

It reads the request and sends back, for the benchmark's own calls, exactly what the real
endpoint would answer (ten message ids with the MD5 digests boto3 checks, ten receipts, ten
deleted entries), with no signature check, no database and no JSON decoding. Timing boto3
against it measures what the client side and the HTTP server cost alone: no endpoint can
answer faster, so the benchmark's ratio for this contender is the floor any endpoint's ratio
stands on.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

from .sqs import BATCH, BODY

_MD5 = hashlib.md5(BODY.encode()).hexdigest()
_ANSWERS: dict[bytes, bytes] = {
    b"AmazonSQS.SendMessageBatch": json.dumps(
        {
            "Successful": [
                {"Id": str(i), "MessageId": str(1000 + i), "MD5OfMessageBody": _MD5}
                for i in range(BATCH)
            ],
            "Failed": [],
        }
    ).encode(),
    b"AmazonSQS.ReceiveMessage": json.dumps(
        {
            "Messages": [
                {
                    "MessageId": str(1000 + i),
                    "ReceiptHandle": f"{1000 + i}:1",
                    "MD5OfBody": _MD5,
                    "Body": BODY,
                }
                for i in range(BATCH)
            ]
        }
    ).encode(),
    b"AmazonSQS.DeleteMessageBatch": json.dumps(
        {"Successful": [{"Id": str(i)} for i in range(BATCH)], "Failed": []}
    ).encode(),
}


async def application(
    scope: dict[str, Any],
    receive: Callable[[], Awaitable[dict[str, Any]]],
    send: Callable[[dict[str, Any]], Awaitable[None]],
) -> None:
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    target = dict(scope["headers"]).get(b"x-amz-target", b"")
    body = _ANSWERS.get(target, b"{}")
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", b"application/x-amz-json-1.0"),
                (b"content-length", str(len(body)).encode()),
                (b"x-amzn-requestid", b"00000000-0000-0000-0000-000000000000"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
