"""``/v1/schedules``: periodic schedules (``pgq.schedule``) over HTTP.

A schedule sends messages to its queue on its own, so keeping one is managing that queue:
listing shows the schedules of queues the caller may manage, and creating, changing or
deleting one needs the manage right on its queue. A schedule of a queue the caller holds no
right on answers the same 404 as a missing one.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

import pgq_django as pgq

from ... import access
from ...conf import settings
from ...exceptions import PermissionDenied, QueueNotFound, ScheduleNotFound
from ...models import Schedule
from .. import serializers as s
from ..permissions import require_queue
from .base import PgqView, no_content
from .params import page
from .queues import ERRORS, PAGE


class ScheduleIn(s.Strict):
    name = s.StrictText(help_text="The schedule's name; a second POST with it updates it.")
    cron = s.StrictText(help_text="Cron expression: five fields, or six with seconds first.")
    queue = s.Name(help_text="The queue each tick's message goes to.")
    message = s.AnyJSON(help_text="The body of each message: any JSON value.")
    timezone = s.StrictText(required=False, help_text="IANA time zone of the cron fields.")
    headers = s.JSONObject(required=False, help_text="Headers of each message (no pgq_ keys).")
    catch_up = s.StrictBool(required=False, help_text="Send every missed tick after downtime.")


class ScheduleOut(serializers.Serializer):
    name = serializers.CharField()
    cron = serializers.CharField()
    queue = serializers.CharField()
    message = serializers.JSONField(allow_null=True)
    timezone = serializers.CharField()
    headers = serializers.DictField()
    catch_up = serializers.BooleanField()
    last_tick = serializers.DateTimeField(allow_null=True)
    next_tick = serializers.DateTimeField()


class ScheduleListOut(serializers.Serializer):
    data = ScheduleOut(many=True)
    limit = serializers.IntegerField()
    offset = serializers.IntegerField()


def schedule_json(found: Schedule) -> dict[str, Any]:
    return {
        "name": found.name,
        "cron": found.cron,
        "queue": found.queue.name,
        "message": found.message,
        "timezone": found.timezone,
        "headers": found.headers,
        "catch_up": found.catch_up,
        "last_tick": found.last_tick.isoformat() if found.last_tick else None,
        "next_tick": found.next_tick.isoformat(),
    }


def _managed(user: Any, name: str) -> Schedule:
    """The schedule ``name`` if ``user`` may manage its queue; 404 when it is missing or
    its queue is one the user holds no right on, 403 with another right."""
    found = pgq.get_schedule(name)
    try:
        require_queue(user, "manage", found.queue.name)
    except QueueNotFound:
        raise ScheduleNotFound.for_name(name) from None
    return found


def _require_change(user: Any, name: str) -> None:
    """A schedule that exists already is changed only by a manager of its current queue
    (403, without naming that queue, for anyone else); a new name is free to take."""
    try:
        found = pgq.get_schedule(name)
    except ScheduleNotFound:
        return
    if not access.may(user, "manage", found.queue):
        raise PermissionDenied(
            f"{user.get_username()} may not change the schedule {name!r}: that needs the "
            "manage right on the queue it sends to.",
            right="manage",
        )


class ScheduleListView(PgqView):
    @extend_schema(
        operation_id="schedules_list",
        parameters=PAGE,
        responses={200: ScheduleListOut, **ERRORS},
    )
    def get(self, request: Request) -> Response:
        """The schedules of the queues the caller may manage, in name order."""
        limit, offset = page(request)
        managed = access.queues_for(request.user, "manage")
        rows = (
            Schedule.objects.using(settings.DATABASE)
            .filter(queue__in=managed)
            .select_related("queue")
            .order_by("name")[offset : offset + limit]
        )
        return Response(
            {"data": [schedule_json(x) for x in rows], "limit": limit, "offset": offset}
        )

    @extend_schema(
        operation_id="schedules_create",
        request=ScheduleIn,
        responses={201: ScheduleOut, **ERRORS},
    )
    def post(self, request: Request) -> Response:
        """Create or update a schedule; needs the manage right on its queue (and, to move
        an existing schedule, on the queue it had)."""
        data = self.body(request, ScheduleIn)
        require_queue(request.user, "manage", data["queue"])
        _require_change(request.user, data["name"])
        found = pgq.schedule(
            data["name"],
            data["cron"],
            data["queue"],
            data["message"],
            timezone=data.get("timezone", "UTC"),
            headers=data.get("headers"),
            catch_up=data.get("catch_up", False),
        )
        return Response(schedule_json(found), status=201)


class ScheduleDetailView(PgqView):
    @extend_schema(operation_id="schedules_retrieve", responses={200: ScheduleOut, **ERRORS})
    def get(self, request: Request, schedule: str) -> Response:
        return Response(schedule_json(_managed(request.user, schedule)))

    @extend_schema(operation_id="schedules_destroy", responses={204: None, **ERRORS})
    def delete(self, request: Request, schedule: str) -> Response:
        """Delete the schedule; messages it already sent stay in their queue."""
        _managed(request.user, schedule)
        pgq.unschedule(schedule)
        return no_content()
