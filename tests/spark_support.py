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


def spread_over_partitions() -> list[str]:
    """Move some rows of both tables into a new range partition and into the default one.

    The new range starts at 20,000,000 or above every range that exists (earlier tests in
    the same run may have premade some, and DDL outlives their flush): rows with
    msg_id % 3 = 0 move up into it, rows with msg_id % 5 = 0 (and not % 3) further up, where
    no range exists: the default partition. Ids then have gaps between three partitions.
    Returns the partitions made.
    """
    from pgq_django.partitions import DURABLE, list_partitions

    tables = ("pgq_message", "pgq_archived_message")
    tops = [p.upper for t in tables for p in list_partitions(t, DURABLE)]
    newest = max(sql_rows(f"SELECT coalesce(max(msg_id), 0) FROM {t}")[0][0] for t in tables)
    span = max(10_000_000, newest + 1)  # every moved id fits in the new range
    lower = max([20_000_000, newest + 1, *tops])
    upper = lower + span
    default_shift = upper + 2 * span
    made = []
    for table in tables:
        name = f"{table}_spark_test"
        sql_rows(f"CREATE TABLE {name} PARTITION OF {table} FOR VALUES FROM ({lower}) TO ({upper})")
        made.append(name)
        sql_rows(f"UPDATE {table} SET msg_id = msg_id + %s WHERE msg_id %% 3 = 0", [lower])
        sql_rows(
            f"UPDATE {table} SET msg_id = msg_id + %s WHERE msg_id %% 5 = 0 AND msg_id < %s",
            [default_shift, lower],
        )
    return made


def drop_tables(names: list[str]) -> None:
    for name in names:
        sql_rows(f"DROP TABLE IF EXISTS {name}")
