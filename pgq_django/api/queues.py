"""Creating, changing and removing queues."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction

from ..conf import settings
from ..exceptions import InvalidArgument, QueueAlreadyExists, QueueNotFound
from ..models import Backoff, Message, Queue
from . import validation as v

# Fields alter_queue() accepts, each with the check that normalises it.
_DURATIONS = ("visibility_timeout", "delivery_delay", "retry_delay", "backoff_cap")


def _db() -> str:
    return settings.DATABASE


def _queue_fields(options: dict[str, Any]) -> dict[str, Any]:
    """Validate queue settings given by name; unknown names are an error, not ignored."""
    out: dict[str, Any] = {}
    for key, value in options.items():
        if key in _DURATIONS:
            out[key] = v.seconds(value, key)
        elif key == "retention":
            out[key] = v.seconds(value, key, minimum=1)
        elif key == "max_retries":
            out[key] = v.integer(value, key, maximum=1_000_000)
        elif key == "max_message_size":
            out[key] = v.integer(value, key, minimum=1, maximum=256 * 1024 * 1024)
        elif key == "max_length":
            out[key] = v.integer(value, key, minimum=1, maximum=2**62, allow_none=True)
        elif key in ("archive_on_ack", "backoff_jitter", "fifo", "content_based_deduplication"):
            if not isinstance(value, bool):
                raise InvalidArgument(f"{key} must be True or False, not {value!r}.", field=key)
            out[key] = value
        elif key == "backoff":
            if value not in Backoff.values:
                raise InvalidArgument(
                    f"backoff must be one of {', '.join(Backoff.values)}, not {value!r}.",
                    field=key,
                )
            out[key] = value
        elif key == "dead_letter_queue":
            out[key] = None if value is None else get_queue(value)
        elif key == "rate_limit":
            out[key] = v.seconds(value, key, allow_none=True)
        elif key == "concurrency_limit":
            out[key] = v.integer(value, key, minimum=1, allow_none=True)
        elif key == "callback":
            out[key] = v.text(value or "", key, max_length=255)
        elif key == "receive_wait_time":
            out[key] = v.seconds(value, key)
        elif key == "tags":
            out[key] = v.tags(value)
        elif key == "owner":
            out[key] = value
        else:
            raise InvalidArgument(f"{key!r} is not a queue setting.", field=key)
    return out


def get_queue(queue: Any) -> Queue:
    """The Queue for a name or instance; raises QueueNotFound."""
    name = v.name(queue)
    try:
        return Queue.objects.using(_db()).get(name=name)
    except Queue.DoesNotExist:
        raise QueueNotFound(f"Queue {name!r} does not exist.", queue=name) from None


def create_queue(
    name: str,
    *,
    fifo: bool = False,
    visibility_timeout: Any = None,
    delivery_delay: Any = 0,
    retention: Any = None,
    max_retries: int | None = None,
    retry_delay: Any = None,
    backoff: str = "exponential",
    dead_letter_queue: Any = None,
    max_message_size: int | None = None,
    archive_on_ack: bool = False,
    **options: Any,
) -> Queue:
    """Create a queue; a name ending in ``.fifo`` makes a FIFO queue (as in SQS).

    Raises QueueAlreadyExists when the name is taken; nothing is changed then.
    """
    name = v.name(name)
    fields = _queue_fields(
        {
            "fifo": fifo,
            "visibility_timeout": _default(visibility_timeout, settings.DEFAULT_VISIBILITY_TIMEOUT),
            "delivery_delay": delivery_delay,
            "retention": _default(retention, settings.DEFAULT_RETENTION),
            "max_retries": _default(max_retries, settings.DEFAULT_MAX_RETRIES),
            "retry_delay": _default(retry_delay, settings.DEFAULT_RETRY_DELAY),
            "backoff": backoff,
            "dead_letter_queue": dead_letter_queue,
            "max_message_size": _default(max_message_size, settings.DEFAULT_MAX_MESSAGE_SIZE),
            "archive_on_ack": archive_on_ack,
            **options,
        }
    )
    fields["fifo"] = fields["fifo"] or name.endswith(".fifo")
    try:
        with transaction.atomic(using=_db()):
            return Queue.objects.using(_db()).create(name=name, **fields)
    except IntegrityError:
        raise QueueAlreadyExists(f"Queue {name!r} already exists.", queue=name) from None


def _default(value: Any, default: Any) -> Any:
    return default if value is None else value


def alter_queue(name: Any, **changes: Any) -> Queue:
    """Change a queue's settings; takes effect for the next read, send or nack."""
    queue = get_queue(name)
    fields = _queue_fields(changes)
    dlq = fields.get("dead_letter_queue")
    if dlq is not None and dlq.pk == queue.pk:
        raise InvalidArgument(
            "A queue cannot be its own dead-letter queue.", field="dead_letter_queue"
        )
    for key, value in fields.items():
        setattr(queue, key, value)
    queue.save(using=_db(), update_fields=[*fields, "updated_at"])
    return queue


def drop_queue(name: Any) -> bool:
    """Remove a queue with its messages and archive; False if there was no such queue."""
    deleted, _ = Queue.objects.using(_db()).filter(name=v.name(name)).delete()
    return deleted > 0


def purge_queue(name: Any) -> int:
    """Delete every message of the queue (leased ones too); returns how many."""
    queue_id, count = Message.objects.db_manager(_db()).purge(v.name(name))
    if queue_id is None:
        raise QueueNotFound(f"Queue {name!r} does not exist.", queue=str(name))
    return count


def list_queues() -> list[Queue]:
    """Every queue, in name order (PGMQ ``list_queues``)."""
    return list(Queue.objects.using(_db()).order_by("name"))


def pause_queue(name: Any) -> Queue:
    """Stop deliveries: reads raise QueuePaused and workers skip it; sends still land."""
    return _set_flag(name, paused=True)


def resume_queue(name: Any) -> Queue:
    """Deliver again after :func:`pause_queue`; waiting consumers are woken at once."""
    return _set_flag(name, paused=False)


def _set_flag(name: Any, **flag: bool) -> Queue:
    queue = get_queue(name)
    Queue.objects.using(_db()).filter(pk=queue.pk).update(**flag)
    for key, value in flag.items():
        setattr(queue, key, value)
    if not flag.get("paused", True):
        from ..notify import notify_queue

        notify_queue(queue.name)
    return queue
