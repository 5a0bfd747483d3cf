"""The pipeline's jobs: export the archive to Parquet, report on it, replay it into a queue.

``manage.py pgq_spark`` parses arguments and calls these; they run on the driver, where
Django is set up (the export is recorded through :mod:`pgq_django.api.exports`), and leave
the reading and writing to the ``pgq`` data source on the executors.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ..exceptions import InvalidArgument
from .runtime import JobRunner

# The columns of an export, in order; queue and day are also its directory partitions.
EXPORT_SCHEMA = (
    "msg_id BIGINT, message STRING, headers STRING, attributes STRING, label STRING, "
    "priority INT, read_ct INT, enqueued_at TIMESTAMP, vt TIMESTAMP, expires_at TIMESTAMP, "
    "group_id STRING, archived_at TIMESTAMP, outcome STRING, error STRING, "
    "queue STRING, day DATE"
)
# What a replay sends of each archived message (the sink's column names).
REPLAY_COLUMNS = {
    "message": "body",
    "headers": "headers",
    "attributes": "attributes",
    "label": "label",
    "priority": "priority",
    "group_id": "group",
}
# Spark SQL functions that call into the JVM; a replay filter may not use them.
_JVM_CALLS = re.compile(r"\b(reflect|java_method|try_reflect)\s*\(", re.IGNORECASE)


def read_archive(
    spark: Any,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    queue: str | None = None,
    outcome: str | None = None,
) -> Any:
    """The archive as a DataFrame, narrowed to an archived_at window, a queue, outcomes."""
    reader = spark.read.format("pgq").option("table", "archive")
    for key, value in (("since", since), ("until", until), ("queue", queue), ("outcome", outcome)):
        if value is not None:
            reader = reader.option(key, value.isoformat() if isinstance(value, datetime) else value)
    return reader.load()


@dataclass(frozen=True)
class ExportResult:
    path: str
    rows: int
    min_msg_id: int | None
    max_msg_id: int | None
    since: datetime | None
    until: datetime | None


def export(
    spark: Any,
    runner: JobRunner,
    *,
    since: datetime | None,
    until: datetime | None,
    to: str,
    queue: str | None = None,
    record: bool = True,
) -> ExportResult:
    """Write archived_at ``[since, until)`` to Parquet at ``to``, by queue and day; record it.

    Files are appended, so consecutive windows can share one path. ``queue`` narrows the
    export to one queue (such an export is not recorded: it does not cover the archive).
    The row count and id range come from the same pass that writes the files (a Spark
    Observation), and the export is recorded only once Spark has committed them.
    """
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    observed = Observation("pgq_export")
    frame = read_archive(spark, since=since, until=until, queue=queue)
    frame = frame.withColumn("day", F.to_date("archived_at")).observe(
        observed,
        F.count(F.lit(1)).alias("rows"),
        F.min("msg_id").alias("min_msg_id"),
        F.max("msg_id").alias("max_msg_id"),
    )
    writer = frame.write.mode("append").partitionBy("queue", "day")
    runner.run(f"Exporting the archive to {to}", lambda: writer.parquet(to))
    stats = observed.get
    result = ExportResult(
        path=to,
        rows=int(stats.get("rows") or 0),
        min_msg_id=stats.get("min_msg_id"),
        max_msg_id=stats.get("max_msg_id"),
        since=since,
        until=until,
    )
    if record:
        from ..api.exports import record_export

        if until is None or queue is not None:
            raise InvalidArgument("Only a whole-archive export up to a set time is recorded.")
        record_export(
            since=since,
            until=until,
            path=to,
            rows=result.rows,
            min_msg_id=result.min_msg_id,
            max_msg_id=result.max_msg_id,
        )
    runner.say(f"Exported {result.rows} archived messages to {to}.")
    return result


@dataclass(frozen=True)
class QueueReport:
    queue: str
    messages: int
    window_seconds: float | None
    throughput_per_second: float | None
    latency_p50: float | None
    latency_p90: float | None
    latency_p99: float | None
    latency_max: float | None
    retry_rate: float
    dead_letter_rate: float


def report_frame(frame: Any, *, since: datetime | None, until: datetime | None) -> Any:
    """Per-queue figures of archived rows (see docs/spark.md for each definition)."""
    from pyspark.sql import functions as F

    latency = (F.unix_micros("archived_at") - F.unix_micros("enqueued_at")) / F.lit(1_000_000.0)
    dead = (F.col("outcome") == "dead") | F.get_json_object(
        "headers", "$.pgq_dead_letter"
    ).isNotNull()
    if since is not None and until is not None:
        window = F.lit((until - since).total_seconds())
    else:
        window = (
            F.max(F.unix_micros("archived_at")) - F.min(F.unix_micros("archived_at"))
        ) / F.lit(1_000_000.0)
    grouped = frame.withColumn("latency", latency).groupBy("queue")
    quantiles = F.percentile(F.col("latency"), F.array(F.lit(0.5), F.lit(0.9), F.lit(0.99)))
    return grouped.agg(
        F.count(F.lit(1)).alias("messages"),
        window.alias("window_seconds"),
        quantiles.alias("latency_quantiles"),
        F.max("latency").alias("latency_max"),
        F.avg(F.when(F.col("read_ct") > 1, 1.0).otherwise(0.0)).alias("retry_rate"),
        F.avg(F.when(dead, 1.0).otherwise(0.0)).alias("dead_letter_rate"),
    ).orderBy("queue")


def report(
    spark: Any,
    runner: JobRunner,
    *,
    since: datetime | None,
    until: datetime | None,
    to: str,
) -> list[QueueReport]:
    """Write ``report.json`` and ``report.png`` under ``to``; returns the per-queue figures."""
    frame = read_archive(spark, since=since, until=until)
    rows = runner.run(
        "Computing the report", lambda: report_frame(frame, since=since, until=until).collect()
    )
    queues = []
    for row in rows:
        q = row["latency_quantiles"] or [None, None, None]
        window = row["window_seconds"]
        queues.append(
            QueueReport(
                queue=row["queue"],
                messages=int(row["messages"]),
                window_seconds=window,
                throughput_per_second=(row["messages"] / window) if window else None,
                latency_p50=q[0],
                latency_p90=q[1],
                latency_p99=q[2],
                latency_max=row["latency_max"],
                retry_rate=float(row["retry_rate"]),
                dead_letter_rate=float(row["dead_letter_rate"]),
            )
        )
    out = Path(to)
    out.mkdir(parents=True, exist_ok=True)
    document = {
        "since": since.isoformat() if since else None,
        "until": until.isoformat() if until else None,
        "queues": [asdict(q) for q in queues],
    }
    (out / "report.json").write_text(json.dumps(document, indent=2) + "\n")
    _chart(queues, out / "report.png")
    runner.say(f"Report on {len(queues)} queues written to {out / 'report.json'} and report.png.")
    return queues


def _chart(queues: list[QueueReport], path: Path) -> None:
    """Throughput, latency percentiles and retry/dead-letter rates per queue, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    names = [q.queue for q in queues] or ["(no archived messages)"]
    fig, axes = plt.subplots(3, 1, figsize=(max(6.0, 1.2 * len(names)), 9), layout="constrained")
    positions = range(len(names))
    axes[0].bar(positions, [q.throughput_per_second or 0 for q in queues] or [0])
    axes[0].set_ylabel("messages / s")
    axes[0].set_title("Throughput")
    for offset, (label, attr) in enumerate(
        (("p50", "latency_p50"), ("p90", "latency_p90"), ("p99", "latency_p99"))
    ):
        values = [getattr(q, attr) or 0 for q in queues] or [0]
        axes[1].bar([p + (offset - 1) * 0.27 for p in positions], values, width=0.27, label=label)
    axes[1].set_ylabel("seconds")
    axes[1].set_title("End-to-end latency (enqueued to archived)")
    axes[1].legend()
    for offset, (label, attr) in enumerate(
        (("retried", "retry_rate"), ("dead", "dead_letter_rate"))
    ):
        values = [getattr(q, attr) for q in queues] or [0]
        axes[2].bar([p + (offset - 0.5) * 0.4 for p in positions], values, width=0.4, label=label)
    axes[2].set_ylabel("share of messages")
    axes[2].set_title("Retry and dead-letter rates")
    axes[2].legend()
    for axis in axes:
        axis.set_xticks(list(positions), names, rotation=30, ha="right")
    fig.savefig(path, dpi=100)
    plt.close(fig)


def check_filter(expression: str | None) -> str | None:
    """A replay filter: a Spark SQL boolean expression over the exported columns.

    Spark parses and evaluates it on the data; it is never run as Python. Functions that
    call into the JVM (``reflect``, ``java_method``) are refused.
    """
    if expression is None:
        return None
    if not expression.strip() or _JVM_CALLS.search(expression):
        raise InvalidArgument(
            "The filter must be a Spark SQL condition over the archived columns, such as "
            "\"outcome = 'dead'\"; reflect() and java_method() are not allowed.",
            field="filter",
        )
    return expression


def replay(
    spark: Any,
    runner: JobRunner,
    *,
    source: str,
    queue: str,
    filter: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> int:
    """Send archived messages again: from an export (a path) or the archive (``"archive"``).

    Each message keeps its body, headers (less the server's ``pgq_*`` keys, as
    :func:`pgq_django.replay` does), attributes, label, priority and group; within a task they
    are sent in msg_id order. Returns how many were sent.
    """
    from pyspark.errors import PySparkException
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    from ..api.queues import get_queue

    get_queue(queue)  # QueueNotFound before Spark starts
    expression = check_filter(filter)
    if source == "archive":
        frame = read_archive(spark, since=since, until=until)
    else:
        frame = spark.read.schema(EXPORT_SCHEMA).parquet(source)
        if since is not None:
            frame = frame.filter(F.col("archived_at") >= F.lit(since))
        if until is not None:
            frame = frame.filter(F.col("archived_at") < F.lit(until))
    if expression is not None:
        try:
            frame = frame.filter(expression)
            frame.schema  # noqa: B018 - analyse now: a bad expression fails before any write
        except PySparkException as exc:
            raise InvalidArgument(
                f"The filter is not a valid Spark SQL condition: {str(exc).splitlines()[0]}",
                field="filter",
            ) from None
    observed = Observation("pgq_replay")
    out = (
        frame.sortWithinPartitions("msg_id")
        .select(*[F.col(src).alias(dst) for src, dst in REPLAY_COLUMNS.items()])
        .observe(observed, F.count(F.lit(1)).alias("rows"))
    )
    # Server headers (pgq_dead_letter, …) described the original's life; the copy starts anew.
    writer = (
        out.write.format("pgq")
        .mode("append")
        .option("queue", queue)
        .option("dropReservedHeaders", "true")
    )
    runner.run(f"Replaying into queue {queue}", lambda: writer.save())
    sent = int(observed.get.get("rows") or 0)
    runner.say(f"Replayed {sent} messages into {queue}.")
    return sent
