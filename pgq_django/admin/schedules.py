"""Periodic schedules in the admin: list, add, change and delete them.

A schedule sends messages to its queue on its own, so keeping one is managing that queue: a
staff user sees and edits the schedules of queues they may manage, and may point one only at
such a queue (superusers: every queue). The form checks the cron expression, the time zone,
the headers and the queue's room for one more schedule by the API's own rules, and saving
goes through :func:`pgq_django.schedule`, which works out the next tick.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

import pgq_django as pgq

from .. import access
from ..api.schedules import check_frequency, check_message, check_room
from ..cron import check_cron, check_timezone
from ..exceptions import PgqError
from ..models import Schedule
from .common import is_staff


class ScheduleForm(forms.ModelForm):
    """The schedule form: what :func:`pgq_django.schedule` accepts, as field errors."""

    class Meta:
        model = Schedule
        fields = ("name", "cron", "timezone", "queue", "message", "headers", "catch_up")

    def clean_cron(self) -> str:
        try:
            cron = check_cron(self.cleaned_data.get("cron"))
            check_frequency(cron)
        except PgqError as exc:
            raise forms.ValidationError(exc.message) from None
        return cron

    def clean_timezone(self) -> str:
        value = self.cleaned_data.get("timezone")
        try:
            check_timezone(value)
        except PgqError as exc:
            raise forms.ValidationError(exc.message) from None
        return str(value)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        try:
            check_message(cleaned.get("message"), cleaned.get("headers") or {})
        except PgqError as exc:
            self.add_error("headers" if "header" in exc.message.lower() else "message", exc.message)
        queue = cleaned.get("queue")
        if queue is not None:
            # As pgq.schedule counts: a schedule saved under its own name keeps its place (a
            # rename saves the new name before it removes the old one).
            name = cleaned.get("name")
            try:
                check_room(queue, keep=(name,) if name else ())
            except PgqError as exc:
                self.add_error("queue", exc.message)
        return cleaned


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    form = ScheduleForm
    list_display = ("name", "cron", "timezone", "queue", "catch_up", "last_tick", "next_tick")
    list_select_related = ("queue",)
    search_fields = ("name", "queue__name")
    readonly_fields = ("last_tick", "next_tick", "created_at", "updated_at")

    def _managed(self, request: HttpRequest) -> QuerySet[Any]:
        return access.queues_for(request.user, "manage")

    def has_module_permission(self, request: HttpRequest) -> bool:
        return is_staff(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if not is_staff(request):
            return False
        return obj is None or access.may(request.user, "manage", obj.queue)

    has_change_permission = has_view_permission

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_view_permission(request, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return is_staff(request) and self._managed(request).exists()

    def get_queryset(self, request: HttpRequest) -> QuerySet[Schedule]:
        return (
            super()
            .get_queryset(request)
            .filter(queue__in=self._managed(request))
            .select_related("queue")
        )

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kw: Any
    ) -> Any:
        """Offer only the queues the user may manage."""
        form = super().get_form(request, obj, change=change, **kw)
        field = form.base_fields.get("queue")
        if isinstance(field, forms.ModelChoiceField):
            field.queryset = self._managed(request)
        return form

    def save_model(self, request: HttpRequest, obj: Schedule, form: Any, change: bool) -> None:
        """Save through :func:`pgq_django.schedule` (a rename removes the old name)."""
        data = form.cleaned_data
        try:
            saved = pgq.schedule(
                data["name"],
                data["cron"],
                data["queue"],
                data.get("message"),
                timezone=data["timezone"],
                headers=data.get("headers") or {},
                catch_up=bool(data.get("catch_up")),
            )
        except PgqError as exc:
            self.message_user(request, exc.message, messages.ERROR)
            raise
        if change and form.initial.get("name") not in (None, saved.name):
            pgq.unschedule(form.initial["name"])
        obj.pk = saved.pk
        obj.__dict__.update({k: v for k, v in saved.__dict__.items() if not k.startswith("_")})
