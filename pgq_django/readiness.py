"""Whether the database is ready for the code that uses it: migrated, and with its queues.

Also whether the database can be reached at all (:func:`database_status`): the readiness
answer of ``GET /v1/ready`` and the ``pgq_database_up`` gauge of ``/metrics``.

Two first-hour mistakes fail far from their cause: a database where ``migrate`` never ran
(every statement then fails with ``relation "pgq_queue" does not exist``), and a handler
registered for a queue that was never created (``@pgq.handler("emial")``: the worker waits
for messages that cannot arrive, in silence). The worker at start and ``manage.py check``
ask these questions here and answer with what to do.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from django.db import connections
from django.db.migrations.executor import MigrationExecutor

from .conf import settings
from .models import Queue
from .store import availability
from .store.availability import DatabaseStatus

APP_LABEL = "pgq_django"


def unapplied_migrations(alias: str) -> list[str]:
    """pgq_django's migrations (and those they depend on) not applied to database ``alias``.

    Django's migration loader reads the migration files and the ``django_migrations`` table,
    as ``runserver``'s "unapplied migrations" notice does; no pgq_django table is touched, so
    it works on an empty database. Raises the database's error when it cannot be reached.
    """
    executor = MigrationExecutor(connections[alias])
    targets = [key for key in executor.loader.graph.leaf_nodes() if key[0] == APP_LABEL]
    return [
        f"{migration.app_label}.{migration.name}"
        for migration, _backwards in executor.migration_plan(targets)
    ]


def not_migrated_message(alias: str, unapplied: list[str]) -> str:
    """One sentence that says which migrations are missing and what to run."""
    shown = ", ".join(unapplied[:3]) + (", …" if len(unapplied) > 3 else "")
    count = len(unapplied)
    return (
        f"Database {alias!r} is missing {count} migration{'s' if count != 1 else ''} that "
        f"pgq_django needs ({shown}): run `python manage.py migrate`."
    )


def unknown_queues(names: Iterable[str]) -> dict[str, list[str]]:
    """Each of ``names`` that no queue has, with the existing names closest to it.

    The suggestions come from :func:`difflib.get_close_matches`, so ``"emial"`` finds
    ``"email"``. One query reads every queue name; a project has tens or hundreds.
    """
    wanted = sorted(set(names))
    if not wanted:
        return {}
    existing = list(Queue.objects.values_list("name", flat=True))
    known = set(existing)
    return {
        name: difflib.get_close_matches(name, existing, n=3) for name in wanted if name not in known
    }


def unknown_queue_message(name: str, close: list[str]) -> str:
    """What a handler for a queue that does not exist is told, with the likely intended names."""
    hint = f" Did you mean {' or '.join(map(repr, close))}?" if close else ""
    return (
        f"A handler is registered for queue {name!r}, which does not exist: it receives "
        f"nothing until the queue is created (pgq.create_queue({name!r}) or the admin).{hint}"
    )


def database_status(alias: str | None = None) -> DatabaseStatus:
    """Whether this process can reach its queue database (``PGQ["DATABASE"]``, or
    ``alias``), as it last saw it: up, or down for how long after how many attempts.

    Answered without a round trip (see :mod:`pgq_django.store.availability`), so a readiness
    probe gets its answer at once during an outage, and a busy process is not asked for
    one more query per probe. A process that has not used the database yet says up.
    """
    return availability.status(alias or settings.DATABASE)
