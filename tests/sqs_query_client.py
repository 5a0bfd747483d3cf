"""Run SQS calls with a botocore that speaks the Query protocol, and print what came back.

Run by tests/acceptance/sqs/test_sqs_query.py with the Python of ``.venv-query`` (``make
query-client``: botocore 1.31.0, a release whose SQS model is the Query protocol's), so it
imports nothing of the project and no Django. It reads one JSON object on stdin::

    {"endpoint": …, "region": …, "key": …, "secret": …, "calls": [[operation, params], …]}

and prints one JSON list: per call ``{"ok": response}`` or ``{"error": {"code", "message",
"status", "exception"}}``. Bytes travel as ``{"$bytes": "<base64>"}`` both ways.
"""

from __future__ import annotations

import base64
import json
import sys
from typing import Any

import botocore.session
from botocore.config import Config
from botocore.exceptions import ClientError


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"$bytes"}:
            return base64.b64decode(value["$bytes"])
        return {key: _decode(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_decode(item) for item in value]
    return value


def _encode(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"$bytes": base64.b64encode(value).decode()}
    if isinstance(value, dict):
        return {key: _encode(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_encode(item) for item in value]
    return value


def main() -> None:
    job = json.load(sys.stdin)
    session = botocore.session.get_session()
    client = session.create_client(
        "sqs",
        region_name=job["region"],
        endpoint_url=job["endpoint"],
        aws_access_key_id=job["key"],
        aws_secret_access_key=job["secret"],
        config=Config(retries={"total_max_attempts": 1}, read_timeout=60),
    )
    assert client.meta.service_model.protocol == "query", client.meta.service_model.protocol
    results = []
    for operation, params in job["calls"]:
        method = getattr(client, operation)
        try:
            response = method(**_decode(params))
        except ClientError as exc:
            error = exc.response.get("Error", {})
            results.append(
                {
                    "error": {
                        "code": error.get("Code"),
                        "message": error.get("Message"),
                        "status": exc.response["ResponseMetadata"]["HTTPStatusCode"],
                        "exception": type(exc).__name__,
                    }
                }
            )
            continue
        response.pop("ResponseMetadata", None)
        results.append({"ok": _encode(response)})
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
