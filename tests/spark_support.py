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
