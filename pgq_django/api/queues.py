"""Creating, changing and removing queues."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction

from ..conf import settings
from ..exceptions import InvalidArgument, QueueAlreadyExists, QueueNotFound
from ..models import Backoff, Message, Queue
from . import validation as v
from .recovery import recovers

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
        elif key in ("rate_limit", "concurrency_limit"):
            if value is not None:
                raise InvalidArgument(
                    f"{key} is not enforced yet, so setting it is refused rather than "
                    "silently ignored; limit throughput with the number of workers "
                    "(pgq_worker --concurrency) instead.",
                    field=key,
                )
            out[key] = None
        elif key == "callback":
            out[key] = _callback(value)
        elif key == "receive_wait_time":
            out[key] = v.seconds(value, key)
        elif key == "tags":
            out[key] = v.tags(value)
        elif key == "owner":
            out[key] = v.user(value)
        else:
            raise InvalidArgument(f"{key!r} is not a queue setting.", field=key)
    return out


def validate_queue_settings(**options: Any) -> dict[str, Any]:
    """Check queue settings as create_queue/alter_queue would, changing nothing.

    The one queue-settings rule: the admin's queue form calls this so that it accepts exactly
    what the API accepts. Returns the normalised values; raises a PgqError whose
    ``details["field"]`` names the offending setting.
    """
    return _queue_fields(options)


def _callback(value: Any) -> str:
    """A queue callback: empty, or the dotted path of something callable that imports here."""
    from django.utils.module_loading import import_string

    path = v.text(value or "", "callback", max_length=255)
    if not path:
        return ""
    try:
        target = import_string(path)
    except Exception as exc:  # ImportError, or whatever the module raised on import
        raise InvalidArgument(
            f"callback {path!r} cannot be imported: {exc}.", field="callback"
        ) from None
    if not callable(target):
        raise InvalidArgument(f"callback {path!r} is not callable.", field="callback")
    return path


@recovers()
def get_queue(queue: Any) -> Queue:
    """The Queue for a name or instance; raises QueueNotFound."""
    name = v.name(queue)
    try:
        return Queue.objects.using(_db()).get(name=name)
    except Queue.DoesNotExist:
        raise QueueNotFound(f"Queue {name!r} does not exist.", queue=name) from None


@recovers(False)
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


@recovers()
def alter_queue(name: Any, **changes: Any) -> Queue:
    """Change a queue's settings; takes effect for the next read, send or nack."""
    queue = get_queue(name)
    fields = _queue_fields(changes)
    _check_fifo_unchanged(queue, fields)
    with transaction.atomic(using=_db()):
        dlq = fields.get("dead_letter_queue")
        if dlq is not None:
            _refuse_dead_letter_cycle(queue, dlq)
        for key, value in fields.items():
            setattr(queue, key, value)
        queue.save(using=_db(), update_fields=[*fields, "updated_at"])
    return queue


def _check_fifo_unchanged(queue: Queue, fields: dict[str, Any]) -> None:
    """A queue's kind is fixed when it is created (as in SQS): ``fifo`` cannot change.

    Turning FIFO off under a ``.fifo`` queue would let its groups be read out of order, and
    turning it on under live messages would change how leases already taken are ordered.
    Create a new queue of the other kind and move the messages instead.
    """
    if "fifo" in fields and fields["fifo"] != queue.fifo:
        kind = "a FIFO" if queue.fifo else "not a FIFO"
        raise InvalidArgument(
            f"Queue {queue.name!r} is {kind} queue, and a queue's kind cannot change after "
            "it is created; create a new queue instead.",
            field="fifo",
        )


def _refuse_dead_letter_cycle(queue: Queue, dlq: Queue) -> None:
    """Raise unless following dead-letter queues from ``dlq`` never comes back to ``queue``.

    A cycle (A → A, A → B → A) would bounce a failing message between the queues forever.
    Callers hold a transaction; the advisory lock makes concurrent changes to dead-letter
    queues take turns, and each step of the walk reads what the previous holder committed.
    """
    Queue.objects.db_manager(_db()).lock_dead_letter_graph()
    path = [queue.name]
    current: int | None = dlq.pk
    while current is not None and len(path) <= 10_000:
        row = Queue.objects.using(_db()).filter(pk=current).values("name", "dead_letter_queue")
        found = row.first()
        if found is None:
            return
        path.append(found["name"])
        if current == queue.pk:
            raise InvalidArgument(
                f"Dead-letter queues would form a cycle ({' → '.join(path)}): a failing "
                "message would bounce between them forever.",
                field="dead_letter_queue",
            )
        current = found["dead_letter_queue"]


@recovers()
def drop_queue(name: Any) -> bool:
    """Remove a queue with its messages and archive; False if there was no such queue."""
    deleted, _ = Queue.objects.using(_db()).filter(name=v.name(name)).delete()
    return deleted > 0


@recovers()
def purge_queue(name: Any) -> int:
    """Delete every message of the queue (leased ones too); returns how many."""
    queue_id, count = Message.objects.db_manager(_db()).purge(v.name(name))
    if queue_id is None:
        raise QueueNotFound(f"Queue {name!r} does not exist.", queue=str(name))
    return count


@recovers()
def list_queues() -> list[Queue]:
    """Every queue, in name order (PGMQ ``list_queues``)."""
    return list(Queue.objects.using(_db()).order_by("name"))


@recovers()
def pause_queue(name: Any) -> Queue:
    """Stop deliveries: reads raise QueuePaused and workers skip it; sends still land."""
    return _set_flag(name, paused=True)


@recovers()
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
