"""Shared helpers of the Spark tests: one local session per module, data made through the API."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="the spark extra is installed by make venv")


def spark_session() -> Iterator[Any]:
    """A local[2] session on the test database; stopped when the module is done."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pgq_django import spark as pgq_spark

    spark = pgq_spark.session(
        "local[2]",
        app_name="pgq_django-tests",
        conf={
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.driver.memory": "1g",
        },
        dsn=pgq_spark.default_dsn(),
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        yield spark
    finally:
        spark.stop()


def sql_rows(statement: str, params: Any = None) -> list[tuple[Any, ...]]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return list(cursor.fetchall()) if cursor.description else []


EXTRA_LOWER = 20_000_000
EXTRA_UPPER = 30_000_000
DEFAULT_SHIFT = 50_000_000


def spread_over_partitions() -> list[str]:
    """Move some rows of both tables into a new range partition and into the default one.

    Rows with msg_id % 3 = 0 move up by 20,000,000 into a partition made for them, rows with
    msg_id % 5 = 0 (and not % 3) up by 50,000,000, where no range exists: the default
    partition. Ids then have gaps between three partitions. Returns the partitions made.
    """
    made = []
    for table in ("pgq_message", "pgq_archived_message"):
        name = f"{table}_spark_test"
        sql_rows(
            f"CREATE TABLE {name} PARTITION OF {table} "
            f"FOR VALUES FROM ({EXTRA_LOWER}) TO ({EXTRA_UPPER})"
        )
        made.append(name)
        sql_rows(f"UPDATE {table} SET msg_id = msg_id + %s WHERE msg_id %% 3 = 0", [EXTRA_LOWER])
        sql_rows(
            f"UPDATE {table} SET msg_id = msg_id + %s WHERE msg_id %% 5 = 0 AND msg_id < %s",
            [DEFAULT_SHIFT, EXTRA_LOWER],
        )
    return made


def drop_tables(names: list[str]) -> None:
    for name in names:
        sql_rows(f"DROP TABLE IF EXISTS {name}")
