"""URLs of the REST API: ``path("", include("pgq_django.rest.urls"))`` mounts them at /v1/.

Also serves the OpenAPI schema (``/v1/schema``), Swagger UI with locally served assets
(``/v1/docs``), Prometheus metrics (``/metrics``) and a readiness answer (``/v1/ready``).
"""

from __future__ import annotations

from django.urls import path, re_path

from ..prometheus import MetricsView
from .docs import SchemaView, SwaggerView
from .views.base import UnknownPathView
from .views.groups import GroupDetailView
from .views.messages import AckBatchView, AckView, MessagesSlashView, MessagesView, NackView
from .views.queues import (
    QueueCleanupView,
    QueueDetailView,
    QueueListView,
    QueuePurgeView,
    QueueStatsView,
)
from .views.ready import ReadyView
from .views.schedules import ScheduleDetailView, ScheduleListView
from .views.topics import (
    SubscriptionDetailView,
    SubscriptionListView,
    TopicDetailView,
    TopicListView,
    TopicMessagesView,
)

app_name = "pgq_rest"

urlpatterns = [
    path("v1/queues", QueueListView.as_view(), name="queues"),
    path("v1/queues/<str:queue>", QueueDetailView.as_view(), name="queue"),
    path("v1/queues/<str:queue>/stats", QueueStatsView.as_view(), name="queue-stats"),
    path("v1/queues/<str:queue>/purge", QueuePurgeView.as_view(), name="queue-purge"),
    path("v1/queues/<str:queue>/cleanup", QueueCleanupView.as_view(), name="queue-cleanup"),
    path("v1/queues/<str:queue>/messages", MessagesView.as_view(), name="messages"),
    # psqlqueue's README consumes once with a trailing slash; both spellings work.
    path("v1/queues/<str:queue>/messages/", MessagesSlashView.as_view(), name="messages-slash"),
    path("v1/queues/<str:queue>/messages/ack", AckBatchView.as_view(), name="messages-ack"),
    path("v1/queues/<str:queue>/messages/<str:message>/ack", AckView.as_view(), name="ack"),
    path("v1/queues/<str:queue>/messages/<str:message>/nack", NackView.as_view(), name="nack"),
    path("v1/topics", TopicListView.as_view(), name="topics"),
    path("v1/topics/<str:topic>", TopicDetailView.as_view(), name="topic"),
    path("v1/topics/<str:topic>/messages", TopicMessagesView.as_view(), name="topic-messages"),
    path("v1/subscriptions", SubscriptionListView.as_view(), name="subscriptions"),
    path(
        "v1/subscriptions/<str:subscription>",
        SubscriptionDetailView.as_view(),
        name="subscription",
    ),
    path("v1/groups/<str:group>", GroupDetailView.as_view(), name="group"),
    path("v1/schedules", ScheduleListView.as_view(), name="schedules"),
    path("v1/schedules/<str:schedule>", ScheduleDetailView.as_view(), name="schedule"),
    path("v1/schema", SchemaView.as_view(), name="schema"),
    path("v1/docs", SwaggerView.as_view(url_name="pgq_rest:schema"), name="docs"),
    path("metrics", MetricsView.as_view(), name="metrics"),
    path("v1/ready", ReadyView.as_view(), name="ready"),
    re_path(r"^v1/", UnknownPathView.as_view(), name="unknown"),
]
