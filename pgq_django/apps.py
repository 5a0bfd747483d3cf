from __future__ import annotations

from django.apps import AppConfig


class PgqConfig(AppConfig):
    name = "pgq_django"
    label = "pgq_django"
    verbose_name = "Queues"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the system checks)
