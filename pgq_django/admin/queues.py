"""Queue admin: live metrics, the queue list and its actions; the pages are in queue_pages."""

from __future__ import annotations

import threading
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.urls import path, reverse
from django.utils.html import format_html

import pgq_django as pgq

from .. import access
from ..api.queue_settings import QUEUE_SETTINGS
from ..exceptions import PgqError
from ..models import (
    Queue,
)
from .common import (
    QUEUE_API_FIELDS,
    QueueBindingInline,
    QueueGrantInline,
    WithoutBulkDelete,
    format_age,
    is_staff,
    is_superuser,
    visible_queues,
)

# -- queues -----------------------------------------------------------------------------------
from .queue_pages import QueuePagesMixin

# Metrics of the queue list page being rendered, fetched once for all its rows.
_page = threading.local()

# Settings only a superuser may set: the owner decides who holds every right, and the
# callback is code every worker imports and runs.
_SUPERUSER_FIELDS = ("owner", "callback")


class QueueForm(forms.ModelForm):
    """The queue settings form: it accepts exactly what the API accepts.

    Every setting goes through :func:`pgq_django.validate_queue_settings`, the rule behind
    create_queue/alter_queue, so a value out of range is a form error on its field, not an
    error at save time.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Each setting is explained once, in the API's table.
        for name, field in self.fields.items():
            if name in QUEUE_SETTINGS:
                field.help_text = QUEUE_SETTINGS[name].doc

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        given = {f: cleaned[f] for f in QUEUE_API_FIELDS if f in cleaned}
        dlq = given.get("dead_letter_queue")
        if dlq is not None and self.instance.pk is not None and dlq.pk == self.instance.pk:
            self.add_error("dead_letter_queue", "A queue cannot be its own dead-letter queue.")
            return cleaned
        try:
            pgq.validate_queue_settings(**given)
        except PgqError as exc:
            field = exc.details.get("field")
            self.add_error(field if field in self.fields else None, exc.message)
        return cleaned


@admin.register(Queue)
class QueueAdmin(QueuePagesMixin, WithoutBulkDelete, admin.ModelAdmin):
    form = QueueForm
    list_display = (
        "name",
        "depth",
        "in_flight",
        "oldest_age",
        "dead_letters",
        "state",
        "browse_link",
    )
    list_display_links = ("name",)
    search_fields = ("name",)
    list_filter = ("paused", "fifo", "durable")
    inlines = (QueueGrantInline, QueueBindingInline)
    actions = ("purge_selected", "redrive_selected", "pause_selected", "resume_selected")
    change_list_template = "pgq_django/admin/queue_change_list.html"
    fieldsets = (
        (None, {"fields": ("name", "owner", "paused", "fifo", "durable")}),
        (
            "Delivery",
            {
                "fields": (
                    "visibility_timeout",
                    "delivery_delay",
                    "retention",
                    "max_message_size",
                    "max_length",
                    "archive_on_ack",
                )
            },
        ),
        (
            "Retries",
            {
                "fields": (
                    "max_retries",
                    "retry_delay",
                    "backoff",
                    "backoff_cap",
                    "backoff_jitter",
                    "dead_letter_queue",
                    "callback",
                )
            },
        ),
        ("Limits", {"fields": ("rate_limit", "concurrency_limit")}),
    )

    # Permissions: grants, not Django model permissions, decide (superusers: everything).

    def has_module_permission(self, request: HttpRequest) -> bool:
        return is_staff(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if not is_staff(request):
            return False
        return obj is None or visible_queues(request.user).filter(pk=obj.pk).exists()

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if not is_staff(request):
            return False
        return obj is None or access.may(request.user, "manage", obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_change_permission(request, obj) and obj is not None

    def has_add_permission(self, request: HttpRequest) -> bool:
        return is_staff(request) and request.user.has_perm("pgq_django.add_queue")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields: tuple[str, ...] = ("name", "paused") if obj is not None else ("paused",)
        if obj is not None:  # fixed when the queue is created
            fields += ("fifo", "durable")
        if not is_superuser(request):
            fields += _SUPERUSER_FIELDS
        return fields

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kw: Any
    ) -> Any:
        """Offer as dead-letter queue only queues the user may send to.

        Dead-lettering sends the failed message there, so it needs ``write`` on that queue,
        as sending directly would; the queue's current one stays selectable.
        """
        form = super().get_form(request, obj, change=change, **kw)
        field = form.base_fields.get("dead_letter_queue")
        if isinstance(field, forms.ModelChoiceField):
            allowed = Q(pk__in=access.queues_for(request.user, "write").values("pk"))
            if obj is not None and obj.dead_letter_queue_id is not None:
                allowed |= Q(pk=obj.dead_letter_queue_id)
            choices = Queue.objects.filter(allowed)
            field.queryset = choices.exclude(pk=obj.pk) if obj is not None else choices
        return form

    def get_queryset(self, request: HttpRequest) -> QuerySet[Queue]:
        return visible_queues(request.user).select_related("dead_letter_queue")

    # Changes go through the functional API.

    def save_model(self, request: HttpRequest, obj: Queue, form: Any, change: bool) -> None:
        fields = {f: getattr(obj, f) for f in QUEUE_API_FIELDS if f in form.cleaned_data}
        try:
            if change:
                changed = {f: v for f, v in fields.items() if f in form.changed_data}
                saved = pgq.alter_queue(obj.name, **changed) if changed else obj
            else:
                fields["owner"] = fields.get("owner") or request.user
                saved = pgq.create_queue(obj.name, **fields)
        except PgqError as exc:
            self.message_user(request, exc.message, messages.ERROR)
            raise
        obj.pk = saved.pk
        obj.__dict__.update({k: v for k, v in saved.__dict__.items() if not k.startswith("_")})

    def delete_model(self, request: HttpRequest, obj: Queue) -> None:
        pgq.drop_queue(obj.name)

    # Live metrics, one query for the whole page.

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        # list_display callables only see the row, so the page's metrics ride on a
        # thread-local (the admin instance itself is shared by every request).
        _page.metrics = {m.queue_name: m for m in pgq.metrics_all()}
        extra = {"dashboard_url": reverse("admin:pgq_django_queue_dashboard")}
        return super().changelist_view(request, {**(extra_context or {}), **extra})

    def _metric(self, obj: Queue) -> Any:
        return getattr(_page, "metrics", {}).get(obj.name)

    @admin.display(description="depth")
    def depth(self, obj: Queue) -> Any:
        m = self._metric(obj)
        return m.queue_length if m else "-"

    @admin.display(description="in flight")
    def in_flight(self, obj: Queue) -> Any:
        m = self._metric(obj)
        return m.in_flight if m else "-"

    @admin.display(description="oldest")
    def oldest_age(self, obj: Queue) -> str:
        m = self._metric(obj)
        return format_age(m.oldest_msg_age_sec) if m else "-"

    @admin.display(description="dead letters")
    def dead_letters(self, obj: Queue) -> Any:
        m = self._metric(obj)
        return m.dead_letters if m else "-"

    @admin.display(description="state")
    def state(self, obj: Queue) -> str:
        state = "paused" if obj.paused else "active"
        return state if obj.durable else f"{state}, unlogged"

    @admin.display(description="")
    def browse_link(self, obj: Queue) -> str:
        url = reverse("admin:pgq_django_queue_messages", args=[obj.pk])
        return format_html('<a href="{}">browse</a>', url)

    # Actions: each checks the manage right per queue.

    def _each_managed(self, request: HttpRequest, queryset: QuerySet[Queue], verb: str) -> Any:
        for queue in queryset:
            if access.may(request.user, "manage", queue):
                yield queue
            else:
                self.message_user(
                    request, f"You may not {verb} queue {queue.name}.", messages.ERROR
                )

    @admin.action(description="Purge all messages of the selected queues")
    def purge_selected(self, request: HttpRequest, queryset: QuerySet[Queue]) -> None:
        for queue in self._each_managed(request, queryset, "purge"):
            count = pgq.purge_queue(queue.name)
            self.message_user(request, f"Purged {count} messages from {queue.name}.")

    @admin.action(description="Redrive dead letters back to their queues")
    def redrive_selected(self, request: HttpRequest, queryset: QuerySet[Queue]) -> None:
        for queue in self._each_managed(request, queryset, "redrive"):
            count = self._redrive(request, queue)
            self.message_user(request, f"Redrove {count} messages from {queue.name}.")

    @admin.action(description="Pause the selected queues")
    def pause_selected(self, request: HttpRequest, queryset: QuerySet[Queue]) -> None:
        for queue in self._each_managed(request, queryset, "pause"):
            pgq.pause_queue(queue.name)
            self.message_user(request, f"Paused {queue.name}.")

    @admin.action(description="Resume the selected queues")
    def resume_selected(self, request: HttpRequest, queryset: QuerySet[Queue]) -> None:
        for queue in self._each_managed(request, queryset, "resume"):
            pgq.resume_queue(queue.name)
            self.message_user(request, f"Resumed {queue.name}.")

    # Extra pages: message browser, single-queue operations, dashboard.

    def get_urls(self) -> list[Any]:
        wrap = self.admin_site.admin_view
        return [
            path("dashboard/", wrap(self.dashboard_view), name="pgq_django_queue_dashboard"),
            path(
                "dashboard/data/", wrap(self.dashboard_data), name="pgq_django_queue_dashboard_data"
            ),
            path("<int:pk>/messages/", wrap(self.messages_view), name="pgq_django_queue_messages"),
            path("<int:pk>/operate/", wrap(self.operate_view), name="pgq_django_queue_operate"),
            path("<int:pk>/send/", wrap(self.send_view), name="pgq_django_queue_send"),
            *super().get_urls(),
        ]
