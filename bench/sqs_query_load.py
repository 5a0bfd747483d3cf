"""One round of bench/sqs_peers.py through the Query protocol, with botocore 1.31.0.

Run with the Python of ``.venv-query`` (``make query-client``), so it imports nothing of
the project. It reads ``{"endpoint", "key", "secret", "queue_url", "case", "n"}`` as JSON
on stdin, makes the client (untimed), runs ``n`` calls of the case and prints the seconds
they took.
"""

from __future__ import annotations

import json
import sys
import time

import botocore.session
from botocore.config import Config

BATCH = 10
BODY = json.dumps({"event": "order.created", "order_id": 12345, "note": "x" * 64})


def main() -> None:
    job = json.load(sys.stdin)
    sqs = botocore.session.get_session().create_client(
        "sqs",
        region_name="us-east-1",
        endpoint_url=job["endpoint"],
        aws_access_key_id=job["key"],
        aws_secret_access_key=job["secret"],
        config=Config(retries={"total_max_attempts": 1}),
    )
    assert sqs.meta.service_model.protocol == "query"
    url, case, n = job["queue_url"], job["case"], job["n"]
    entries = [{"Id": str(i), "MessageBody": BODY} for i in range(BATCH)]
    start = time.perf_counter()
    for _ in range(n):
        if case == "SendMessage":
            sqs.send_message(QueueUrl=url, MessageBody=BODY)
        elif case.startswith("SendMessageBatch"):
            sqs.send_message_batch(QueueUrl=url, Entries=entries)
        else:
            got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=BATCH)
            handles = [
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                for i, m in enumerate(got.get("Messages", []))
            ]
            if handles:
                sqs.delete_message_batch(QueueUrl=url, Entries=handles)
    print(time.perf_counter() - start)


if __name__ == "__main__":
    main()
