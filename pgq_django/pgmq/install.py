"""Install and remove the PGMQ SQL interface: ``migrate`` does it, by ``PGQ["PGMQ_SCHEMA"]``.

Why around ``migrate``. The schema's views and functions depend on pgq_django's tables (its
functions take a ``pgq_queue`` row, its views select ``pgq_message`` columns), so a
migration that alters or drops those tables would fail while the schema is there. A
``pre_migrate`` handler therefore removes the schema before pgq_django's migrations run
(when some are to run), and a ``post_migrate`` handler installs it again afterwards when
the setting names it (the SQL of the running release, so an upgrade needs nothing more
than ``migrate``). The queues with insert notifications on are carried over.

It refuses, with :class:`PgmqSchemaConflict`, when PGMQ itself is installed as an extension
or a schema of that name exists that it did not make: it never replaces what it does not
own. It holds no SQL: the store runs every statement
(:mod:`pgq_django.store.pgmq_schema`) and renders the schema's SQL files from its own
statement fragments, in one transaction: the schema appears whole or not at all.
"""

from __future__ import annotations

import logging
import re
import sys
from typing import Any

from django.db import transaction

from ..conf import settings
from ..exceptions import PgqError
from ..store import pgmq_schema
from . import sql

logger = logging.getLogger("pgq_django.pgmq")

# A schema name the scripts can carry as it is (no quoting): what PGMQ's clients expect is
# "pgmq", and a project may choose another plain name.
_PLAIN_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


class PgmqSchemaConflict(PgqError):
    """The PGMQ SQL interface cannot be installed: its schema is taken."""

    code = "pgmq_schema_conflict"
    default_message = "The PGMQ SQL interface's schema is taken."


def schema_setting_problem(schema: object) -> str | None:
    """What is wrong with a value of ``PGQ["PGMQ_SCHEMA"]``, or None (the system checks
    report it before ``migrate`` would refuse it)."""
    if schema is None or (isinstance(schema, str) and _PLAIN_NAME.fullmatch(schema)):
        return None
    return (
        "PGQ['PGMQ_SCHEMA'] must be None or a lower-case SQL name of letters, digits and '_' "
        f"(such as 'pgmq'), not {schema!r}."
    )


def configured_schema() -> str | None:
    """``PGQ["PGMQ_SCHEMA"]``, checked: None (not installed) or a plain lower-case name."""
    schema = settings.PGMQ_SCHEMA
    problem = schema_setting_problem(schema)
    if problem is not None:
        raise PgmqSchemaConflict(problem, schema=str(schema))
    return schema


def script(name: str, *, schema: str, tables: str, channel: str) -> str:
    """One of the schema's SQL files with its placeholders filled (see :mod:`.sql`)."""
    return pgmq_schema.render_script(
        sql.script_text(name), schema=schema, tables=tables, channel=channel
    )


def _own_schema(schema: str, alias: str) -> bool | None:
    """Whether ``schema`` is ours (True), someone else's (False) or absent (None)."""
    exists, comment = pgmq_schema.schema_comment(schema, alias)
    if not exists:
        return None
    return bool(comment and comment.startswith(sql.OWN_SCHEMA_MARK))


def _refuse_foreign(schema: str, alias: str) -> bool:
    """Raise if PGMQ itself or another schema holds the name; whether ours is there.

    The PGMQ extension in another schema is no conflict: that is how its queues move over
    (docs/pgmq.md, with the interface installed under another name for the move).
    """
    if pgmq_schema.extension_schema(alias) == schema:
        raise PgmqSchemaConflict(
            f"The pgmq extension is installed in this database, in schema {schema!r}: "
            "pgq_django's PGMQ SQL interface cannot share it. Move its queues over and drop "
            "the extension (docs/pgmq.md), choose another PGQ['PGMQ_SCHEMA'], or unset it.",
            schema=schema,
        )
    own = _own_schema(schema, alias)
    if own is False:
        raise PgmqSchemaConflict(
            f"A schema named {schema!r} already exists and was not made by pgq_django: the "
            "PGMQ SQL interface will not replace it. Rename or drop that schema, or choose "
            "another PGQ['PGMQ_SCHEMA'].",
            schema=schema,
        )
    return own is True


def install(using: str | None = None, *, throttles: list[tuple[str, int]] | None = None) -> str:
    """Install (or reinstall) the interface in the configured schema; returns its name.

    ``throttles`` are queues to switch insert notifications on for (what a removal before
    ``migrate`` saved); a reinstall keeps those already on.
    """
    alias = using or settings.DATABASE
    schema = configured_schema()
    if schema is None:
        raise PgmqSchemaConflict("PGQ['PGMQ_SCHEMA'] is not set: nothing to install.")
    with transaction.atomic(using=alias):
        saved = list(throttles or [])
        if _refuse_foreign(schema, alias):
            saved += pgmq_schema.saved_throttles(schema, alias)
            pgmq_schema.drop_schema(schema, alias)
        if not tables_ready(alias):
            raise PgmqSchemaConflict(
                "pgq_django's tables are not migrated yet (the PGMQ SQL interface needs "
                "migration 0013): run migrate.",
                schema=schema,
            )
        tables = pgmq_schema.tables_schema(alias)
        if tables is None or not _PLAIN_NAME.fullmatch(tables):
            raise PgmqSchemaConflict(
                "pgq_django's tables are not in a schema with a plain lower-case name: the "
                "PGMQ SQL interface cannot be installed over them.",
                schema=schema,
            )
        channel = settings.NOTIFY_CHANNEL
        for name in sql.SCRIPTS:
            text = script(name, schema=schema, tables=tables, channel=channel)
            pgmq_schema.run_script(text, alias)
        for queue, ms in dict(saved).items():
            pgmq_schema.restore_throttle(schema, queue, ms, alias)
    logger.info("event=pgmq_schema_installed schema=%s", schema)
    return schema


def uninstall(using: str | None = None, schema: str | None = None) -> list[tuple[str, int]]:
    """Remove the interface's schema if it is ours; returns the insert-notification
    settings it held (to carry over a reinstall). A schema someone else made is left alone.
    """
    alias = using or settings.DATABASE
    name = schema or settings.PGMQ_SCHEMA or "pgmq"
    if not isinstance(name, str) or not _PLAIN_NAME.fullmatch(name):
        return []
    with transaction.atomic(using=alias):
        if not _own_schema(name, alias):
            return []
        saved = pgmq_schema.saved_throttles(name, alias)
        pgmq_schema.drop_schema(name, alias)
    logger.info("event=pgmq_schema_removed schema=%s", name)
    return saved


# Insert-notification settings saved by the pre_migrate removal, for post_migrate.
_CARRIED: dict[str, list[tuple[str, int]]] = {}


def on_pre_migrate(using: str, plan: Any = None, **kwargs: Any) -> None:
    """``pre_migrate`` of pgq_django: remove our schema so migrations can alter the tables
    under it (see the module docstring). Only when a pgq_django migration is about to run:
    otherwise the schema stays, and ``post_migrate`` replaces it in one transaction, so
    PGMQ clients never find it missing."""
    if using != settings.DATABASE:
        return
    if not any(migration.app_label == "pgq_django" for migration, _backwards in plan or []):
        return
    if not pgmq_schema.queue_table_exists(using):
        return
    _CARRIED[using] = uninstall(using)


def missing_schema_problem(using: str | None = None) -> str | None:
    """Why the configured interface is not in the database, or None (not configured, or
    there). The system checks say it, so a PGMQ client's "function pgmq.send does not
    exist" is explained before anyone meets it."""
    alias = using or settings.DATABASE
    schema = configured_schema()
    if schema is None:
        return None
    own = _own_schema(schema, alias)
    if own is True:
        return None
    if own is False:
        return (
            f"PGQ['PGMQ_SCHEMA'] is {schema!r}, but a schema of that name that pgq_django did "
            "not make is in the way: migrate will not replace it. Rename or drop it, or "
            "choose another name."
        )
    return (
        f"PGQ['PGMQ_SCHEMA'] is {schema!r}, but the PGMQ SQL interface is not installed in "
        f"database {alias!r}: run manage.py migrate to install it."
    )


def tables_ready(using: str | None = None) -> bool:
    """Whether pgq_django's tables are migrated far enough to carry the interface."""
    return pgmq_schema.tables_ready(using or settings.DATABASE)


def on_post_migrate(
    using: str, plan: Any = None, verbosity: int = 1, stdout: Any = None, **kwargs: Any
) -> None:
    """``post_migrate`` of pgq_django: install the schema when the setting names it, and say
    so in ``migrate``'s output (a schema appearing in the database is worth a line).

    Only after ``migrate`` (which passes its plan), not after ``flush``, which sends the
    signal too and changes no schema. With the setting unset, the schema stays removed;
    migrated back below the tables it needs (or to zero), it waits for a later ``migrate``.
    """
    if plan is None or using != settings.DATABASE:
        return
    carried = _CARRIED.pop(using, [])
    if configured_schema() is None:
        uninstall(using)
        return
    if not tables_ready(using):
        logger.info("event=pgmq_schema_waiting reason=tables_not_migrated")
        return
    schema = install(using, throttles=carried)
    if verbosity >= 1:
        (stdout or sys.stdout).write(
            f"  Installed the PGMQ SQL interface in schema {schema!r}: PGMQ 1.13.0's "
            f"functions and types, {schema}.meta, and a q_<name>/a_<name> view per queue.\n"
        )
