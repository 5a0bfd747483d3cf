"""``GET /v1/ready``: whether this process can reach its queue database, for a load
balancer's or an orchestrator's readiness probe."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from ...readiness import database_status
from .base import PgqView


class ReadyView(PgqView):
    """200 while the database is up, 503 during an outage, with what the process knows.

    Open to anyone and answered without touching the database: no authentication (which
    would query it), no round trip (see :func:`pgq_django.readiness.database_status`). It
    says only whether the database is reachable, for how long it has not been, and how
    many attempts were made.
    """

    schema = None  # an operations endpoint, not part of the queue API's document
    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]

    def get_authenticators(self) -> list[Any]:
        return []

    def get(self, request: Request) -> Response:
        state = database_status()
        body = {
            "ready": state.up,
            "database": {
                "alias": state.alias,
                "up": state.up,
                "down_for_seconds": round(state.down_for, 1),
                "attempts": state.attempts,
                "next_attempt_in_seconds": round(state.next_attempt_in, 1),
                "outages": state.outages,
            },
        }
        return Response(body, status=200 if state.up else 503)
