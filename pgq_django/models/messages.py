"""Live and archived messages.

Both tables are partitioned by ``msg_id`` range and created by RunSQL in the migrations; the
models carry the matching state so the ORM, the admin and the API can use them. ``queue`` is a
relation without a database constraint (counter rows have none either): a key would
share-lock the queue's row on every send and archival (migration 0011). Dropping a queue
still removes its rows in the same statement, through a trigger on ``pgq_queue``, and upkeep
sweeps the rows a racing send may commit after the drop
(:class:`~pgq_django.models.DroppedQueue`); Django is told not to emulate a cascade.
"""

from __future__ import annotations

from django.db import models

from ..receipts import Receipt
from ..store.managers import ArchivedMessageManager, MessageManager
from .fields import NextMessageId
from .queues import Queue


class MessageFields(models.Model):
    msg_id = models.BigIntegerField(primary_key=True, db_default=NextMessageId())
    queue = models.ForeignKey(
        Queue, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    message = models.JSONField(null=True)
    headers = models.JSONField(default=dict)
    attributes = models.JSONField(default=dict)
    label = models.TextField(null=True, blank=True)
    priority = models.IntegerField(default=0)
    read_ct = models.IntegerField(default=0)
    enqueued_at = models.DateTimeField()
    vt = models.DateTimeField()
    expires_at = models.DateTimeField(null=True, blank=True)
    group_id = models.TextField(null=True, blank=True)
    dedup_id = models.TextField(null=True, blank=True)
    max_retries = models.IntegerField(null=True, blank=True)
    retry_delay = models.FloatField(null=True, blank=True)
    cancel_requested = models.BooleanField(default=False)
    # When a PGMQ read last leased the message (PGMQ's message_record.last_read_at): NULL
    # until the first read through the PGMQ SQL interface (pgq_django.pgmq), which keeps it.
    # After MESSAGE_COLUMNS, so the hot-path statements leave it out and it loads on access.
    last_read_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True

    @property
    def receipt(self) -> Receipt:
        return Receipt(self.msg_id, self.read_ct)

    @property
    def queue_name(self) -> str:
        """The queue's name; the API fills it in so reading it costs no query."""
        known = self.__dict__.get("_queue_name")
        return known if known is not None else self.queue.name

    @queue_name.setter
    def queue_name(self, value: str) -> None:
        self.__dict__["_queue_name"] = value


class Message(MessageFields):
    """A message still in its queue: pending, delayed, or leased until ``vt``."""

    # The queue a dead-lettered message failed on, set only by the dead-letter statements:
    # redrive's destination comes from here, never from a header a sender could write.
    # Not among MESSAGE_COLUMNS (the archive has no such column), so the hot-path statements
    # leave it out and it loads on first access.
    dead_letter_origin = models.ForeignKey(
        Queue,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        related_name="+",
    )

    objects = MessageManager()

    class Meta:
        app_label = "pgq_django"
        db_table = "pgq_message"
        managed = True
        ordering = ["priority", "msg_id"]

    def __str__(self) -> str:
        return f"message {self.msg_id}"


class Outcome(models.TextChoices):
    ACKED = "acked", "acked"
    DEAD = "dead", "dead"
    EXPIRED = "expired", "expired"
    CANCELLED = "cancelled", "cancelled"
    ARCHIVED = "archived", "archived"


class ArchivedMessage(MessageFields):
    """A message that left its queue with a recorded outcome (PGMQ's archive)."""

    archived_at = models.DateTimeField()
    outcome = models.CharField(max_length=12, choices=Outcome.choices)
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(null=True, blank=True)

    objects = ArchivedMessageManager()

    class Meta:
        app_label = "pgq_django"
        db_table = "pgq_archived_message"
        ordering = ["msg_id"]

    def __str__(self) -> str:
        return f"archived message {self.msg_id} ({self.outcome})"


class QueueCounter(models.Model):
    """Append-only event counts (sent, acked, dead, ...) per queue.

    Writers only insert, so counting never takes a lock that concurrent senders or consumers
    would wait on; maintenance folds old rows together.
    """

    # Indexed together with kind by the migration; no separate index of its own.
    queue = models.ForeignKey(
        Queue, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    kind = models.CharField(max_length=12)
    n = models.BigIntegerField()
    at = models.DateTimeField()

    class Meta:
        app_label = "pgq_django"
        db_table = "pgq_queue_counter"
