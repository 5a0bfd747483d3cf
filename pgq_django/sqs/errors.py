"""SQS error codes, and the one table that turns a PgqError into an SQS error.

SQS moved from its XML "query" protocol to AWS JSON 1.0 keeping its old error codes: an error
response carries the modelled error's shape name in the body (``"__type":
"com.amazonaws.sqs#QueueDoesNotExist"``) and the old code in the ``x-amzn-query-error``
header (``AWS.SimpleQueueService.NonExistentQueue;Sender``). botocore reads both: the header's
code becomes ``ClientError.response["Error"]["Code"]`` and the shape name picks the exception
class (``client.exceptions.QueueDoesNotExist``), so we send both, as SQS does.
"""

from __future__ import annotations

from typing import NamedTuple

from ..exceptions import (
    DatabaseUnavailable,
    MessageNotFound,
    NotMigrated,
    PermissionDenied,
    PgqError,
    QueueAlreadyExists,
    QueueFull,
    QueueNotFound,
    QueuePaused,
    StaleReceipt,
)


class ErrorKind(NamedTuple):
    """How SQS reports one error code: the modelled shape (None if unmodelled) and status."""

    shape: str | None
    status: int


# Query-protocol code -> (shape in the SQS model, HTTP status). The modelled ones are the
# error shapes of botocore's data/sqs/2012-11-05/service-2.json; the others are SQS's
# common errors, which SDKs surface as a plain ClientError with that code.
ERRORS: dict[str, ErrorKind] = {
    "AWS.SimpleQueueService.NonExistentQueue": ErrorKind("QueueDoesNotExist", 400),
    "QueueAlreadyExists": ErrorKind("QueueNameExists", 400),
    "AWS.SimpleQueueService.QueueDeletedRecently": ErrorKind("QueueDeletedRecently", 400),
    "ReceiptHandleIsInvalid": ErrorKind("ReceiptHandleIsInvalid", 400),
    "AWS.SimpleQueueService.MessageNotInflight": ErrorKind("MessageNotInflight", 400),
    "InvalidAttributeName": ErrorKind("InvalidAttributeName", 400),
    "InvalidAttributeValue": ErrorKind("InvalidAttributeValue", 400),
    "InvalidMessageContents": ErrorKind("InvalidMessageContents", 400),
    "AWS.SimpleQueueService.TooManyEntriesInBatchRequest": ErrorKind(
        "TooManyEntriesInBatchRequest", 400
    ),
    "AWS.SimpleQueueService.BatchEntryIdsNotDistinct": ErrorKind("BatchEntryIdsNotDistinct", 400),
    "AWS.SimpleQueueService.EmptyBatchRequest": ErrorKind("EmptyBatchRequest", 400),
    "AWS.SimpleQueueService.InvalidBatchEntryId": ErrorKind("InvalidBatchEntryId", 400),
    "AWS.SimpleQueueService.BatchRequestTooLong": ErrorKind("BatchRequestTooLong", 400),
    "AWS.SimpleQueueService.UnsupportedOperation": ErrorKind("UnsupportedOperation", 400),
    "AWS.SimpleQueueService.PurgeQueueInProgress": ErrorKind("PurgeQueueInProgress", 403),
    "OverLimit": ErrorKind("OverLimit", 403),
    "InvalidAddress": ErrorKind("InvalidAddress", 404),
    "ResourceNotFoundException": ErrorKind("ResourceNotFoundException", 404),
    # Common errors, not modelled.
    "InvalidParameterValue": ErrorKind(None, 400),
    "MissingParameter": ErrorKind(None, 400),
    "InvalidAction": ErrorKind(None, 400),
    "SerializationException": ErrorKind(None, 400),
    "AccessDenied": ErrorKind(None, 403),
    "MissingAuthenticationToken": ErrorKind(None, 403),
    "IncompleteSignature": ErrorKind(None, 400),
    "InvalidClientTokenId": ErrorKind(None, 403),
    "SignatureDoesNotMatch": ErrorKind(None, 403),
    "InternalError": ErrorKind(None, 500),
    "ServiceUnavailable": ErrorKind(None, 503),
}

# Shorter names for the codes the endpoint raises itself.
NON_EXISTENT_QUEUE = "AWS.SimpleQueueService.NonExistentQueue"
TOO_MANY_ENTRIES = "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"
IDS_NOT_DISTINCT = "AWS.SimpleQueueService.BatchEntryIdsNotDistinct"
EMPTY_BATCH = "AWS.SimpleQueueService.EmptyBatchRequest"
INVALID_BATCH_ENTRY_ID = "AWS.SimpleQueueService.InvalidBatchEntryId"
BATCH_TOO_LONG = "AWS.SimpleQueueService.BatchRequestTooLong"
UNSUPPORTED = "AWS.SimpleQueueService.UnsupportedOperation"


class SqsError(Exception):
    """An error answered in SQS's shape. ``code`` is the query-protocol code."""

    def __init__(self, code: str, message: str) -> None:
        if code not in ERRORS:
            raise ValueError(f"unknown SQS error code {code!r}")
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def kind(self) -> ErrorKind:
        return ERRORS[self.code]

    @property
    def status(self) -> int:
        return self.kind.status

    @property
    def sender_fault(self) -> bool:
        return self.status < 500

    @property
    def type_name(self) -> str:
        """The body's ``__type``: the modelled shape, or the common error's own name."""
        shape = self.kind.shape
        if shape is not None:
            return f"com.amazonaws.sqs#{shape}"
        return f"com.amazon.coral.service#{self.code}"

    def as_body(self) -> dict[str, str]:
        return {"__type": self.type_name, "message": self.message}

    def query_error_header(self) -> str:
        return f"{self.code};{'Sender' if self.sender_fault else 'Receiver'}"

    def as_batch_entry(self, entry_id: str) -> dict[str, object]:
        """A ``Failed`` entry of a batch answer."""
        return {
            "Id": entry_id,
            "SenderFault": self.sender_fault,
            "Code": self.code,
            "Message": self.message,
        }


# The SQS code of each PgqError this endpoint answers with something more precise than
# InvalidParameterValue (SQS's answer to any argument it rejects). A subclass takes the code
# of its nearest listed ancestor; a class with none listed, that default. Kept here, not on
# the exception classes: the core errors know nothing of SQS.
PGQ_ERROR_CODES: dict[type[PgqError], str] = {
    QueueNotFound: NON_EXISTENT_QUEUE,
    QueueAlreadyExists: "QueueAlreadyExists",
    MessageNotFound: "ReceiptHandleIsInvalid",
    StaleReceipt: "ReceiptHandleIsInvalid",
    PermissionDenied: "AccessDenied",
    QueuePaused: "AWS.SimpleQueueService.QueueDeletedRecently",
    QueueFull: "OverLimit",
    NotMigrated: "InternalError",
    # Nothing was sent: a 503 the SDKs retry by themselves, with their own back-off.
    DatabaseUnavailable: "ServiceUnavailable",
}
DEFAULT_CODE = "InvalidParameterValue"

# Codes whose message SQS words the same whatever the request: its own text replaces the
# PgqError's, so clients and SDK retries that match on it find it (and an answer about a
# queue the caller may not see says nothing a missing queue's answer would not).
FIXED_MESSAGES: dict[str, str] = {
    NON_EXISTENT_QUEUE: "The specified queue does not exist.",
}


def sqs_code(error: type[PgqError] | PgqError) -> str:
    """The SQS code of a PgqError (class or instance): the first class of its MRO listed in
    :data:`PGQ_ERROR_CODES`, else InvalidParameterValue."""
    cls = error if isinstance(error, type) else type(error)
    for klass in cls.__mro__:
        code = PGQ_ERROR_CODES.get(klass)
        if code is not None:
            return code
    return DEFAULT_CODE


def from_pgq_error(exc: PgqError) -> SqsError:
    """The SQS form of any PgqError, by :func:`sqs_code`, in SQS's words where SQS has
    fixed ones (:data:`FIXED_MESSAGES`)."""
    code = sqs_code(exc)
    return SqsError(code, FIXED_MESSAGES.get(code, exc.message))


def no_such_queue() -> SqsError:
    """What SQS answers for a queue URL or name that names no queue the caller may use."""
    return SqsError(NON_EXISTENT_QUEUE, FIXED_MESSAGES[NON_EXISTENT_QUEUE])


def invalid(message: str) -> SqsError:
    return SqsError("InvalidParameterValue", message)


def missing(parameter: str) -> SqsError:
    return SqsError("MissingParameter", f"The request must contain the parameter {parameter}.")
