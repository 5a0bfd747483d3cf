"""Shared pieces of the admin: who sees which queue, formatting, and the inlines."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import HttpRequest

from .. import access, validation
from ..api.queue_settings import QUEUE_SETTINGS
from ..exceptions import PgqError
from ..models import (
    Binding,
    ExchangeGrant,
    Queue,
    QueueGrant,
)
from ..routing import binding_filters

PAGE_SIZE = 50
# The queue settings the admin's queue form may change: the API's table, nothing of its own.
QUEUE_API_FIELDS = tuple(QUEUE_SETTINGS)


def visible_queues(user: Any) -> QuerySet[Queue]:
    """Queues a user holds any right on: what the admin lists for them."""
    return (
        access.queues_for(user, "read")
        | access.queues_for(user, "write")
        | access.queues_for(user, "manage")
    ).distinct()


def is_staff(request: HttpRequest) -> bool:
    return bool(request.user.is_active and request.user.is_staff)


def is_superuser(request: HttpRequest) -> bool:
    return bool(request.user.is_active and request.user.is_superuser)


def format_age(seconds: float | None) -> str:
    """A compact age: "42s", "7m 3s", "5h 12m", "3d 4h"."""
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


class WithoutBulkDelete:
    """Drops "delete selected": queues and exchanges are removed one at a time, through the
    API, so that each removal is checked against the user's rights."""

    def get_actions(self, request: HttpRequest, action_location: Any = None) -> Any:
        # Django 6.1 passes action_location; 5.2 does not know it.
        if action_location is None:
            found = super().get_actions(request)  # type: ignore[misc]
        else:
            found = super().get_actions(request, action_location)  # type: ignore[misc]
        found.pop("delete_selected", None)
        return found


# -- inlines ----------------------------------------------------------------------------------


class _ManagedInline(admin.TabularInline):
    """Rows shown to staff and changed only by those who may manage the parent object."""

    extra = 0

    def _manages(self, request: HttpRequest, obj: Any) -> bool:
        return obj is not None and access.may(request.user, "manage", obj)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_staff(request)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._manages(request, obj)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._manages(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._manages(request, obj)


class _ByName(forms.ModelChoiceField):
    """A user or group typed by name instead of picked from a list of every account.

    A dropdown would show every username of the site to anyone who manages one queue; a
    name field shows only the grantees already on the object.
    """

    widget = forms.TextInput


class GrantForm(forms.ModelForm):
    """Grants name their user or group; see :class:`_ByName`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        user_model = self._meta.model._meta.get_field("user").related_model
        group_model = self._meta.model._meta.get_field("group").related_model
        username = getattr(user_model, "USERNAME_FIELD", "username")
        self.fields["user"] = _ByName(
            user_model._default_manager.all(),
            to_field_name=username,
            required=False,
            error_messages={"invalid_choice": "There is no user with that name."},
        )
        self.fields["group"] = _ByName(
            group_model._default_manager.all(),
            to_field_name="name",
            required=False,
            error_messages={"invalid_choice": "There is no group with that name."},
        )
        # A saved grant's initial values are pks; the fields show and compare names.
        grant = self.instance
        if grant.pk and grant.user_id:
            self.initial["user"] = grant.user.get_username()
        if grant.pk and grant.group_id:
            self.initial["group"] = grant.group.name


class _GrantInline(_ManagedInline):
    autocomplete_fields = ()
    verbose_name = "grant"
    form = GrantForm


class QueueGrantInline(_GrantInline):
    model = QueueGrant
    fields = ("user", "group", "can_read", "can_write", "can_manage")


class ExchangeGrantInline(_GrantInline):
    model = ExchangeGrant
    fields = ("user", "group", "can_publish")


class QueueBindingInline(admin.TabularInline):
    """Read-only: the exchanges that route into this queue."""

    model = Binding
    fk_name = "queue"
    extra = 0
    fields = ("exchange", "routing_key", "filters")
    readonly_fields = fields
    verbose_name = "binding from an exchange"

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class BindingForm(forms.ModelForm):
    class Meta:
        model = Binding
        fields = ("queue", "routing_key", "filters")

    def clean_filters(self) -> Any:

        try:
            filters = binding_filters(self.cleaned_data.get("filters"))
            # What PostgreSQL's jsonb can hold: no NaN/Infinity, no NUL, no lone surrogate.
            validation.mapping(filters, "filters").encode("utf-8")
        except PgqError as exc:
            raise forms.ValidationError(exc.message) from None
        except UnicodeEncodeError:
            raise forms.ValidationError("The filters hold a lone surrogate.") from None
        return filters


class ExchangeBindingInline(_ManagedInline):
    """Bindings edited on their exchange; queues offered are those the user manages."""

    model = Binding
    form = BindingForm
    fk_name = "exchange"
    fields = ("queue", "routing_key", "filters")

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "queue":
            kwargs["queryset"] = access.queues_for(request.user, "manage")
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        """Bindings of exchanges the user manages, and bindings into queues they may see.

        A publish grant lets a user send through the exchange, not learn which other users'
        queues it feeds and with which filters.
        """
        found = super().get_queryset(request)
        if is_superuser(request):
            return found
        return found.filter(
            Q(exchange__in=access.exchanges_for(request.user, "manage").values("pk"))
            | Q(queue__in=visible_queues(request.user).values("pk"))
        )
