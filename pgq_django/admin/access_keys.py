"""Access keys for the SQS endpoint: listed and revoked, secrets never shown."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from ..models import (
    AccessKey,
)

# -- access keys ------------------------------------------------------------------------------


@admin.register(AccessKey)
class AccessKeyAdmin(admin.ModelAdmin):
    """Superusers list and revoke keys; creating one prints its secret once, so it is done
    with ``manage.py pgq_credentials create USER``."""

    list_display = ("key_id", "user", "masked_secret", "created_at", "last_used_at", "active")
    list_filter = ("revoked_at",)
    search_fields = ("key_id", "user__username")
    readonly_fields = (
        "key_id",
        "masked_secret",
        "user",
        "created_at",
        "last_used_at",
        "revoked_at",
    )
    fields = (
        "key_id",
        "user",
        "masked_secret",
        "description",
        "created_at",
        "last_used_at",
        "revoked_at",
    )
    actions = ("revoke_selected",)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.is_active and request.user.is_superuser

    has_view_permission = has_change_permission = lambda self, request, obj=None: (
        request.user.is_active and request.user.is_superuser
    )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: AccessKey | None = None) -> bool:
        """Only superusers delete a key: deleting erases its audit trail (who, when last
        used, when revoked), so anyone else, whatever Django permissions they hold, may not.
        Revoking keeps the row and is what a key's end should normally be."""
        return bool(request.user.is_active and request.user.is_superuser)

    @admin.display(description="secret")
    def masked_secret(self, obj: AccessKey) -> str:
        return f"…{obj.secret_hint}"

    @admin.display(boolean=True)
    def active(self, obj: AccessKey) -> bool:
        return obj.is_active

    @admin.action(description="Revoke the selected keys")
    def revoke_selected(self, request: HttpRequest, queryset: QuerySet[AccessKey]) -> None:
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.message_user(request, f"Revoked {count} keys.")
