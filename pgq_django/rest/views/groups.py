"""``/v1/groups/{id}``: how a group sent by ``pgq.group`` stands (docs/workflows.md)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

import pgq_django as pgq

from ... import access
from ...api.workflows import group_queue
from ...exceptions import GroupNotFound, InvalidArgument, QueueNotFound
from .. import serializers as s
from ..permissions import require_queue
from .base import PgqView

ERRORS = {code: s.ErrorOut for code in (400, 401, 403, 404)}


def _group_id(text: str) -> int:
    """The group id of the path; anything but digits is a 400, not a 500."""
    if not (text.isascii() and text.isdigit()) or len(text) > 19:
        raise InvalidArgument(f"{text[:40]!r} is not a group id.", field="group")
    return int(text)


class GroupDetailView(PgqView):
    @extend_schema(operation_id="groups_retrieve", responses={200: s.GroupOut, **ERRORS})
    def get(self, request: Request, group: str) -> Response:
        """A group's status (pending, done, failed) and counts; needs the read right on the
        queue its members were sent to. A group on whose queue the caller holds no right
        answers the same 404 as a missing one. The follow-up may go to another queue: its
        queue and id are shown only to a caller who may read that queue (to anyone else the
        group looks like one without a follow-up)."""
        ident = _group_id(group)
        try:
            require_queue(request.user, "read", group_queue(ident))
        except QueueNotFound:
            raise GroupNotFound.for_id(ident) from None
        status = pgq.group_status(ident).as_dict()
        follow_up = status["then_queue_name"]
        if follow_up and not access.may(request.user, "read", follow_up):
            status.update(then_msg_id=None, then_queue_name="")
        return Response(s.GroupOut(status).data)
