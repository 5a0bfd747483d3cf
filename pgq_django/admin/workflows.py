"""Groups in the admin: each group's status and counts, and its members with their outcomes.

Read-only: a group changes only as its members are acknowledged or fail. A staff user sees
the groups sent to queues they may read (superusers see all), as the message browser shows
those queues' messages; a follow-up sent to another queue is named (queue and id) only to a
user who may read that queue too, as over REST. What a message waits for is shown in the
message browser.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import BooleanField, Case, Count, Q, QuerySet, Value, When
from django.http import HttpRequest

from .. import access
from ..models import Dependency, WorkflowGroup
from .common import is_staff

_SUCCEEDED = ("acked", "archived")


class MemberInline(admin.TabularInline):
    model = Dependency
    fk_name = "group"
    fields = ("msg_id", "outcome", "finished_at", "dependant_id")
    readonly_fields = fields
    extra = 0
    can_delete = False
    verbose_name = "member"
    verbose_name_plural = "members (and what they release)"

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Whoever may see the group (the read right on its queue) sees its members.
        return is_staff(request)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(WorkflowGroup)
class WorkflowGroupAdmin(admin.ModelAdmin):
    list_display = ("id", "queue_name", "status", "size", "pending", "done", "failed", "then")
    search_fields = ("queue_name",)
    readonly_fields = (
        "queue_name",
        "size",
        "status",
        "pending",
        "done",
        "failed",
        "then",
        "created_at",
    )
    fields = readonly_fields
    inlines = (MemberInline,)

    def get_queryset(self, request: HttpRequest) -> QuerySet[WorkflowGroup]:
        names = access.queues_for(request.user, "read").values("name")
        groups: QuerySet[WorkflowGroup] = (
            super()
            .get_queryset(request)
            .filter(queue_name__in=names)
            .annotate(
                # The follow-up is named only where the user may read its queue too.
                then_readable=Case(
                    When(then_queue_name__in=names, then=Value(True)),
                    default=Value(False),
                    output_field=BooleanField(),
                ),
                n_pending=Count("members", filter=Q(members__outcome__isnull=True)),
                n_done=Count("members", filter=Q(members__outcome__in=_SUCCEEDED)),
                n_failed=Count(
                    "members",
                    filter=Q(members__outcome__isnull=False) & ~Q(members__outcome__in=_SUCCEEDED),
                ),
            )
        )
        return groups

    @admin.display(description="pending")
    def pending(self, obj: WorkflowGroup) -> int:
        return int(getattr(obj, "n_pending", 0))

    @admin.display(description="done")
    def done(self, obj: WorkflowGroup) -> int:
        return int(getattr(obj, "n_done", 0))

    @admin.display(description="failed")
    def failed(self, obj: WorkflowGroup) -> int:
        return int(getattr(obj, "n_failed", 0))

    @admin.display(description="status")
    def status(self, obj: WorkflowGroup) -> str:
        """As ``pgq.group_status`` says it, from what the leader has settled so far."""
        if self.failed(obj):
            return "failed"
        return "pending" if self.pending(obj) else "done"

    @admin.display(description="then")
    def then(self, obj: WorkflowGroup) -> str:
        if obj.then_msg_id is None or not getattr(obj, "then_readable", False):
            return "-"
        return f"{obj.then_msg_id} on {obj.then_queue_name}"

    def has_module_permission(self, request: HttpRequest) -> bool:
        return is_staff(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if not is_staff(request):
            return False
        return obj is None or access.may(request.user, "read", obj.queue_name)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
