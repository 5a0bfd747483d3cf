"""Errors raised by pgq_django.

Every error is data: it carries a stable ``code``, a message and details, so each transport
maps them in one table of its own instead of with if-chains: the REST API's HTTP statuses
in :data:`pgq_django.rest.exceptions.HTTP_STATUS`, the SQS endpoint's error codes in
:data:`pgq_django.sqs.errors.PGQ_ERROR_CODES`. This module knows no transport.
"""

from __future__ import annotations

from typing import Any

from django.db import OperationalError, ProgrammingError


class PgqError(Exception):
    """Base class of every error pgq_django raises on purpose."""

    code = "pgq_error"
    default_message = "The request could not be processed."

    def __init__(self, message: str | None = None, **details: Any) -> None:
        self.message = message or self.default_message
        self.details = details
        super().__init__(self.message)

    def as_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "details": self.details}


class InvalidName(PgqError):
    code = "invalid_name"
    default_message = "The name is not valid."


class InvalidArgument(PgqError):
    """A parameter other than the message itself is out of range or of the wrong type."""

    code = "invalid_argument"
    default_message = "An argument is not valid."


class InvalidMessage(PgqError):
    code = "invalid_message"
    default_message = "The message body is not valid."


class MessageTooLarge(InvalidMessage):
    code = "message_too_large"
    default_message = "The message body is larger than the queue allows."


class QueueNotFound(PgqError):
    code = "queue_not_found"
    default_message = "The queue does not exist."

    @classmethod
    def for_name(cls, name: object) -> QueueNotFound:
        """The error for the queue called ``name``: one wording wherever a queue is missing."""
        return cls(f"Queue {str(name)!r} does not exist.", queue=str(name))


class QueueAlreadyExists(PgqError):
    code = "queue_already_exists"
    default_message = "A queue with this name already exists."


class ExchangeNotFound(PgqError):
    code = "exchange_not_found"
    default_message = "The exchange does not exist."

    @classmethod
    def for_name(cls, name: object) -> ExchangeNotFound:
        """The error for the exchange called ``name``, worded the same everywhere."""
        return cls(f"Exchange {str(name)!r} does not exist.", exchange=str(name))


class ExchangeAlreadyExists(PgqError):
    code = "exchange_already_exists"
    default_message = "An exchange with this name already exists."


class ExchangeInUse(PgqError):
    """drop_exchange(cascade=False) on an exchange that still has queues bound to it."""

    code = "exchange_in_use"
    default_message = "Queues are still bound to the exchange."


class MessageNotFound(PgqError):
    """A message id that is not in the queue (REST answers 404; the Python API returns False)."""

    code = "message_not_found"
    default_message = "The message does not exist."


class StaleReceipt(PgqError):
    """A receipt of a lease that has expired and been re-leased since (REST answers 409)."""

    code = "stale_receipt"
    default_message = "The message was delivered again since this receipt was issued."


class SubscriptionNotFound(PgqError):
    code = "subscription_not_found"
    default_message = "The subscription does not exist."


class SubscriptionAlreadyExists(PgqError):
    code = "subscription_already_exists"
    default_message = "A subscription with this id or route already exists."


class PermissionDenied(PgqError):
    code = "permission_denied"
    default_message = "You do not have permission to do this."


class QueuePaused(PgqError):
    code = "queue_paused"
    default_message = "The queue is paused; resume it to read messages."

    @classmethod
    def for_name(cls, name: object) -> QueuePaused:
        return cls(f"Queue {str(name)!r} is paused.", queue=str(name))


class QueueFull(PgqError):
    code = "queue_full"
    default_message = "The queue holds its maximum number of messages."


class RejectMessage(PgqError):
    """Raised by a handler to fail its message for good: no retry, no dead-letter queue.

    The worker archives the message as ``dead`` with this error's text, at once. The tasks
    backend raises it for a message it must never run (unsigned, or naming no known task),
    because retrying such a message could only fail again.
    """

    code = "message_rejected"
    default_message = "The message was rejected by its handler."


class ConnectionLost(PgqError, OperationalError):
    """The database connection broke while an operation that must not run twice was running.

    Whether it took effect is unknown (see :mod:`pgq_django.api.recovery`). The connection has
    been replaced, so the next call works. It is also a Django ``OperationalError``, so code
    that already catches database errors keeps catching it.
    """

    code = "connection_lost"
    default_message = "The connection to the database was lost; the outcome is unknown."


class DatabaseUnavailable(ConnectionLost):
    """PostgreSQL cannot be reached: the connection could not be made, so nothing was sent.

    During an outage a process tries to reconnect with back-off, once per round for all its
    threads (:mod:`pgq_django.store.availability`); a call that would need a connection
    between two rounds fails at once with this error instead of waiting. Safe to retry
    later, whatever the operation. A :class:`ConnectionLost` (and a Django
    ``OperationalError``), so code that catches either keeps catching it.
    """

    code = "database_unavailable"
    default_message = "The database cannot be reached; nothing was done."


class NotMigrated(PgqError, ProgrammingError):
    """pgq_django's tables are not in the database: ``manage.py migrate`` has not run there.

    Raised instead of PostgreSQL's bare ``relation "pgq_…" does not exist``, which names a
    table but not the command that creates it. It is also a Django ``ProgrammingError``
    (what the statement raised), so code that already catches database errors keeps
    catching it. A server-side fault, not bad input: 503 over REST (and ``InternalError``
    over SQS, in that endpoint's table).
    """

    code = "not_migrated"
    default_message = "pgq_django's tables are missing: run `python manage.py migrate`."


class GroupNotFound(PgqError):
    code = "group_not_found"
    default_message = "The group does not exist."

    @classmethod
    def for_id(cls, group_id: object) -> GroupNotFound:
        return cls(f"Group {group_id} does not exist (or was pruned).", group=group_id)


class ScheduleNotFound(PgqError):
    code = "schedule_not_found"
    default_message = "The schedule does not exist."

    @classmethod
    def for_name(cls, name: object) -> ScheduleNotFound:
        return cls(f"Schedule {name!r} does not exist.", schedule=name)


class TooManySchedules(PgqError):
    """A queue has as many schedules as ``PGQ["SCHEDULES_PER_QUEUE"]`` allows: the leader
    sends every schedule's ticks, so the number it must walk each second is bounded."""

    code = "too_many_schedules"
    default_message = "The queue has as many schedules as it may have."


class RequestTimeout(PgqError):
    """``pgq.request`` got no reply in time. The request was cancelled, and a reply that
    comes later expires unread: nothing of the request is left to a later caller."""

    code = "request_timeout"
    default_message = "No reply arrived in time."


__all__ = [
    "ConnectionLost",
    "DatabaseUnavailable",
    "ExchangeAlreadyExists",
    "ExchangeInUse",
    "ExchangeNotFound",
    "GroupNotFound",
    "InvalidArgument",
    "InvalidMessage",
    "InvalidName",
    "MessageNotFound",
    "MessageTooLarge",
    "NotMigrated",
    "PermissionDenied",
    "PgqError",
    "QueueAlreadyExists",
    "QueueFull",
    "QueueNotFound",
    "QueuePaused",
    "RejectMessage",
    "RequestTimeout",
    "ScheduleNotFound",
    "StaleReceipt",
    "SubscriptionAlreadyExists",
    "SubscriptionNotFound",
    "TooManySchedules",
]
