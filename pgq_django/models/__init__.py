from .messages import ArchivedMessage, Message, Outcome, QueueCounter, Receipt
from .queues import QUEUE_NAME_PATTERN, Backoff, Queue

__all__ = [
    "QUEUE_NAME_PATTERN",
    "ArchivedMessage",
    "Backoff",
    "Message",
    "Outcome",
    "Queue",
    "QueueCounter",
    "Receipt",
]
