"""Setting ``PGQ["PGMQ_SCHEMA"]`` is visible: ``check`` warns while the schema is configured
but not in the database, and ``migrate`` says what it installed."""

from __future__ import annotations

import json

import psycopg

from tests.acceptance.test_first_hour_errors import check_runs_database_checks
from tests.conftest import manage_on, run_django

PGMQ = json.dumps({"PGMQ_SCHEMA": "pgmq"})


def _schema_exists(database_url: str) -> bool:
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute("SELECT to_regnamespace('pgmq') IS NOT NULL").fetchone()
    return bool(row and row[0])


@check_runs_database_checks
def test_check_warns_until_migrate_installs_the_configured_interface(fresh_database: str) -> None:
    manage_on(fresh_database, "migrate", "-v", "0")
    assert not _schema_exists(fresh_database)

    checked = run_django("check", database_url=fresh_database, PGQ_TEST_PGQ=PGMQ)
    assert checked.returncode == 0, checked.stderr  # a warning, not an error
    report = checked.stdout + checked.stderr
    assert "pgq_django.W003" in report and "run manage.py migrate" in report, report
    assert not _schema_exists(fresh_database)  # checking installs nothing

    manage_on(fresh_database, "migrate", PGQ_TEST_PGQ=PGMQ)
    checked = run_django("check", database_url=fresh_database, PGQ_TEST_PGQ=PGMQ)
    report = checked.stdout + checked.stderr
    assert checked.returncode == 0 and "W003" not in report, report
    # Without the setting nothing is said about the interface at all.
    plain = run_django("check", database_url=fresh_database)
    assert plain.returncode == 0 and "W003" not in plain.stdout + plain.stderr


def test_migrate_says_it_installed_the_configured_interface(fresh_database: str) -> None:
    manage_on(fresh_database, "migrate", "-v", "0")
    assert not _schema_exists(fresh_database)
    migrated = manage_on(fresh_database, "migrate", PGQ_TEST_PGQ=PGMQ)
    assert "Installed the PGMQ SQL interface in schema 'pgmq'" in migrated, migrated
    assert _schema_exists(fresh_database)
