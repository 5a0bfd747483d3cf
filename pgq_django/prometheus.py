"""Prometheus exposition of every queue's numbers: ``GET /metrics``.

(The module is not called ``metrics``: importing ``pgq_django.metrics`` would replace the
public function ``pgq_django.metrics`` with the module.)

:class:`QueueCollector` is a prometheus-client custom collector: each scrape calls
:func:`pgq_django.metrics_all` once — one query however many queues exist — and turns each
:class:`~pgq_django.api.stats.QueueMetrics` into labelled samples. Nothing is kept between
scrapes, so several processes serving /metrics agree and none has to be the one scraped.

Who may scrape is ``PGQ["METRICS_PERMISSION"]`` (a DRF permission class as a dotted path).
The default, :class:`CanScrapeMetrics`, admits active staff users (basic, session or token
authentication, like the REST API) and requests that carry
``Authorization: Bearer <PGQ["METRICS_TOKEN"]>`` when that setting is set; anyone else gets
401/403. Set it to ``"rest_framework.permissions.AllowAny"`` to open it.

What a scrape shows depends on who asks (:func:`scraped_queues`): a staff user sees the
queues their grants let them see, as ``GET /v1/queues`` lists them; superusers and the
token's bearer see every queue.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from typing import Any

from django.http import HttpResponse
from django.utils.module_loading import import_string
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from . import access
from .conf import settings
from .exceptions import DatabaseUnavailable
from .readiness import database_status
from .rest.views.base import PgqView


class QueueCollector(Collector):
    """Per-queue gauges and counters from one ``metrics_all()`` call per scrape.

    ``queues`` limits the samples to those queue names; None exports every queue.
    """

    def __init__(self, queues: set[str] | None = None) -> None:
        self.queues = queues

    def collect(self) -> Iterator[Metric]:
        import pgq_django as pgq

        try:
            rows = pgq.metrics_all()
        except DatabaseUnavailable:
            # An outage: the scrape still answers, with the database gauges saying so.
            return
        if self.queues is not None:
            rows = [m for m in rows if m.queue_name in self.queues]
        labels = ["queue"]
        length = GaugeMetricFamily(
            "pgq_queue_length", "Messages in the queue (pending and leased).", labels=labels
        )
        in_flight = GaugeMetricFamily(
            "pgq_queue_in_flight", "Messages leased and not yet acknowledged.", labels=labels
        )
        oldest = GaugeMetricFamily(
            "pgq_queue_oldest_message_age_seconds",
            "Age of the oldest message in the queue (0 when empty).",
            labels=labels,
        )
        newest = GaugeMetricFamily(
            "pgq_queue_newest_message_age_seconds",
            "Age of the newest message in the queue (0 when empty).",
            labels=labels,
        )
        sent = CounterMetricFamily(
            "pgq_messages_sent", "Messages ever sent to the queue.", labels=labels
        )
        dead = CounterMetricFamily(
            "pgq_messages_dead", "Messages that ran out of retries.", labels=labels
        )
        acked = CounterMetricFamily(
            "pgq_messages_acked", "Messages acknowledged by consumers.", labels=labels
        )
        has_acked = False
        for m in rows:
            name = [m.queue_name]
            length.add_metric(name, m.queue_length)
            in_flight.add_metric(name, m.in_flight)
            oldest.add_metric(name, m.oldest_msg_age_sec or 0.0)
            newest.add_metric(name, m.newest_msg_age_sec or 0.0)
            sent.add_metric(name, m.total_messages)
            dead.add_metric(name, m.dead_letters)
            # QueueMetrics grows an acked count in a later version; export it when present.
            count = getattr(m, "acked", None)
            if count is not None:
                has_acked = True
                acked.add_metric(name, count)
        yield from (length, in_flight, oldest, newest, sent, dead)
        if has_acked:
            yield acked


class DatabaseCollector(Collector):
    """Whether this process reaches its queue database, from what it last saw (no query:
    see :func:`pgq_django.readiness.database_status`), so a scrape answers during an outage
    too and an alert can fire on ``pgq_database_up == 0``."""

    def collect(self) -> Iterator[Metric]:
        state = database_status()
        labels = ["database"]
        alias = [state.alias]
        up = GaugeMetricFamily(
            "pgq_database_up",
            "1 while this process reaches its queue database, 0 during an outage.",
            labels=labels,
        )
        up.add_metric(alias, 1.0 if state.up else 0.0)
        down_for = GaugeMetricFamily(
            "pgq_database_outage_seconds",
            "How long the current outage has lasted (0 while the database is up).",
            labels=labels,
        )
        down_for.add_metric(alias, state.down_for)
        attempts = GaugeMetricFamily(
            "pgq_database_reconnect_attempts",
            "Failed reconnection attempts in the current outage (0 while up).",
            labels=labels,
        )
        attempts.add_metric(alias, state.attempts)
        outages = CounterMetricFamily(
            "pgq_database_outages", "Outages this process has seen since it started.", labels=labels
        )
        outages.add_metric(alias, state.outages)
        yield from (up, down_for, attempts, outages)


def exposition(queues: set[str] | None = None) -> bytes:
    """The Prometheus text of one scrape: of the queues named in ``queues``, or all, and
    whether the database is reachable."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector())
    registry.register(QueueCollector(queues))
    return generate_latest(registry)


def bears_metrics_token(request: Request) -> bool:
    """Whether the request carries ``Authorization: Bearer <PGQ["METRICS_TOKEN"]>``."""
    token = settings.METRICS_TOKEN
    header = request.META.get("HTTP_AUTHORIZATION", "")
    if not token or not header.startswith("Bearer "):
        return False
    offered = header[len("Bearer ") :].strip().encode()
    return hmac.compare_digest(offered, str(token).encode())


def scraped_queues(request: Request) -> set[str] | None:
    """The queues a scrape shows: every queue (None) to the token's bearer, a superuser, or
    an anonymous request a project's own ``METRICS_PERMISSION`` let in (metrics it opened
    to anyone); to any other user, the queues they hold a right on, as the REST API lists
    them."""
    user = request.user
    if bears_metrics_token(request) or not (user and user.is_authenticated):
        return None
    if user.is_active and user.is_superuser:
        return None
    return set(access.visible_queues(user).values_list("name", flat=True))


class CanScrapeMetrics(BasePermission):
    """Active staff users, or a request bearing ``PGQ["METRICS_TOKEN"]`` when it is set."""

    def has_permission(self, request: Request, view: Any) -> bool:
        if bears_metrics_token(request):
            return True
        user = request.user
        return bool(user and user.is_active and user.is_staff)


class MetricsView(PgqView):
    """``GET /metrics``: the Prometheus text format (version 0.0.4)."""

    schema = None  # text, not JSON: not part of the OpenAPI document

    def get_permissions(self) -> list[BasePermission]:
        return [import_string(settings.METRICS_PERMISSION)()]

    def get(self, request: Request) -> HttpResponse:
        return HttpResponse(exposition(scraped_queues(request)), content_type=CONTENT_TYPE_LATEST)
