"""``/v1/queues``: create, list, show, change and drop queues; stats, purge, cleanup."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

import pgq_django as pgq

from .. import serializers as s
from ..permissions import require_model_permission, require_queue, visible_queues
from .base import PgqView, no_content
from .params import page

ANY_RIGHT = ("read", "write", "manage")
PAGE = [
    OpenApiParameter("limit", {"type": "integer", "minimum": 1, "maximum": 1000}),
    OpenApiParameter("offset", {"type": "integer", "minimum": 0}),
]
ERRORS = {code: s.ErrorOut for code in (400, 401, 403, 404, 409, 413)}


def _queue_options(user: Any, data: dict[str, Any]) -> dict[str, Any]:
    options = {s.QUEUE_FIELDS[key]: value for key, value in data.items() if key in s.QUEUE_FIELDS}
    dlq = options.get("dead_letter_queue")
    if dlq is not None:
        # Dead letters are sends to that queue: the caller must be allowed to write there.
        require_queue(user, ("write", "manage"), dlq)
    return options


class QueueListView(PgqView):
    @extend_schema(
        operation_id="queues_list", parameters=PAGE, responses={200: s.QueueListOut, **ERRORS}
    )
    def get(self, request: Request) -> Response:
        limit, offset = page(request)
        queues = visible_queues(request.user).select_related("dead_letter_queue")
        rows = list(queues[offset : offset + limit])
        return Response({"data": [s.queue_json(q) for q in rows], "limit": limit, "offset": offset})

    @extend_schema(
        operation_id="queues_create",
        request=s.QueueCreateIn,
        responses={201: s.QueueOut, **ERRORS},
    )
    def post(self, request: Request) -> Response:
        data = self.body(request, s.QueueCreateIn)
        require_model_permission(request.user, "add_queue", "queues")
        options = _queue_options(request.user, data)
        queue = pgq.create_queue(data["id"], owner=request.user, **options)
        return Response(s.queue_json(queue), status=201)


class QueueDetailView(PgqView):
    @extend_schema(operation_id="queues_retrieve", responses={200: s.QueueOut, **ERRORS})
    def get(self, request: Request, queue: str) -> Response:
        require_queue(request.user, ANY_RIGHT, queue)
        return Response(s.queue_json(pgq.get_queue(queue)))

    @extend_schema(
        operation_id="queues_update",
        request=s.QueueUpdateIn,
        responses={200: s.QueueOut, **ERRORS},
    )
    def put(self, request: Request, queue: str) -> Response:
        data = self.body(request, s.QueueUpdateIn)
        require_queue(request.user, "manage", queue)
        options = _queue_options(request.user, data)
        return Response(s.queue_json(pgq.alter_queue(queue, **options)))

    @extend_schema(operation_id="queues_destroy", responses={204: None, **ERRORS})
    def delete(self, request: Request, queue: str) -> Response:
        require_queue(request.user, "manage", queue)
        pgq.drop_queue(queue)
        return no_content()


class QueueStatsView(PgqView):
    @extend_schema(operation_id="queues_stats", responses={200: s.StatsOut, **ERRORS})
    def get(self, request: Request, queue: str) -> Response:
        require_queue(request.user, ANY_RIGHT, queue)
        m = pgq.metrics(queue)
        return Response(
            {
                "num_undelivered_messages": m.queue_length,
                "oldest_unacked_message_age_seconds": int(m.oldest_msg_age_sec or 0),
                "queue_length": m.queue_length,
                "in_flight": m.in_flight,
                "dead_letters": m.dead_letters,
                "total_messages": m.total_messages,
                "newest_msg_age_sec": m.newest_msg_age_sec,
                "oldest_msg_age_sec": m.oldest_msg_age_sec,
            }
        )


class QueuePurgeView(PgqView):
    @extend_schema(operation_id="queues_purge", request=None, responses={204: None, **ERRORS})
    def put(self, request: Request, queue: str) -> Response:
        require_queue(request.user, "manage", queue)
        pgq.purge_queue(queue)
        return no_content()


class QueueCleanupView(PgqView):
    @extend_schema(operation_id="queues_cleanup", request=None, responses={204: None, **ERRORS})
    def put(self, request: Request, queue: str) -> Response:
        """Archive the queue's messages that are past their retention or expiry."""
        require_queue(request.user, "manage", queue)
        pgq.expire_messages(queue)
        return no_content()
