"""SQS CreateQueue of a name differing only in case from an existing queue (one queue to
PGMQ's clients) is refused, and nothing is created. (SQS itself tells such names apart:
a deliberate difference, listed in docs/sqs.md.)"""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

import pgq_django as pgq


def test_sqs_create_queue_refuses_a_name_differing_only_in_case(
    sqs: Any, new_name: Any, user: Any
) -> None:
    name = new_name()
    pgq.create_queue(name, owner=user)
    with pytest.raises(ClientError) as refused:
        sqs.create_queue(QueueName=name.upper())
    assert refused.value.response["Error"]["Code"] == "QueueAlreadyExists"
    assert "only in case" in refused.value.response["Error"]["Message"]
    assert [q.name for q in pgq.Queue.objects.filter(name__iexact=name)] == [name]
