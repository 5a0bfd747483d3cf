"""The PGMQ SQL interface beside PostgreSQL's own ``pgmq`` *extension*: refused, changing
nothing, in the extension's schema (by ``install`` and by ``migrate``); installed and working
under another name while the extension stays where it is (how docs/pgmq.md moves queues).

A real extension needs its control file in the server's extension directory. There is no
internet here, so a session fixture writes a stand-in (``pgmq.control`` and one SQL script
of version :data:`STAND_IN_VERSION`: a table and a function) into the embedded server's
directory inside this virtualenv, and removes what it wrote afterwards. A real
``pgmq.control`` already there is used as it is. Elsewhere (a system directory, another
machine) the tests skip and say why.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import psycopg
import pytest
from django.db import connection
from django.test.utils import override_settings
from psycopg import sql

from pgq_django.pgmq import install
from pgq_django.pgmq.install import PgmqSchemaConflict
from tests.conftest import _conninfo, run_django
from tests.pgmq_support import ours_sql, pgmq_settings, unique_queue

# A version no PGMQ release has: the stand-in's script cannot overwrite (or be mistaken
# for) a real one.
STAND_IN_VERSION = "0.0.0_pgq_django_test"
STAND_IN_MARK = "stand-in for the pgmq extension, written by the pgq_django tests"
STAND_IN_CONTROL = f"""\
# {STAND_IN_MARK} (tests/integration/test_pgmq_extension.py); removed after the run.
comment = '{STAND_IN_MARK}'
default_version = '{STAND_IN_VERSION}'
relocatable = false
superuser = true
"""
STAND_IN_SCRIPT = """\
\\echo Use "CREATE EXTENSION pgmq" to load this file. \\quit
CREATE TABLE @extschema@.meta (queue_name text PRIMARY KEY);
CREATE FUNCTION @extschema@.stand_in() RETURNS text LANGUAGE sql AS $$ SELECT 'pgmq' $$;
"""

CONFLICT = "The pgmq extension is installed in this database, in schema 'pgmq'"


class Extension(NamedTuple):
    """The ``pgmq`` extension the server can create: its version (None: the control file's
    default) and the schema its control file pins (None: any, chosen by CREATE EXTENSION)."""

    version: str | None
    pinned_schema: str | None


def _extension_dir(dsn: str) -> Path:
    """The server's extension directory, here; skips when the tests may not write to it."""
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute("SELECT setting FROM pg_config WHERE name = 'SHAREDIR'").fetchone()
    except psycopg.errors.InsufficientPrivilege:
        pytest.skip("the server's SHAREDIR (the pg_config view) is readable by a superuser only")
    assert row is not None
    directory = Path(row[0]) / "extension"
    venv = Path(sys.prefix).resolve()
    if venv not in directory.resolve().parents:
        pytest.skip(
            f"the server reads extensions from {directory}, not from the embedded PostgreSQL "
            f"in this virtualenv ({venv}): the tests write a stand-in pgmq extension only "
            "there, never into a system directory or another machine's"
        )
    if not os.access(directory, os.W_OK):
        pytest.skip(f"the server's extension directory {directory} is not writable")
    return directory


@pytest.fixture(scope="session")
def pgmq_extension(django_db_setup: Any) -> Iterator[Extension]:
    """An extension named ``pgmq`` the test server can create: the real one if installed,
    else the stand-in, written for this run and removed after it."""
    dsn = _conninfo(connection.settings_dict["NAME"])
    directory = _extension_dir(dsn)
    control = directory / "pgmq.control"
    script = directory / f"pgmq--{STAND_IN_VERSION}.sql"
    written: list[Path] = []
    try:
        if control.exists():
            pinned = re.search(r"^\s*schema\s*=\s*'?(\w+)'?", control.read_text(), re.M)
            found = Extension(None, pinned.group(1) if pinned else None)
        else:
            for path, text in ((script, STAND_IN_SCRIPT), (control, STAND_IN_CONTROL)):
                try:
                    out = path.open("x")  # never over a file someone else wrote
                except FileExistsError:
                    pytest.skip(f"{path} appeared meanwhile: another run is using the stand-in")
                with out:
                    written.append(path)
                    out.write(text)
            found = Extension(STAND_IN_VERSION, None)
        with psycopg.connect(dsn, autocommit=True) as conn:
            versions = conn.execute(
                "SELECT version FROM pg_available_extension_versions WHERE name = 'pgmq'"
            ).fetchall()
        if not versions or (found.version and (found.version,) not in versions):
            pytest.skip(f"the server does not see {control}: it runs on another file system")
        yield found
    finally:
        for path in reversed(written):
            path.unlink(missing_ok=True)


def _schema_exists(name: str) -> bool:
    return ours_sql("SELECT count(*) FROM pg_namespace WHERE nspname = %s", [name]) == [(1,)]


@contextmanager
def extension_in(extension: Extension, schema: str) -> Iterator[None]:
    """``CREATE EXTENSION pgmq`` in ``schema`` (made for it) of the test database; dropped
    with the schema after."""
    if extension.pinned_schema not in (None, schema):
        pytest.skip(
            f"the installed pgmq extension's control file pins its schema to "
            f"{extension.pinned_schema!r}; this test needs it in {schema!r}"
        )
    assert not _schema_exists(schema), f"schema {schema} is left over from an earlier test"
    version = sql.SQL(" VERSION {}").format(extension.version) if extension.version else sql.SQL("")
    ours_sql(
        sql.SQL("CREATE SCHEMA {s}; CREATE EXTENSION pgmq SCHEMA {s}{v}").format(
            s=sql.Identifier(schema), v=version
        )
    )
    try:
        assert ours_sql(
            "SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'pgmq'"
        ) == [(schema,)]
        yield
    finally:
        ours_sql(
            sql.SQL("DROP EXTENSION IF EXISTS pgmq; DROP SCHEMA IF EXISTS {} CASCADE").format(
                sql.Identifier(schema)
            )
        )


def catalog() -> dict[str, list[tuple[Any, ...]]]:
    """What the interface's install could create or change outside pg_catalog: schemas and
    their comments, relations, functions, triggers and extensions."""
    user = "NOT IN ('pg_catalog', 'information_schema', 'pg_toast')"
    queries = {
        "schemas": "SELECT nspname::text, obj_description(oid, 'pg_namespace')"
        f" FROM pg_namespace WHERE nspname {user}",
        "relations": "SELECT oid::regclass::text, relkind::text FROM pg_class"
        f" WHERE relnamespace::regnamespace::text {user}",
        "functions": "SELECT oid::regprocedure::text FROM pg_proc"
        f" WHERE pronamespace::regnamespace::text {user}",
        "triggers": "SELECT tgrelid::regclass::text, tgname::text FROM pg_trigger"
        " WHERE NOT tgisinternal",
        "extensions": "SELECT extname::text, extnamespace::regnamespace::text, extversion"
        " FROM pg_extension",
    }
    return {name: sorted(ours_sql(query)) for name, query in queries.items()}


def in_schema(snapshot: dict[str, list[tuple[Any, ...]]], schema: str) -> dict[str, Any]:
    """The part of a :func:`catalog` snapshot in ``schema``, and the pgmq extension's row."""
    found = {
        kind: [row for row in rows if str(row[0]).startswith(f"{schema}.")]
        for kind, rows in snapshot.items()
    }
    found["extensions"] = [row for row in snapshot["extensions"] if row[0] == "pgmq"]
    return found


@pytest.mark.django_db(transaction=True)
def test_install_refuses_the_pgmq_extensions_own_schema_and_changes_nothing(
    pgmq_extension: Extension,
) -> None:
    with extension_in(pgmq_extension, "pgmq"):
        before = catalog()
        with override_settings(PGQ=pgmq_settings()), pytest.raises(PgmqSchemaConflict) as err:
            install.install()
        assert str(err.value).startswith(CONFLICT), str(err.value)
        assert err.value.details == {"schema": "pgmq"}
        assert catalog() == before


@pytest.mark.django_db(transaction=True)
def test_migrate_refuses_the_pgmq_extensions_own_schema_and_changes_nothing(
    pgmq_extension: Extension,
) -> None:
    pgq = {**json.loads(os.environ.get("PGQ_TEST_PGQ") or "{}"), "PGMQ_SCHEMA": "pgmq"}
    with extension_in(pgmq_extension, "pgmq"):
        before = catalog()
        done = run_django("migrate", "--no-input", PGQ_TEST_PGQ=json.dumps(pgq))
        assert done.returncode != 0, done.stdout + done.stderr
        # migrate surfaces the refusal of its post_migrate handler as the exception's
        # traceback: the conflict is its last line, and no other error is chained to it.
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith(f"pgq_django.pgmq.install.PgmqSchemaConflict: {CONFLICT}"), (
            done.stderr
        )
        assert done.stderr.count("Traceback (most recent call last)") == 1, done.stderr
        assert catalog() == before


@pytest.mark.django_db(transaction=True)
def test_the_pgmq_extension_in_another_schema_is_no_conflict(pgmq_extension: Extension) -> None:
    with extension_in(pgmq_extension, "pgmq_ext"):
        theirs = catalog()
        try:
            with override_settings(PGQ=pgmq_settings(PGMQ_SCHEMA="pgmq_move")):
                assert install.install() == "pgmq_move"
            name = unique_queue()
            ours_sql("SELECT pgmq_move.create(%s)", [name])
            [(sent,)] = ours_sql("SELECT * FROM pgmq_move.send(%s, '{\"n\": 1}'::jsonb)", [name])
            read = ours_sql("SELECT msg_id, message FROM pgmq_move.read(%s, 30, 10)", [name])
            assert read == [(sent, {"n": 1})]
            # The extension is where it was, with what it holds.
            assert in_schema(catalog(), "pgmq_ext") == in_schema(theirs, "pgmq_ext")
        finally:
            install.uninstall(schema="pgmq_move")
        assert not _schema_exists("pgmq_move")
