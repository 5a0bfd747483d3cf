"""pgq_django on Spark: queues and the archive as sources and sinks of PySpark pipelines.

Install the extra (``pip install -e "/path/to/pgq_django[spark]"`` from a checkout:
PySpark 4, pyarrow, matplotlib) and::

    from pgq_django import spark as pgq_spark

    spark = pgq_spark.session()                 # local[*]; or session("spark://host:7077")
    archive = spark.read.format("pgq").option("table", "archive").load()

:func:`register` adds the ``pgq`` data source to a session you built yourself. Executors
run without Django: they connect with the libpq conninfo of the ``dsn`` option, which
defaults to the Django database the queues live in (``PGQ["DATABASE"]``) when the source
is registered from a process where Django is set up. See docs/spark.md.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["default_dsn", "register", "session"]

# Spark masks option and configuration values that match this (the dsn's password).
REDACTION = r"(?i)password\s*=\s*\S+|://[^/@\s]+@"


def default_dsn() -> str | None:
    """The libpq conninfo of the queue database from Django's settings (None without Django)."""
    from django.conf import settings as django_settings

    if not django_settings.configured:
        return None
    from ..conf import settings
    from ..store.connection import conninfo

    return conninfo(settings.DATABASE)


def _parallelism(spark: SparkSession) -> int:
    try:
        return max(1, int(spark.sparkContext.defaultParallelism))
    except Exception:  # Spark Connect has no SparkContext on the client
        return 2


def register(spark: SparkSession, *, dsn: str | None = None) -> type:
    """Register the ``pgq`` data source on ``spark``; returns the registered class.

    The class carries the defaults executors need but cannot compute: the conninfo (``dsn``,
    or Django's queue database), the NOTIFY channel and the session's parallelism as the
    default number of input partitions. Options given to a read or write override them.
    """
    from django.conf import settings as django_settings

    from ..conf import settings
    from .source import PgqDataSource

    channel = str(settings.NOTIFY_CHANNEL) if django_settings.configured else "pgq"
    attrs = {
        "default_dsn": dsn or default_dsn(),
        "default_partitions": _parallelism(spark),
        "notify_channel": channel,
        "__module__": PgqDataSource.__module__,
    }
    # A class made here is pickled by value, so the defaults travel with it to the workers.
    source = type("PgqDataSource", (PgqDataSource,), attrs)
    spark.dataSource.register(source)
    return source


def session(
    master: str | None = None,
    *,
    app_name: str = "pgq_django",
    conf: dict[str, str] | None = None,
    dsn: str | None = None,
) -> SparkSession:
    """A SparkSession with the ``pgq`` source registered.

    ``master`` is ``local[*]`` by default, any Spark master URL (``spark://host:7077``,
    ``yarn``, ``k8s://…``) or a Spark Connect URL (``sc://host:15002``). Times are UTC, so
    days and windows mean the same on every machine. Python workers use this interpreter
    unless ``PYSPARK_PYTHON`` or ``spark.pyspark.python`` says otherwise.
    """
    from pyspark.sql import SparkSession

    master = master or "local[*]"
    builder = SparkSession.builder.appName(app_name)
    builder = builder.remote(master) if master.startswith("sc://") else builder.master(master)
    settings = {
        "spark.sql.session.timeZone": "UTC",
        "spark.redaction.string.regex": REDACTION,
        "spark.sql.redaction.string.regex": REDACTION,
    }
    if not master.startswith("sc://") and not os.environ.get("PYSPARK_PYTHON"):
        # Read by the JVM when it starts (the planner's workers look only at the environment).
        os.environ["PYSPARK_PYTHON"] = sys.executable
        settings["spark.pyspark.python"] = sys.executable
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark, dsn=dsn)
    return spark
