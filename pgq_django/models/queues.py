"""The Queue model: a named queue and the settings its messages are delivered under."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.db.models.functions import Lower

from ..store.managers import QueueManager

QUEUE_NAME_PATTERN = r"^[A-Za-z0-9_-]{1,80}(\.fifo)?$"


class Backoff(models.TextChoices):
    NONE = "none", "none"
    LINEAR = "linear", "linear"
    EXPONENTIAL = "exponential", "exponential"


class Queue(models.Model):
    """A queue. Its messages live in the partitioned message table, keyed by ``queue_id``."""

    name = models.CharField(
        max_length=85,
        unique=True,
        validators=[RegexValidator(QUEUE_NAME_PATTERN)],
        help_text="Letters, digits, '-' and '_' (1-80), with an optional '.fifo' suffix.",
    )
    fifo = models.BooleanField(default=False)
    visibility_timeout = models.FloatField(default=30, validators=[MinValueValidator(0)])
    delivery_delay = models.FloatField(default=0, validators=[MinValueValidator(0)])
    retention = models.FloatField(default=14 * 24 * 3600, validators=[MinValueValidator(1)])
    max_retries = models.PositiveIntegerField(default=10)
    retry_delay = models.FloatField(default=30, validators=[MinValueValidator(0)])
    backoff = models.CharField(max_length=12, choices=Backoff.choices, default=Backoff.EXPONENTIAL)
    backoff_cap = models.FloatField(default=3600, validators=[MinValueValidator(0)])
    backoff_jitter = models.BooleanField(default=True)
    dead_letter_queue = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="source_queues"
    )
    max_message_size = models.PositiveIntegerField(default=1024 * 1024)
    max_length = models.PositiveBigIntegerField(null=True, blank=True)
    archive_on_ack = models.BooleanField(default=False)
    durable = models.BooleanField(
        default=True,
        db_default=True,
        help_text="Whether the queue's live messages are WAL-logged (crash-safe). A "
        "non-durable queue keeps them in UNLOGGED partitions: faster sends and acks, emptied "
        "by a crash. Fixed when the queue is created.",
    )
    # SQS queue settings with no pgq meaning of their own (the SQS endpoint reads them).
    content_based_deduplication = models.BooleanField(
        default=False,
        db_default=False,
        help_text="FIFO queues: deduplicate SQS sends without a MessageDeduplicationId by the "
        "SHA-256 of their body.",
    )
    deduplication_scope = models.CharField(
        max_length=12,
        default="queue",
        db_default="queue",
        choices=[("queue", "queue"), ("messageGroup", "messageGroup")],
        help_text="FIFO queues: whether an SQS MessageDeduplicationId is unique in the queue "
        "or within its message group (SQS's DeduplicationScope).",
    )
    fifo_throughput_limit = models.CharField(
        max_length=17,
        default="perQueue",
        db_default="perQueue",
        choices=[("perQueue", "perQueue"), ("perMessageGroupId", "perMessageGroupId")],
        help_text="FIFO queues: SQS's FifoThroughputLimit, kept and answered for SQS clients "
        "(pgq_django applies no throughput quota).",
    )
    receive_wait_time = models.FloatField(
        default=0,
        db_default=0,
        validators=[MinValueValidator(0)],
        help_text="Seconds an SQS ReceiveMessage waits when it does not say (long polling).",
    )
    tags = models.JSONField(
        default=dict, db_default={}, blank=True, help_text="Key/value labels (SQS tags)."
    )
    paused = models.BooleanField(default=False)
    rate_limit = models.FloatField(null=True, blank=True, validators=[MinValueValidator(0)])
    concurrency_limit = models.PositiveIntegerField(null=True, blank=True)
    callback = models.CharField(
        max_length=255,
        blank=True,
        default="",
        help_text="Dotted path of a function the worker calls for each message.",
    )
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="pgq_queues",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = QueueManager()

    class Meta:
        app_label = "pgq_django"
        db_table = "pgq_queue"
        ordering = ["name"]
        constraints = [
            # PGMQ folds a name to lower case (its tables, and our views, are q_<lower name>),
            # so two names differing only in case would be one queue to its clients: a second
            # one could take over the first's views. One queue per folded name, whatever door
            # creates or renames it.
            models.UniqueConstraint(
                Lower("name"),
                name="pgq_queue_name_folded_uniq",
                violation_error_message="A queue of this name, ignoring case, already exists.",
            )
        ]

    def __str__(self) -> str:
        return self.name


class DroppedQueue(models.Model):
    """A dropped queue's id, remembered for a while after the drop.

    The message, archive and counter tables have no foreign key to the queue (a key check
    share-locks the queue row on every send; migration 0011 says why). A drop deletes the
    queue's rows in its own transaction, but a statement that found the queue before the drop
    committed can still commit a row after it. Upkeep deletes such rows by these ids
    (:meth:`~pgq_django.store.managers.delivery.DeliveryMethods.sweep_dropped_queues`); nothing
    reads them meanwhile, since every statement finds its queue by name.
    """

    queue_id = models.BigIntegerField(primary_key=True)
    dropped_at = models.DateTimeField()

    class Meta:
        app_label = "pgq_django"
        db_table = "pgq_dropped_queue"

    def __str__(self) -> str:
        return f"queue {self.queue_id}, dropped {self.dropped_at:%Y-%m-%d %H:%M:%S}"
