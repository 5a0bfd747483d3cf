"""What goes in and out of the REST API, field by field.

Request serializers are strict: a number must be a JSON number (not ``"30"``), a flag a JSON
boolean, a text a JSON string, and a field the API does not know is an error rather than
silently ignored, so a typo never turns into a default. They check types only; ranges and
names are checked by the functional API itself, whose PgqError answers in the same shape.

Responses are built by the small ``*_json`` functions (a dict per object, cheap enough for
a consume of a thousand messages); the ``*Out`` serializers describe the same shapes for the
OpenAPI schema, and the test suite validates real responses against that schema.
"""

from __future__ import annotations

import copy
import math
from datetime import datetime
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from ..api.queue_settings import QUEUE_SETTINGS
from ..telemetry import carriers
from ..validation import MAX_SECONDS
from .present_fields import validate_present_fields

# ---------------------------------------------------------------------------------------------
# Strict fields


NAME_SCHEMA = {"type": "string", "pattern": r"^[A-Za-z0-9_-]{1,80}(\.fifo)?$"}


@extend_schema_field({"type": "number", "minimum": 0, "maximum": MAX_SECONDS})
class Seconds(serializers.Field):
    """A JSON number of seconds (int or float, finite); shown as an int when whole."""

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool) or not isinstance(data, int | float) or not math.isfinite(data):
            raise serializers.ValidationError("Expected a number of seconds.")
        return data

    def to_representation(self, value: Any) -> Any:
        return seconds_json(value)


class _Strict(serializers.Field):
    """A value of one JSON type exactly as sent: DRF's own fields would coerce "1" to 1."""

    expected = ""

    @staticmethod
    def accepts(data: Any) -> bool:
        raise NotImplementedError

    def to_internal_value(self, data: Any) -> Any:
        if not self.accepts(data):
            raise serializers.ValidationError(self.expected)
        return data

    def to_representation(self, value: Any) -> Any:
        return value


@extend_schema_field(OpenApiTypes.INT)
class StrictInt(_Strict):
    expected = "Expected an integer."

    @staticmethod
    def accepts(data: Any) -> bool:
        return isinstance(data, int) and not isinstance(data, bool)


@extend_schema_field(OpenApiTypes.NUMBER)
class StrictNumber(_Strict):
    expected = "Expected a number."

    @staticmethod
    def accepts(data: Any) -> bool:
        return isinstance(data, int | float) and not isinstance(data, bool) and math.isfinite(data)


@extend_schema_field(OpenApiTypes.BOOL)
class StrictBool(_Strict):
    expected = "Expected true or false."

    @staticmethod
    def accepts(data: Any) -> bool:
        return isinstance(data, bool)


@extend_schema_field(OpenApiTypes.STR)
class StrictText(_Strict):
    expected = "Expected a string."

    @staticmethod
    def accepts(data: Any) -> bool:
        return isinstance(data, str)


@extend_schema_field({"type": "string", "pattern": r"^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$"})
class TraceParent(serializers.Field):
    """A W3C ``traceparent``: the context the message is sent in (docs/observability.md)."""

    def to_internal_value(self, data: Any) -> str:
        if carriers.valid_traceparent(data) is None:
            raise serializers.ValidationError(
                "Expected a W3C traceparent: 00-<32 hex digits>-<16 hex digits>-<2 hex "
                "digits>, lower case, not all zeros."
            )
        return str(data)

    def to_representation(self, value: Any) -> Any:
        return value


@extend_schema_field(NAME_SCHEMA)
class Name(serializers.Field):
    """A queue, topic or subscription name (checked by the API; typed here)."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            raise serializers.ValidationError("Expected a string.")
        return data

    def to_representation(self, value: Any) -> Any:
        return value


@extend_schema_field({"type": "object", "additionalProperties": True})
class JSONObject(serializers.Field):
    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise serializers.ValidationError("Expected a JSON object.")
        return data

    def to_representation(self, value: Any) -> Any:
        return value


@extend_schema_field(
    {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "string"}}}
)
class MessageFilters(JSONObject):
    """psqlqueue's ``message_filters``: ``{"attribute": ["value", …]}``."""


@extend_schema_field({"description": "Any JSON value: a string, number, object, array …"})
class AnyJSON(serializers.Field):
    def to_internal_value(self, data: Any) -> Any:
        return data

    def to_representation(self, value: Any) -> Any:
        return value


@extend_schema_field({"type": "string", "enum": ["fanout", "direct", "topic", "headers"]})
class ExchangeKind(StrictText):
    pass


class Strict(serializers.Serializer):
    """Refuses fields it does not declare instead of ignoring them.

    Validation of the fields themselves takes the ``present_fields`` shortcut
    (:mod:`pgq_django.rest.present_fields`) when it may: it visits only the fields the data
    holds and the required ones, where DRF's own loop visits every declared field of every
    item.
    """

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, dict):
            return super().to_internal_value(data)
        fields = self.fields
        unknown = [name for name in data if name not in fields]
        if unknown:
            raise serializers.ValidationError(
                {name: ["This field is not known."] for name in sorted(unknown)}
            )
        validated = validate_present_fields(self, data)
        return super().to_internal_value(data) if validated is None else validated

    def run_validators(self, value: Any) -> None:
        if self.validators:
            super().run_validators(value)

    def get_fields(self) -> dict[str, Any]:
        """Copies of DRF's fields for this class, made once per class: shallow ones for the
        leaf fields (which keep no state of their own beyond what binding sets on the copy),
        where DRF's deep copies re-run every field's constructor for every request."""
        made = _FIELDS_BY_CLASS.get(type(self))
        if made is None:
            made = _FIELDS_BY_CLASS[type(self)] = super().get_fields()
        return {
            name: copy.deepcopy(field)
            if isinstance(field, serializers.Serializer | serializers.ListField)
            else copy.copy(field)
            for name, field in made.items()
        }


# Each Strict class's fields as DRF's get_fields() makes them (unbound), copied per instance.
_FIELDS_BY_CLASS: dict[type[Strict], dict[str, Any]] = {}


def _opt(field: type[serializers.Field], **kwargs: Any) -> Any:
    return field(required=False, **kwargs)


# ---------------------------------------------------------------------------------------------
# Requests


# REST field -> queue setting (psqlqueue's names for the first three). Types, bounds and help
# texts come from the API's table (pgq_django.api.queue_settings), never declared here.
QUEUE_FIELDS = {
    "ack_deadline_seconds": "visibility_timeout",
    "message_retention_seconds": "retention",
    "delivery_delay_seconds": "delivery_delay",
    "fifo": "fifo",
    "durable": "durable",
    "max_retries": "max_retries",
    "retry_delay": "retry_delay",
    "backoff": "backoff",
    "dead_letter_queue": "dead_letter_queue",
    "max_message_size": "max_message_size",
    "max_length": "max_length",
    "archive_on_ack": "archive_on_ack",
    "rate_limit": "rate_limit",
    "concurrency_limit": "concurrency_limit",
}
_KIND_FIELDS: dict[str, type[serializers.Field]] = {
    "seconds": Seconds,
    "integer": StrictInt,
    "flag": StrictBool,
    "choice": StrictText,
    "queue": Name,
    "rate": StrictNumber,
}


def _queue_setting_field(rest_name: str) -> Any:
    """An optional request field for a queue setting, typed and documented by its table row."""
    setting = QUEUE_SETTINGS[QUEUE_FIELDS[rest_name]]
    schema: dict[str, Any] = (
        dict(NAME_SCHEMA, description=setting.doc)
        if setting.kind == "queue"
        else setting.json_schema()
    )
    if setting.nullable:
        schema["nullable"] = True
    base = _KIND_FIELDS[setting.kind]
    field = extend_schema_field(schema)(type(f"{base.__name__}_{rest_name}", (base,), {}))
    return field(required=False, allow_null=setting.nullable, help_text=setting.doc)


class QueueUpdateIn(Strict):
    """Queue settings a change may give; each is optional."""

    ack_deadline_seconds = _queue_setting_field("ack_deadline_seconds")
    message_retention_seconds = _queue_setting_field("message_retention_seconds")
    delivery_delay_seconds = _queue_setting_field("delivery_delay_seconds")
    max_retries = _queue_setting_field("max_retries")
    retry_delay = _queue_setting_field("retry_delay")
    backoff = _queue_setting_field("backoff")
    dead_letter_queue = _queue_setting_field("dead_letter_queue")
    max_message_size = _queue_setting_field("max_message_size")
    max_length = _queue_setting_field("max_length")
    archive_on_ack = _queue_setting_field("archive_on_ack")
    rate_limit = _queue_setting_field("rate_limit")
    concurrency_limit = _queue_setting_field("concurrency_limit")


class QueueCreateIn(QueueUpdateIn):
    """A new queue: its name, and any settings (the others take their defaults)."""

    id = Name(help_text="The queue's name.")
    fifo = _queue_setting_field("fifo")
    durable = _queue_setting_field("durable")


class MessageIn(Strict):
    body = AnyJSON(help_text="The message body: any JSON value.")
    label = _opt(StrictText, allow_null=True, help_text="A label consumers can filter on.")
    attributes = _opt(JSONObject, help_text="Attributes (psqlqueue, SQS).")
    headers = _opt(JSONObject, help_text="Headers; content_type marks text or XML bodies.")
    priority = _opt(StrictInt, help_text="Lower is delivered sooner; default 0.")
    delay = _opt(Seconds, allow_null=True, help_text="Seconds before the message is visible.")
    group = _opt(StrictText, allow_null=True, help_text="FIFO message group.")
    dedup_id = _opt(StrictText, allow_null=True, help_text="Deduplication id (5 minutes).")
    expires_in = _opt(Seconds, allow_null=True, help_text="Seconds until the message expires.")
    max_retries = _opt(StrictInt, allow_null=True, help_text="Overrides the queue's.")
    retry_delay = _opt(Seconds, allow_null=True, help_text="Overrides the queue's.")
    traceparent = _opt(TraceParent, help_text="W3C trace context the message is sent in.")
    tracestate = _opt(StrictText, help_text="W3C tracestate that goes with traceparent.")


class SendIn(MessageIn):
    reply_to = _opt(
        StrictText,
        allow_null=True,
        help_text="A queue for the handler's reply (you need write on it); one message only.",
    )


class PublishIn(MessageIn):
    routing_key = _opt(StrictText, allow_null=True, help_text="For direct and topic exchanges.")


class BatchIn(Strict):
    messages = serializers.ListField(child=MessageIn(), help_text="Messages sent together.")


class NackIn(Strict):
    visibility_timeout_seconds = _opt(
        Seconds,
        allow_null=True,
        help_text="Seconds before the message is visible again; the queue's retry delay "
        "(with backoff) when absent.",
    )


class AckBatchIn(Strict):
    ids = serializers.ListField(
        child=AnyJSON(),
        help_text="Message ids (integers) or receipts ('<id>:<delivery_attempts>').",
    )


class TopicIn(Strict):
    id = Name(help_text="The topic's (exchange's) name.")
    type = _opt(ExchangeKind, help_text="fanout (default), direct, topic or headers.")


class SubscriptionIn(Strict):
    id = Name(help_text="The subscription's id.")
    topic_id = Name()
    queue_id = Name()
    message_filters = _opt(MessageFilters, allow_null=True)
    routing_key = _opt(StrictText, allow_null=True)


# ---------------------------------------------------------------------------------------------
# Responses: dicts, and serializers describing them for the schema


def seconds_json(value: Any) -> Any:
    if value is None:
        return None
    return int(value) if float(value).is_integer() else float(value)


def time_json(value: datetime | None) -> str | None:
    if value is None:
        return None
    text = value.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def queue_json(q: Any) -> dict[str, Any]:
    return {
        "id": q.name,
        "ack_deadline_seconds": seconds_json(q.visibility_timeout),
        "message_retention_seconds": seconds_json(q.retention),
        "delivery_delay_seconds": seconds_json(q.delivery_delay),
        "fifo": q.fifo,
        "durable": q.durable,
        "max_retries": q.max_retries,
        "retry_delay": seconds_json(q.retry_delay),
        "backoff": q.backoff,
        "dead_letter_queue": q.dead_letter_queue.name if q.dead_letter_queue_id else None,
        "max_message_size": q.max_message_size,
        "max_length": q.max_length,
        "archive_on_ack": q.archive_on_ack,
        "rate_limit": q.rate_limit,
        "concurrency_limit": q.concurrency_limit,
        "paused": q.paused,
        "created_at": time_json(q.created_at),
        "updated_at": time_json(q.updated_at),
    }


def message_json(m: Any, queue: str) -> dict[str, Any]:
    return {
        "id": m.msg_id,
        "queue_id": queue,
        "label": m.label,
        "body": m.message,
        "attributes": m.attributes,
        "delivery_attempts": m.read_ct,
        "created_at": time_json(m.enqueued_at),
        "receipt": f"{m.msg_id}:{m.read_ct}",
        "headers": m.headers,
        "priority": m.priority,
        "group": m.group_id,
        "visible_at": time_json(m.vt),
        "expires_at": time_json(m.expires_at),
        "traceparent": traceparent_of(m),
    }


def traceparent_of(m: Any) -> str | None:
    """The W3C traceparent of the context a message was created in, if it has one."""
    found = carriers.stored_context(m.headers, m.attributes)
    return found["traceparent"] if found else None


def topic_json(x: Any) -> dict[str, Any]:
    return {"id": x.name, "type": x.type, "created_at": time_json(x.created_at)}


def subscription_json(b: Any) -> dict[str, Any]:
    return {
        "id": b.name or str(b.pk),
        "topic_id": b.exchange.name,
        "queue_id": b.queue.name,
        "message_filters": b.filters or None,
        "routing_key": b.routing_key or None,
        "created_at": time_json(b.created_at),
    }


class QueueOut(serializers.Serializer):
    id = serializers.CharField()
    ack_deadline_seconds = Seconds()
    message_retention_seconds = Seconds()
    delivery_delay_seconds = Seconds()
    fifo = serializers.BooleanField()
    durable = serializers.BooleanField()
    max_retries = serializers.IntegerField()
    retry_delay = Seconds()
    backoff = serializers.CharField()
    dead_letter_queue = serializers.CharField(allow_null=True)
    max_message_size = serializers.IntegerField()
    max_length = serializers.IntegerField(allow_null=True)
    archive_on_ack = serializers.BooleanField()
    rate_limit = serializers.FloatField(allow_null=True)
    concurrency_limit = serializers.IntegerField(allow_null=True)
    paused = serializers.BooleanField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class MessageOut(serializers.Serializer):
    id = serializers.IntegerField()
    queue_id = serializers.CharField()
    label = serializers.CharField(allow_null=True)
    body = AnyJSON(allow_null=True)
    attributes = JSONObject()
    delivery_attempts = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    receipt = serializers.CharField(help_text="Ack or nack with this to fence stale consumers.")
    headers = JSONObject()
    priority = serializers.IntegerField()
    group = serializers.CharField(allow_null=True)
    visible_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField(allow_null=True)
    traceparent = serializers.CharField(
        allow_null=True, help_text="W3C trace context the message was created in."
    )


class ConsumeOut(serializers.Serializer):
    data = MessageOut(many=True)
    limit = serializers.IntegerField()


class PageOut(serializers.Serializer):
    limit = serializers.IntegerField()
    offset = serializers.IntegerField()


class QueueListOut(PageOut):
    data = QueueOut(many=True)


class StatsOut(serializers.Serializer):
    num_undelivered_messages = serializers.IntegerField()
    oldest_unacked_message_age_seconds = serializers.IntegerField()
    queue_length = serializers.IntegerField()
    in_flight = serializers.IntegerField()
    dead_letters = serializers.IntegerField()
    total_messages = serializers.IntegerField()
    newest_msg_age_sec = serializers.FloatField(allow_null=True)
    oldest_msg_age_sec = serializers.FloatField(allow_null=True)


class GroupOut(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.ChoiceField(choices=["pending", "done", "failed"])
    queue_name = serializers.CharField()
    size = serializers.IntegerField()
    pending = serializers.IntegerField()
    done = serializers.IntegerField()
    failed = serializers.IntegerField()
    then_msg_id = serializers.IntegerField(allow_null=True)
    then_queue_name = serializers.CharField(allow_blank=True)
    created_at = serializers.DateTimeField()


class SentOut(serializers.Serializer):
    id = serializers.IntegerField(required=False, help_text="For one message.")
    ids = serializers.ListField(
        child=serializers.IntegerField(), required=False, help_text="For a batch, in order."
    )


class PublishedOut(serializers.Serializer):
    ids = serializers.ListField(
        child=serializers.IntegerField(), help_text="One message id per routed queue."
    )


class AckedOut(serializers.Serializer):
    acked = serializers.ListField(child=serializers.IntegerField())


class TopicOut(serializers.Serializer):
    id = serializers.CharField()
    type = serializers.CharField()
    created_at = serializers.DateTimeField()


class TopicListOut(PageOut):
    data = TopicOut(many=True)


class SubscriptionOut(serializers.Serializer):
    id = serializers.CharField()
    topic_id = serializers.CharField()
    queue_id = serializers.CharField()
    message_filters = MessageFilters(allow_null=True)
    routing_key = serializers.CharField(allow_null=True)
    created_at = serializers.DateTimeField()


class SubscriptionListOut(PageOut):
    data = SubscriptionOut(many=True)


class ErrorDetail(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()
    details = JSONObject()


class ErrorOut(serializers.Serializer):
    error = ErrorDetail()
