"""The dashboard's row in the admin index ("Dashboard", beside Queues).

The dashboard itself is a page of the queue admin (``admin:pgq_django_queue_dashboard``);
this admin only gives it an entry where Django's index lists models, through the
:class:`~pgq_django.models.QueueDashboard` proxy, and sends its list page there. Staff see
the entry, as they see the dashboard (which shows only the queues their grants reach);
nothing can be added, changed or deleted through it.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponseRedirect
from django.urls import path, reverse

from ..models import QueueDashboard
from .common import is_staff


@admin.register(QueueDashboard)
class QueueDashboardAdmin(admin.ModelAdmin):
    def has_module_permission(self, request: HttpRequest) -> bool:
        return is_staff(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_staff(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_urls(self) -> list[Any]:
        info = self.opts.app_label, self.opts.model_name
        view = self.admin_site.admin_view(self.changelist_view)
        return [path("", view, name="{}_{}_changelist".format(*info))]

    def changelist_view(
        self, request: HttpRequest, extra_context: Any = None
    ) -> HttpResponseRedirect:
        return HttpResponseRedirect(reverse("admin:pgq_django_queue_dashboard"))
