from __future__ import annotations

from django.apps import AppConfig


class DemoAppConfig(AppConfig):
    """The example shop: orders whose creation enqueues work for the worker."""

    name = "example_project.demo_app"
    label = "demo_app"
    verbose_name = "Demo shop"
    default_auto_field = "django.db.models.BigAutoField"
