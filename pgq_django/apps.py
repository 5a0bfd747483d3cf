from __future__ import annotations

from django.apps import AppConfig


class PgqConfig(AppConfig):
    name = "pgq_django"
    label = "pgq_django"
    verbose_name = "Queues"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.backends.signals import connection_created
        from django.db.models.signals import post_migrate, pre_migrate

        from . import checks  # noqa: F401  (registers the system checks)
        from .api import workflows
        from .pgmq import install as pgmq_install
        from .store import availability
        from .store.server_functions import on_post_migrate

        # Any thread's new connection ends an outage this process has seen.
        connection_created.connect(
            availability.on_connection_created, dispatch_uid="pgq_django.availability"
        )
        post_migrate.connect(on_post_migrate, sender=self)
        post_migrate.connect(workflows.install_functions, sender=self)
        # The PGMQ SQL interface leaves during migrations and comes back after them.
        pre_migrate.connect(pgmq_install.on_pre_migrate, sender=self)
        post_migrate.connect(pgmq_install.on_post_migrate, sender=self)
