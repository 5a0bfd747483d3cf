"""Creating, changing and removing queues."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction

from .. import validation as v
from ..conf import settings
from ..exceptions import InvalidArgument, QueueAlreadyExists, QueueNotFound
from ..models import Message, Queue
from ..store.partitions import ensure_transient_ranges
from ..types import Duration, QueueRef
from .queue_settings import QUEUE_SETTINGS, queue_setting_defaults
from .recovery import recovers


def _db() -> str:
    return settings.DATABASE


def _queue_fields(options: dict[str, Any]) -> dict[str, Any]:
    """Validate queue settings given by name against QUEUE_SETTINGS; unknown names are an
    error, not ignored."""
    out: dict[str, Any] = {}
    for key, value in options.items():
        setting = QUEUE_SETTINGS.get(key)
        if setting is None:
            raise InvalidArgument(f"{key!r} is not a queue setting.", field=key)
        if setting.kind == "queue":
            out[key] = None if value is None else get_queue(value)
        elif setting.kind == "callback":
            out[key] = _callback(value)
        elif setting.kind == "user":
            out[key] = v.user(value, key)
        else:
            out[key] = setting.check(value)
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
def get_queue(queue: QueueRef) -> Queue:
    """The Queue for a name or instance; raises QueueNotFound."""
    name = v.name(queue)
    try:
        return Queue.objects.using(_db()).get(name=name)
    except Queue.DoesNotExist:
        raise QueueNotFound.for_name(name) from None


@recovers(False)
def create_queue(
    name: str,
    *,
    fifo: bool = False,
    visibility_timeout: Duration | None = None,
    delivery_delay: Duration | None = None,
    retention: Duration | None = None,
    max_retries: int | None = None,
    retry_delay: Duration | None = None,
    backoff: str | None = None,
    dead_letter_queue: QueueRef | None = None,
    max_message_size: int | None = None,
    archive_on_ack: bool = False,
    durable: bool = True,
    **options: Any,
) -> Queue:
    """Create a queue; a name ending in ``.fifo`` makes a FIFO queue (as in SQS).

    ``durable=False`` makes an unlogged queue (PGMQ's ``create_unlogged``): its live
    messages are written to no WAL, which makes sends, reads and acks cheaper, and a crash
    of PostgreSQL (or an immediate shutdown, or a failover to a replica) leaves it empty;
    every durable queue keeps its messages. Archived messages are always durable.

    Any other setting of :data:`~pgq_django.api.queue_settings.QUEUE_SETTINGS` may be given
    by name (``max_length``, ``backoff_cap``, ``callback``, ``owner`` …). A setting not
    given, or given as None, takes its default from that table, some through
    ``PGQ["DEFAULT_*"]``. Raises QueueAlreadyExists when the name is taken; nothing is
    changed then.
    """
    name = v.name(name)
    named = {
        "fifo": fifo,
        "visibility_timeout": visibility_timeout,
        "delivery_delay": delivery_delay,
        "retention": retention,
        "max_retries": max_retries,
        "retry_delay": retry_delay,
        "backoff": backoff,
        "dead_letter_queue": dead_letter_queue,
        "max_message_size": max_message_size,
        "archive_on_ack": archive_on_ack,
        "durable": durable,
    }
    given = {key: value for key, value in named.items() if value is not None}
    fields = _queue_fields({**queue_setting_defaults(), **given, **options})
    fields["fifo"] = fields["fifo"] or name.endswith(".fifo")
    try:
        with transaction.atomic(using=_db()):
            queue = Queue.objects.using(_db()).create(name=name, **fields)
            if not queue.durable:
                ensure_transient_ranges()
            return queue
    except IntegrityError:
        raise _taken(name) from None


def _taken(name: str) -> QueueAlreadyExists:
    """The error for a name a queue holds, exactly or but for case (which PGMQ's clients
    would read as the same queue)."""
    other = Queue.objects.db_manager(_db()).name_folded_as(name)
    if other is None or other == name:
        return QueueAlreadyExists(f"Queue {name!r} already exists.", queue=name)
    return QueueAlreadyExists(
        f"Queue {other!r} already exists, and {name!r} differs from it only in case: PGMQ's "
        "clients would read both names as one queue. Choose another name.",
        queue=name,
    )


@recovers()
def alter_queue(name: QueueRef, **changes: Any) -> Queue:
    """Change a queue's settings; takes effect for the next read, send or nack."""
    queue = get_queue(name)
    fields = _queue_fields(changes)
    _check_fifo_unchanged(queue, fields)
    _check_durability_unchanged(queue, fields)
    with transaction.atomic(using=_db()):
        dlq = fields.get("dead_letter_queue")
        if dlq is not None:
            _refuse_dead_letter_cycle(queue, dlq)
        for key, value in fields.items():
            setattr(queue, key, value)
        queue.save(using=_db(), update_fields=[*fields, "updated_at"])
        if fields.keys() & {"rate_limit", "concurrency_limit"}:
            Queue.objects.db_manager(_db()).reset_limit(queue.pk)
    return queue


def _check_fifo_unchanged(queue: Queue, fields: dict[str, Any]) -> None:
    """A queue's kind is fixed when it is created (as in SQS): ``fifo`` cannot change.

    Turning FIFO off under a ``.fifo`` queue would let its groups be read out of order, and
    turning it on under live messages would change how leases already taken are ordered.
    Create a new queue of the other kind and move the messages instead.
    """
    kind = "a FIFO queue" if queue.fifo else "not a FIFO queue"
    _refuse_change(queue, fields, "fifo", kind, "kind", "create a new queue instead")


def _check_durability_unchanged(queue: Queue, fields: dict[str, Any]) -> None:
    """``durable`` is fixed when the queue is created, as in PGMQ.

    A queue's messages live in the id space of its durability (logged or UNLOGGED ranges of
    the message table); changing the flag would leave the messages already sent where they
    are, so the queue would be half one and half the other.
    """
    kind = "durable" if queue.durable else "not durable (unlogged)"
    advice = "create a new queue instead and move the messages"
    _refuse_change(queue, fields, "durable", kind, "durability", advice)


def _refuse_change(
    queue: Queue, fields: dict[str, Any], field: str, kind: str, what: str, advice: str
) -> None:
    """InvalidArgument when ``fields`` would change ``field``, a setting fixed when the
    queue is created; ``kind`` says what the queue is, ``what`` names the setting."""
    if field in fields and fields[field] != getattr(queue, field):
        raise InvalidArgument(
            f"Queue {queue.name!r} is {kind}, and a queue's {what} cannot change after it is "
            f"created; {advice}.",
            field=field,
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
def drop_queue(name: QueueRef) -> bool:
    """Remove a queue with its messages and archive; False if there was no such queue."""
    deleted, _ = Queue.objects.using(_db()).filter(name=v.name(name)).delete()
    return deleted > 0


@recovers()
def purge_queue(name: QueueRef) -> int:
    """Delete every message of the queue (leased ones too); returns how many."""
    queue_id, count = Message.objects.db_manager(_db()).purge(v.name(name))
    if queue_id is None:
        raise QueueNotFound.for_name(name)
    return count


@recovers()
def list_queues() -> list[Queue]:
    """Every queue, in name order (PGMQ ``list_queues``)."""
    return list(Queue.objects.using(_db()).order_by("name"))


@recovers()
def pause_queue(name: QueueRef) -> Queue:
    """Stop deliveries: reads raise QueuePaused and workers skip it; sends still land."""
    return _set_flag(name, paused=True)


@recovers()
def resume_queue(name: QueueRef) -> Queue:
    """Deliver again after :func:`pause_queue`; waiting consumers are woken at once."""
    return _set_flag(name, paused=False)


def _set_flag(name: Any, **flag: bool) -> Queue:
    queue = get_queue(name)
    Queue.objects.using(_db()).filter(pk=queue.pk).update(**flag)
    for key, value in flag.items():
        setattr(queue, key, value)
    if not flag.get("paused", True):
        from ..store.notify import notify_queue

        notify_queue(queue.name)
    return queue
