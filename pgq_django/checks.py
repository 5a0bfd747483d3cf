"""System checks: tell the user what is misconfigured before anything runs."""

from __future__ import annotations

from typing import Any

from django.conf import settings as django_settings
from django.core import checks
from django.db import connections

from .conf import DEFAULTS, REMOVED_SETTINGS, removed_message, settings, unknown_key_message
from .pgmq.install import missing_schema_problem, schema_setting_problem
from .readiness import (
    not_migrated_message,
    unapplied_migrations,
    unknown_queue_message,
    unknown_queues,
)
from .worker.registry import (
    autodiscover,
    configured_task_aliases,
    registered,
    task_framework,
    task_framework_missing_message,
)


@checks.register(checks.Tags.database, deploy=False)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    errors: list[checks.CheckMessage] = []
    user = getattr(django_settings, "PGQ", None) or {}
    if not isinstance(user, dict):
        return [checks.Error("settings.PGQ must be a dict.", id="pgq_django.E001")]
    removed = [key for key in user if key in REMOVED_SETTINGS]
    if removed:
        # Every other setting is unreadable until these go (see conf.REMOVED_SETTINGS).
        return [checks.Error(removed_message(key), id="pgq_django.E006") for key in removed]
    for key in user:
        if key not in DEFAULTS:
            errors.append(
                checks.Error(
                    unknown_key_message(key),
                    hint=f"Known keys: {', '.join(sorted(DEFAULTS))}.",
                    id="pgq_django.E002",
                )
            )
    alias = settings.DATABASE
    if alias not in django_settings.DATABASES:
        errors.append(
            checks.Error(
                f"settings.PGQ['DATABASE'] names {alias!r}, which is not in DATABASES.",
                id="pgq_django.E003",
            )
        )
    elif connections[alias].vendor != "postgresql":
        errors.append(
            checks.Error(
                f"pgq_django needs PostgreSQL; database {alias!r} is {connections[alias].vendor}.",
                id="pgq_django.E004",
            )
        )
    for key in (
        "DEFAULT_VISIBILITY_TIMEOUT",
        "DEFAULT_RETENTION",
        "PARTITION_SIZE",
        "READ_MAX_BYTES",
        "SEND_BATCH_MAX_MESSAGES",
        "SEND_BATCH_MAX_BYTES",
        "MAX_WAIT_SECONDS",
        "METRICS_EXACT_COUNT",
        "REST_MAX_THREAD_WAITS",
        "SCHEDULES_PER_QUEUE",
        "SCHEDULE_MIN_INTERVAL",
        "SCHEDULE_TURN_BUDGET",
    ):
        value = settings.as_dict().get(key)
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            errors.append(
                checks.Error(
                    f"settings.PGQ[{key!r}] must be a positive number.", id="pgq_django.E005"
                )
            )
    account = settings.as_dict().get("SQS_ACCOUNT_ID")
    if not isinstance(account, str) or not account.isdigit() or not 1 <= len(account) <= 32:
        errors.append(
            checks.Error(
                "settings.PGQ['SQS_ACCOUNT_ID'] must be a string of 1-32 digits.",
                hint="AWS account ids are 12 digits, like the default '000000000000'.",
                id="pgq_django.E006",
            )
        )
    skew = settings.as_dict().get("SQS_CLOCK_SKEW")
    if isinstance(skew, bool) or not isinstance(skew, int | float) or skew <= 0:
        errors.append(
            checks.Error(
                "settings.PGQ['SQS_CLOCK_SKEW'] must be a positive number of seconds.",
                id="pgq_django.E007",
            )
        )
    for name in ("SQS_ASGI_LEAN", "SERVER_FUNCTIONS"):
        if not isinstance(settings.as_dict().get(name), bool):
            errors.append(
                checks.Error(f"settings.PGQ['{name}'] must be True or False.", id="pgq_django.E008")
            )
    pgmq_problem = schema_setting_problem(settings.as_dict().get("PGMQ_SCHEMA"))
    if pgmq_problem is not None:
        errors.append(checks.Error(pgmq_problem, id="pgq_django.E009"))
    if configured_task_aliases() and task_framework() is None:
        errors.append(checks.Error(task_framework_missing_message(), id="pgq_django.E010"))
    return errors


@checks.register(checks.Tags.database)
def check_database(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """Unapplied migrations (W001), handlers of queues that do not exist (W002), and a
    configured PGMQ SQL interface that is not installed (W003).

    Runs when the checks run without naming databases (``manage.py check``, ``runserver``,
    ``pgq_worker``): ``migrate`` names the database it is about to migrate, and the test
    runner names databases it has just migrated, so neither needs telling. Checks may run
    where no database is reachable (a build step, unit tests): then this check says
    nothing, whatever stopped it, rather than failing a command that needs no database.
    """
    alias = settings.DATABASE
    if databases is not None or alias not in django_settings.DATABASES:
        return []
    try:
        unapplied = unapplied_migrations(alias)
    except Exception:
        return []
    if unapplied:
        return [
            checks.Warning(
                not_migrated_message(alias, unapplied),
                hint="Every queue operation fails until the migrations are applied.",
                id="pgq_django.W001",
            )
        ]
    try:
        autodiscover()
        missing = unknown_queues(registered())
    except Exception:
        missing = {}
    try:
        pgmq_missing = missing_schema_problem(alias)
    except Exception:  # a setting E009 reports, or a database that stopped answering
        pgmq_missing = None
    found: list[checks.CheckMessage] = [
        checks.Warning(
            unknown_queue_message(name, close),
            hint="Create the queue, or correct the name given to @pgq.handler.",
            id="pgq_django.W002",
        )
        for name, close in missing.items()
    ]
    if pgmq_missing is not None:
        found.append(
            checks.Warning(
                pgmq_missing,
                hint="PGMQ clients find no pgmq functions until it is installed.",
                id="pgq_django.W003",
            )
        )
    return found
