"""Exchange admin: bindings and publish grants inline."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Count, QuerySet
from django.http import HttpRequest

import pgq_django as pgq

from .. import access
from ..models import (
    Binding,
    Exchange,
)
from .common import (
    ExchangeBindingInline,
    ExchangeGrantInline,
    WithoutBulkDelete,
    is_staff,
    is_superuser,
)

# -- exchanges --------------------------------------------------------------------------------


@admin.register(Exchange)
class ExchangeAdmin(WithoutBulkDelete, admin.ModelAdmin):
    list_display = ("name", "type", "owner", "binding_count")
    list_filter = ("type",)
    search_fields = ("name",)
    inlines = (ExchangeBindingInline, ExchangeGrantInline)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Exchange]:
        return (
            access.exchanges_for(request.user, "publish")
            .select_related("owner")
            .annotate(n_bindings=Count("bindings"))
        )

    @admin.display(description="bindings", ordering="n_bindings")
    def binding_count(self, obj: Exchange) -> int:
        # get_queryset annotates n_bindings; the model class does not declare it.
        count: int = obj.n_bindings  # type: ignore[attr-defined]
        return count

    def has_module_permission(self, request: HttpRequest) -> bool:
        return is_staff(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if not is_staff(request):
            return False
        return obj is None or access.may(request.user, "publish", obj)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if not is_staff(request):
            return False
        return obj is None or access.may(request.user, "manage", obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is not None and self.has_change_permission(request, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return is_staff(request) and request.user.has_perm("pgq_django.add_exchange")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields: tuple[str, ...] = ("name", "type") if obj is not None else ()
        if not is_superuser(request):
            # The owner holds every right; only a superuser hands that over (and a dropdown
            # of owners would list every user of the site). A new exchange is the creator's.
            fields += ("owner",)
        return fields

    def save_model(self, request: HttpRequest, obj: Exchange, form: Any, change: bool) -> None:
        if change:
            obj.save()
            return
        created = pgq.create_exchange(obj.name, obj.type, owner=obj.owner or request.user)
        obj.pk = created.pk
        obj.created_at = created.created_at

    def delete_model(self, request: HttpRequest, obj: Exchange) -> None:
        # The admin's confirmation page lists the bindings; deleting unbinds, keeping queues.
        Binding.objects.filter(exchange=obj).delete()
        pgq.drop_exchange(obj.name)
