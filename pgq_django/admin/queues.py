"""Queue admin: live metrics, the non-leasing message browser, actions and the dashboard."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.paginator import Paginator
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html

import pgq_django as pgq

from .. import access
from ..exceptions import PgqError
from ..models import (
    ArchivedMessage,
    Message,
    Queue,
)
from ..models.messages import MessageFields
from .common import (
    _QUEUE_API_FIELDS,
    PAGE_SIZE,
    QueueBindingInline,
    QueueGrantInline,
    WithoutBulkDelete,
    _age,
    _page,
    _pretty,
    _staff,
    visible_queues,
)

# -- queues -----------------------------------------------------------------------------------


class SendMessageForm(forms.Form):
    body = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 6, "cols": 80}),
        initial='{"hello": "world"}',
        help_text="JSON; anything that is not valid JSON is sent as a string.",
    )
    headers = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "cols": 80}),
        help_text="Optional JSON object.",
    )
    priority = forms.IntegerField(initial=0)
    delay = forms.FloatField(initial=0, min_value=0, help_text="Seconds.")

    def clean_body(self) -> Any:
        text = self.cleaned_data["body"]
        try:
            return json.loads(text)
        except ValueError:
            return text

    def clean_headers(self) -> Any:
        text = self.cleaned_data.get("headers") or ""
        if not text.strip():
            return None
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise forms.ValidationError(f"Not JSON: {exc}") from None
        if not isinstance(value, dict):
            raise forms.ValidationError("Headers must be a JSON object.")
        return value


@admin.register(Queue)
class QueueAdmin(WithoutBulkDelete, admin.ModelAdmin):
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
    list_filter = ("paused", "fifo")
    inlines = (QueueGrantInline, QueueBindingInline)
    actions = ("purge_selected", "redrive_selected", "pause_selected", "resume_selected")
    change_list_template = "pgq_django/admin/queue_change_list.html"
    fieldsets = (
        (None, {"fields": ("name", "owner", "paused", "fifo")}),
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
        return _staff(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if not _staff(request):
            return False
        return obj is None or visible_queues(request.user).filter(pk=obj.pk).exists()

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if not _staff(request):
            return False
        return obj is None or access.may(request.user, "manage", obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_change_permission(request, obj) and obj is not None

    def has_add_permission(self, request: HttpRequest) -> bool:
        return _staff(request) and request.user.has_perm("pgq_django.add_queue")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return ("name", "paused") if obj is not None else ("paused",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Queue]:
        return visible_queues(request.user).select_related("dead_letter_queue")

    # Changes go through the functional API.

    def save_model(self, request: HttpRequest, obj: Queue, form: Any, change: bool) -> None:
        fields = {f: getattr(obj, f) for f in _QUEUE_API_FIELDS if f in form.cleaned_data}
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
        return _age(m.oldest_msg_age_sec) if m else "-"

    @admin.display(description="dead letters")
    def dead_letters(self, obj: Queue) -> Any:
        m = self._metric(obj)
        return m.dead_letters if m else "-"

    @admin.display(description="state")
    def state(self, obj: Queue) -> str:
        return "paused" if obj.paused else "active"

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
            count = pgq.redrive(queue.name)  # looked up at call time
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

    def _queue_or_404(self, request: HttpRequest, pk: int) -> Queue:
        return get_object_or_404(visible_queues(request.user), pk=pk)

    def _denied(self, request: HttpRequest, right: str, queue: Queue) -> bool:
        if access.may(request.user, right, queue):
            return False
        self.message_user(request, f"You may not {right} queue {queue.name}.", messages.ERROR)
        return True

    def messages_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        queue = self._queue_or_404(request, pk)
        if self._denied(request, "read", queue):
            return HttpResponseRedirect(reverse("admin:pgq_django_queue_changelist"))
        tab = "archive" if request.GET.get("tab") == "archive" else "live"
        rows: QuerySet[Any]
        if tab == "live":
            rows = Message.objects.filter(queue_id=queue.pk).order_by("priority", "msg_id")
        else:
            rows = ArchivedMessage.objects.filter(queue_id=queue.pk).order_by("-msg_id")
        page = Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page"))
        now = timezone.now()
        shown = [
            {
                "obj": m,
                "body": _pretty(m.message),
                "headers": _pretty(m.headers),
                "attributes": _pretty(m.attributes) if m.attributes else "",
                "status": getattr(m, "outcome", None) or _status(m, now),
            }
            for m in page.object_list
        ]
        metric = pgq.metrics(queue.name)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"Messages of {queue.name}",
            "queue": queue,
            "tab": tab,
            "page": page,
            "messages_shown": shown,
            "metric": metric,
            "oldest": _age(metric.oldest_msg_age_sec),
            "can_manage": access.may(request.user, "manage", queue),
            "can_write": access.may(request.user, "write", queue),
            "is_dead_letter_queue": queue.source_queues.exists(),
        }
        return TemplateResponse(request, "pgq_django/admin/messages.html", context)

    def operate_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """POST-only buttons of the message browser: purge, redrive, pause, resume, replay."""
        queue = self._queue_or_404(request, pk)
        back = reverse("admin:pgq_django_queue_messages", args=[pk])
        if request.method != "POST":
            return HttpResponseRedirect(back)
        op = request.POST.get("op", "")
        right = "write" if op == "replay" else "manage"
        if op not in ("purge", "redrive", "pause", "resume", "replay") or self._denied(
            request, right, queue
        ):
            return HttpResponseRedirect(back)
        try:
            if op == "purge":
                note = f"Purged {pgq.purge_queue(queue.name)} messages."
            elif op == "redrive":
                note = f"Redrove {pgq.redrive(queue.name)} messages."
            elif op == "pause":
                pgq.pause_queue(queue.name)
                note = "Paused."
            elif op == "resume":
                pgq.resume_queue(queue.name)
                note = "Resumed."
            else:
                note = f"Replayed {self._replay(queue, request.POST.getlist('msg_id'))} messages."
                back += "?tab=archive"
        except PgqError as exc:
            self.message_user(request, exc.message, messages.ERROR)
            return HttpResponseRedirect(back)
        self.message_user(request, f"{queue.name}: {note}")
        return HttpResponseRedirect(back)

    def _replay(self, queue: Queue, ids: list[str]) -> int:
        """Send copies of archived messages back into their queue; the archive keeps them."""
        wanted = [int(i) for i in ids if i.isdigit()]
        rows = ArchivedMessage.objects.filter(queue_id=queue.pk, msg_id__in=wanted)
        sent = 0
        with transaction.atomic():
            for row in rows.order_by("msg_id"):
                headers = {**row.headers, "pgq_replayed_from": row.msg_id}
                pgq.send(
                    queue.name,
                    row.message,
                    headers=headers,
                    attributes=row.attributes,
                    label=row.label,
                    priority=row.priority,
                )
                sent += 1
        return sent

    def send_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        queue = self._queue_or_404(request, pk)
        back = reverse("admin:pgq_django_queue_messages", args=[pk])
        if self._denied(request, "write", queue):
            return HttpResponseRedirect(back)
        form = SendMessageForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            data = form.cleaned_data
            try:
                msg_id = pgq.send(
                    queue.name,
                    data["body"],
                    headers=data["headers"],
                    priority=data["priority"],
                    delay=data["delay"],
                )
            except PgqError as exc:
                form.add_error(None, exc.message)
            else:
                self.message_user(request, f"Sent message {msg_id} to {queue.name}.")
                return HttpResponseRedirect(back)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"Send a test message to {queue.name}",
            "queue": queue,
            "form": form,
        }
        return TemplateResponse(request, "pgq_django/admin/send_message.html", context)

    def _dashboard_payload(self, request: HttpRequest) -> dict[str, Any]:
        from ..dashboard import series

        queues = {q.name: q.pk for q in visible_queues(request.user)}
        rows = [m for m in pgq.metrics_all() if m.queue_name in queues]
        depth = sum(m.queue_length for m in rows)
        data = series(queues.values(), depth)
        data["queues"] = [
            {
                "name": m.queue_name,
                "depth": m.queue_length,
                "in_flight": m.in_flight,
                "dead_letters": m.dead_letters,
                "oldest": _age(m.oldest_msg_age_sec),
                "url": reverse("admin:pgq_django_queue_messages", args=[queues[m.queue_name]]),
            }
            for m in rows
        ]
        data["totals"] = {
            "queues": len(rows),
            "depth": depth,
            "in_flight": sum(m.in_flight for m in rows),
            "dead_letters": sum(m.dead_letters for m in rows),
        }
        return data

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        if not _staff(request):
            return HttpResponseRedirect(reverse("admin:index"))
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Queue dashboard",
            "data": self._dashboard_payload(request),
            "data_url": reverse("admin:pgq_django_queue_dashboard_data"),
        }
        return TemplateResponse(request, "pgq_django/admin/dashboard.html", context)

    def dashboard_data(self, request: HttpRequest) -> JsonResponse:
        if not _staff(request):
            return JsonResponse({"error": "staff only"}, status=403)
        return JsonResponse(self._dashboard_payload(request))


def _status(message: MessageFields, now: Any) -> str:
    if message.vt > now:
        return "in flight" if message.read_ct > 0 else "delayed"
    return "visible"
