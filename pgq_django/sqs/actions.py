"""Which function answers which SQS action.

ReceiveMessage is not in :data:`ACTIONS`: it may wait, so the view runs it in two halves
(:mod:`.receiving`). The actions SQS has and pgq_django does not offer answer
UnsupportedOperation; any other name answers InvalidAction.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import acks, queues, sending
from .params import Call

Action = Callable[[Call], dict[str, Any]]

ACTIONS: dict[str, Action] = {
    "CreateQueue": queues.create_queue,
    "GetQueueUrl": queues.get_queue_url,
    "ListQueues": queues.list_queues,
    "DeleteQueue": queues.delete_queue,
    "PurgeQueue": queues.purge_queue,
    "GetQueueAttributes": queues.get_queue_attributes,
    "SetQueueAttributes": queues.set_queue_attributes,
    "TagQueue": queues.tag_queue,
    "UntagQueue": queues.untag_queue,
    "ListQueueTags": queues.list_queue_tags,
    "ListDeadLetterSourceQueues": queues.list_dead_letter_source_queues,
    "StartMessageMoveTask": queues.start_message_move_task,
    "SendMessage": sending.send_message,
    "SendMessageBatch": sending.send_message_batch,
    "DeleteMessage": acks.delete_message,
    "DeleteMessageBatch": acks.delete_message_batch,
    "ChangeMessageVisibility": acks.change_message_visibility,
    "ChangeMessageVisibilityBatch": acks.change_message_visibility_batch,
}
RECEIVE = "ReceiveMessage"

# The right the hot actions need on their QueueUrl's queue: the view looks the queue up with
# that right and the caller's key in one query (queues.prefetch) before the action runs.
QUEUE_RIGHTS: dict[str, str] = {
    "SendMessage": "write",
    "SendMessageBatch": "write",
    RECEIVE: "read",
    "DeleteMessage": "read",
    "DeleteMessageBatch": "read",
    "ChangeMessageVisibility": "read",
    "ChangeMessageVisibilityBatch": "read",
}

# SQS actions pgq_django does not implement (IAM-style policies, asynchronous move tasks).
UNSUPPORTED = frozenset(
    {"AddPermission", "RemovePermission", "CancelMessageMoveTask", "ListMessageMoveTasks"}
)
