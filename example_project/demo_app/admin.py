from __future__ import annotations

from django.contrib import admin

from .models import Order


@admin.register(Order)
class OrderAdmin(admin.ModelAdmin):
    list_display = ("id", "customer", "item", "quantity", "total", "status", "msg_id", "created_at")
    list_filter = ("status",)
    search_fields = ("customer", "item")
    readonly_fields = ("msg_id", "created_at", "fulfilled_at")
