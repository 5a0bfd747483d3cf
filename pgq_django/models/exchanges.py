"""Exchanges and bindings: publish once, deliver a copy to every queue whose binding matches.

An exchange owns no messages. Publishing routes the message through the exchange's bindings
and inserts one copy per matched queue in a single statement
(:data:`pgq_django.store.sql.exchanges.PUBLISH`, run by ``Exchange.objects.publish_body``).
The foreign keys of a binding to its exchange and queue are enforced by the database with
``ON DELETE CASCADE`` (added in migration 0002), so dropping a queue unbinds it however the
queue is deleted — ORM, admin or raw SQL — and Django is told not to emulate them.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

from ..routing import topic_regex
from ..store.managers import ExchangeManager
from .queues import QUEUE_NAME_PATTERN, Queue


class ExchangeType(models.TextChoices):
    FANOUT = "fanout", "fanout"
    DIRECT = "direct", "direct"
    TOPIC = "topic", "topic"
    HEADERS = "headers", "headers"


class Exchange(models.Model):
    """A named router of messages to queues (pgpro_queue exchanges, psqlqueue topics)."""

    name = models.CharField(
        max_length=85,
        unique=True,
        validators=[RegexValidator(QUEUE_NAME_PATTERN)],
        help_text="Same rule as queue names.",
    )
    type = models.CharField(max_length=8, choices=ExchangeType.choices, default=ExchangeType.FANOUT)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="pgq_exchanges",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    objects = ExchangeManager()

    class Meta:
        app_label = "pgq_django"
        db_table = "pgq_exchange"
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.type})"


class Binding(models.Model):
    """One route from an exchange to a queue.

    ``routing_key`` is compared for equality on direct exchanges and is an AMQP pattern
    (``*`` one word, ``#`` zero or more words) on topic exchanges; fanout and headers
    exchanges ignore it. ``key_pattern`` is the topic pattern compiled to a regular expression
    when the binding is made, so publishing matches with one ``~`` per binding. ``filters``
    (psqlqueue ``message_filters``) narrow any exchange type: ``{"attr": ["v1", "v2"]}``
    matches when every key is present in the message's headers (or, failing that, its
    attributes) with one of the listed values.
    """

    # psqlqueue's subscription id; bindings made from Python need none.
    name = models.CharField(
        max_length=85,
        null=True,
        blank=True,
        unique=True,
        validators=[RegexValidator(QUEUE_NAME_PATTERN)],
        help_text="Subscription id (REST); same rule as queue names.",
    )
    exchange = models.ForeignKey(
        Exchange, on_delete=models.DO_NOTHING, db_constraint=False, related_name="bindings"
    )
    queue = models.ForeignKey(
        Queue, on_delete=models.DO_NOTHING, db_constraint=False, related_name="bindings"
    )
    routing_key = models.CharField(max_length=255, blank=True, default="")
    key_pattern = models.TextField(blank=True, default="", editable=False)
    filters = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        app_label = "pgq_django"
        db_table = "pgq_binding"
        ordering = ["exchange_id", "queue_id", "routing_key"]
        constraints = [
            models.UniqueConstraint(
                fields=["exchange", "queue", "routing_key"], name="pgq_binding_unique_route"
            )
        ]

    def __str__(self) -> str:
        key = f" [{self.routing_key}]" if self.routing_key else ""
        return f"{self.exchange_id} → {self.queue_id}{key}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Keep the compiled topic pattern in step with the routing key (admin edits too)."""
        self.key_pattern = topic_regex(self.routing_key or "")
        super().save(*args, **kwargs)
