"""Exchanges and bindings: publish once, deliver a copy to every queue whose binding matches.

An exchange owns no messages. Publishing routes the message through the exchange's bindings
and inserts one copy per matched queue in a single statement (see :mod:`pgq_django.routing`).
The foreign keys of a binding to its exchange and queue are enforced by the database with
``ON DELETE CASCADE`` (added in migration 0002), so dropping a queue unbinds it however the
queue is deleted — ORM, admin or raw SQL — and Django is told not to emulate them.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

from .queues import QUEUE_NAME_PATTERN, Queue


class ExchangeType(models.TextChoices):
    FANOUT = "fanout", "fanout"
    DIRECT = "direct", "direct"
    TOPIC = "topic", "topic"
    HEADERS = "headers", "headers"


class ExchangeManager(models.Manager["Exchange"]):
    """``Exchange.objects``: adds the one-statement publish."""

    def publish_body(self, exchange: str, body: str, *, size: int, **options: Any) -> Any:
        """Route one JSON-encoded body; returns (exchange_id or None, [msg_id …], too_large,
        full).

        ``too_large`` names a matched queue whose max_message_size the body exceeds and
        ``full`` one that holds its max_length messages; nothing is inserted then. With a
        ``dedup_id`` each routed queue deduplicates the copy as a send would.
        """
        from ..conf import settings as pgq_settings
        from ..delivery import DEDUP_WINDOW_SECONDS
        from ..managers import execute_statement
        from ..routing import PUBLISH, PUBLISH_DEDUPLICATED, topic_subject

        alias = self._db or pgq_settings.DATABASE
        key = options.pop("routing_key")
        params = {
            "exchange": exchange,
            "body": body,
            "size": size,
            "routing_key": key,
            "topic_subject": topic_subject(key),
            "channel": pgq_settings.NOTIFY_CHANNEL,
            "window": DEDUP_WINDOW_SECONDS,
            **options,
        }
        statement = PUBLISH if options.get("dedup_id") is None else PUBLISH_DEDUPLICATED
        with execute_statement(statement, params, alias) as cursor:
            exchange_id, ids, too_large, _notified, full = cursor.fetchone()
        return exchange_id, list(ids or []), too_large, full


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
        from ..routing import topic_regex

        self.key_pattern = topic_regex(self.routing_key or "")
        super().save(*args, **kwargs)
