"""A queue whose stored rate_limit is out of bounds (raw SQL, an older release) answers an
SQS ReceiveMessage as any limited queue does, never InternalError. (SQS has no rate limit
attribute: the setting is made through the Python API, REST or the admin, which refuse
such a value.)"""

from __future__ import annotations

from typing import Any

from django.db import connection

import pgq_django as pgq


def test_sqs_receive_of_a_queue_with_a_stored_subnormal_rate_answers(
    sqs: Any, new_name: Any, user: Any
) -> None:
    name = new_name()
    queue = pgq.create_queue(name, owner=user)
    pgq.send_batch(name, ["a", "b"])
    with connection.cursor() as cursor:
        cursor.execute("UPDATE pgq_queue SET rate_limit = 5e-324 WHERE id = %s", [queue.id])
    url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
    first = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)
    second = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)
    assert [m["Body"] for m in first["Messages"]] == ["a"]
    assert "Messages" not in second
