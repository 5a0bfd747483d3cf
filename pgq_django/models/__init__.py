from .dashboard import QueueDashboard
from .exchanges import Binding, Exchange, ExchangeType
from .grants import AccessKey, ExchangeGrant, QueueGrant
from .messages import ArchivedMessage, Message, Outcome, QueueCounter, Receipt
from .queues import QUEUE_NAME_PATTERN, Backoff, DroppedQueue, Queue
from .schedules import Schedule
from .spark import SparkExport
from .workflows import Dependency, WorkflowGroup

__all__ = [
    "QUEUE_NAME_PATTERN",
    "AccessKey",
    "ArchivedMessage",
    "Backoff",
    "Binding",
    "Dependency",
    "DroppedQueue",
    "Exchange",
    "ExchangeGrant",
    "ExchangeType",
    "Message",
    "Outcome",
    "Queue",
    "QueueCounter",
    "QueueDashboard",
    "QueueGrant",
    "Receipt",
    "Schedule",
    "SparkExport",
    "WorkflowGroup",
]
