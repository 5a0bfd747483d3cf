"""The one table of queue settings: name, kind, bounds, default and meaning of each.

``create_queue``/``alter_queue`` check their arguments against it, ``create_queue`` takes
its defaults from it (some through ``PGQ["DEFAULT_*"]``), the admin's queue form shows its
help texts and checks through :func:`pgq_django.validate_queue_settings`, and the REST
serializers build their queue fields and OpenAPI bounds from it. A bound changed here
changes everywhere at once.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any, Literal

from .. import validation as v
from ..conf import settings
from ..exceptions import InvalidArgument
from ..models import Backoff
from ..store.sql.queues import MAX_RATE, MIN_RATE

Kind = Literal["seconds", "integer", "flag", "choice", "tags", "queue", "callback", "user", "rate"]


@dataclass(frozen=True)
class QueueSetting:
    """One queue setting and its rule."""

    name: str
    kind: Kind
    doc: str
    minimum: float | None = None
    maximum: float | None = None
    nullable: bool = False
    choices: tuple[str, ...] = ()
    default: Any = None
    #: The ``PGQ`` key whose value is the default, when the project may change it.
    default_setting: str | None = None

    def default_value(self) -> Any:
        """What ``create_queue`` uses when the setting is not given."""
        if self.default_setting is not None:
            return getattr(settings, self.default_setting)
        return copy.copy(self.default)  # a fresh {} for tags, never one shared by queues

    def check(self, value: Any) -> Any:
        """The normalised value of a setting of a scalar kind; raises InvalidArgument.

        The kinds that name other rows (``queue``, ``callback``, ``user``) are resolved by
        :mod:`.queues`, which can look them up.
        """
        name = self.name
        if self.kind == "seconds":
            return v.seconds(value, name, minimum=self.minimum or 0)
        if self.kind == "integer":
            return v.integer(
                value,
                name,
                minimum=int(self.minimum or 0),
                maximum=int(self.maximum if self.maximum is not None else v.INT32_MAX),
                allow_none=self.nullable,
            )
        if self.kind == "flag":
            if not isinstance(value, bool):
                raise InvalidArgument(f"{name} must be True or False, not {value!r}.", field=name)
            return value
        if self.kind == "choice":
            if value not in self.choices:
                raise InvalidArgument(
                    f"{name} must be one of {', '.join(self.choices)}, not {value!r}.",
                    field=name,
                )
            return value
        if self.kind == "tags":
            return v.tags(value)
        if self.kind == "rate":
            if value is None and self.nullable:
                return None
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or not MIN_RATE <= value <= MAX_RATE
            ):
                raise InvalidArgument(
                    f"{name} must be a number of messages per second from {MIN_RATE} (one "
                    f"every {1 / MIN_RATE:,.0f} seconds) to {MAX_RATE:,.0f} (or None for no "
                    f"limit), not {value!r}.",
                    field=name,
                )
            return float(value)
        raise TypeError(f"queue setting {name!r} of kind {self.kind!r} is checked by .queues")

    def json_schema(self) -> dict[str, Any]:
        """The setting as a JSON Schema (for the REST API's OpenAPI document)."""
        types: dict[str, dict[str, Any]] = {
            "seconds": {"type": "number"},
            "integer": {"type": "integer"},
            "flag": {"type": "boolean"},
            "choice": {"type": "string", "enum": list(self.choices)},
            "tags": {"type": "object", "additionalProperties": {"type": "string"}},
            "queue": {"type": "string"},
            "callback": {"type": "string"},
            "user": {"type": "string"},
            "rate": {"type": "number"},
        }
        schema = dict(types[self.kind])
        if self.kind in ("seconds", "integer", "rate"):
            schema["minimum"] = self.minimum or 0
            schema["maximum"] = self.maximum
        if self.nullable:
            schema["nullable"] = True
        schema["description"] = self.doc
        return schema


_SECONDS_MAX = v.MAX_SECONDS

QUEUE_SETTINGS: dict[str, QueueSetting] = {
    s.name: s
    for s in (
        QueueSetting(
            "fifo",
            "flag",
            "Deliver each message group strictly in order (a name ending in .fifo also makes "
            "a FIFO queue). Fixed when the queue is created.",
            default=False,
        ),
        QueueSetting(
            "durable",
            "flag",
            "Write the queue's live messages to the WAL, so they survive a crash (default). "
            "False keeps them in UNLOGGED partitions, as PGMQ's unlogged queues: sends, reads "
            "and acks write no WAL, but a crash or immediate shutdown empties the queue and "
            "replicas never see its messages. Fixed when the queue is created.",
            default=True,
        ),
        QueueSetting(
            "visibility_timeout",
            "seconds",
            "Seconds a read message stays hidden before it is delivered again.",
            minimum=0,
            maximum=_SECONDS_MAX,
            default_setting="DEFAULT_VISIBILITY_TIMEOUT",
        ),
        QueueSetting(
            "delivery_delay",
            "seconds",
            "Seconds a new message waits before it becomes visible.",
            minimum=0,
            maximum=_SECONDS_MAX,
            default=0.0,
        ),
        QueueSetting(
            "retention",
            "seconds",
            "Seconds a message may wait before it is archived as expired. The longest, 100 "
            "years, means never: such messages carry no expiry (expires_in still sets one).",
            minimum=1,
            maximum=_SECONDS_MAX,
            default_setting="DEFAULT_RETENTION",
        ),
        QueueSetting(
            "max_retries",
            "integer",
            "Deliveries after which a failing message is dead-lettered.",
            minimum=0,
            maximum=1_000_000,
            default_setting="DEFAULT_MAX_RETRIES",
        ),
        QueueSetting(
            "retry_delay",
            "seconds",
            "Base seconds before a nacked message is visible again (grown by the backoff).",
            minimum=0,
            maximum=_SECONDS_MAX,
            default_setting="DEFAULT_RETRY_DELAY",
        ),
        QueueSetting(
            "backoff",
            "choice",
            "How the retry delay grows with each failed delivery.",
            choices=tuple(Backoff.values),
            default=Backoff.EXPONENTIAL.value,
        ),
        QueueSetting(
            "backoff_cap",
            "seconds",
            "Longest retry delay the backoff may reach.",
            minimum=0,
            maximum=_SECONDS_MAX,
            default=3600.0,
        ),
        QueueSetting(
            "backoff_jitter",
            "flag",
            "Spread retry delays randomly so failed messages do not return all at once.",
            default=True,
        ),
        QueueSetting(
            "dead_letter_queue",
            "queue",
            "Queue that receives messages out of retries (none: archived as dead).",
            nullable=True,
        ),
        QueueSetting(
            "max_message_size",
            "integer",
            "Largest message body in bytes (of its JSON encoding).",
            minimum=1,
            maximum=256 * 1024 * 1024,
            default_setting="DEFAULT_MAX_MESSAGE_SIZE",
        ),
        QueueSetting(
            "max_length",
            "integer",
            "Most messages the queue holds; a send beyond it raises QueueFull (none: no limit).",
            minimum=1,
            maximum=2**62,
            nullable=True,
        ),
        QueueSetting(
            "archive_on_ack",
            "flag",
            "Keep acknowledged messages (and their results) in the archive.",
            default=False,
        ),
        # SQS queue settings with no pgq meaning of their own (the SQS endpoint reads them).
        QueueSetting(
            "content_based_deduplication",
            "flag",
            "FIFO queues: deduplicate SQS sends without a MessageDeduplicationId by the "
            "SHA-256 of their body.",
            default=False,
        ),
        QueueSetting(
            "deduplication_scope",
            "choice",
            "FIFO queues: whether an SQS MessageDeduplicationId is unique in the queue "
            "(queue) or within its message group (messageGroup).",
            choices=("queue", "messageGroup"),
            default="queue",
        ),
        QueueSetting(
            "fifo_throughput_limit",
            "choice",
            "FIFO queues: SQS's FifoThroughputLimit, kept and answered for SQS clients "
            "(pgq_django applies no throughput quota).",
            choices=("perQueue", "perMessageGroupId"),
            default="perQueue",
        ),
        QueueSetting(
            "receive_wait_time",
            "seconds",
            "Seconds an SQS ReceiveMessage waits when it does not say (long polling).",
            minimum=0,
            maximum=_SECONDS_MAX,
            default=0.0,
        ),
        QueueSetting(
            "tags", "tags", "Key/value labels (SQS tags): at most 50 string pairs.", default={}
        ),
        QueueSetting(
            "rate_limit",
            "rate",
            "Most messages leased per second, across every worker and consumer (none: no "
            "limit). Reads over it get fewer messages or none and try again.",
            minimum=MIN_RATE,
            maximum=MAX_RATE,
            nullable=True,
        ),
        QueueSetting(
            "concurrency_limit",
            "integer",
            "Most messages leased at once, across every worker and consumer (none: no "
            "limit). Reads at it get no more until a lease ends.",
            minimum=1,
            maximum=1_000_000,
            nullable=True,
        ),
        QueueSetting(
            "callback",
            "callback",
            "Dotted path of a function the worker calls for each message.",
            default="",
        ),
        QueueSetting(
            "owner", "user", "The user who manages the queue and its grants.", nullable=True
        ),
    )
}
"""Every queue setting by name, in the order forms and documents show them."""


def queue_setting_defaults() -> dict[str, Any]:
    """Every setting's default, as ``create_queue`` applies them."""
    return {name: setting.default_value() for name, setting in QUEUE_SETTINGS.items()}
