from __future__ import annotations

from django.apps import AppConfig


class PgqConfig(AppConfig):
    name = "pgq_django"
    label = "pgq_django"
    verbose_name = "Queues"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from . import checks  # noqa: F401  (registers the system checks)
        from .store.server_functions import on_post_migrate

        post_migrate.connect(on_post_migrate, sender=self)
