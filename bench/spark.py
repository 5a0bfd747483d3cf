"""Spark pipeline benchmark: export rows/s vs COPY into pyarrow, and batch read scaling.

``python -m bench.spark [--rows N] [--quick]`` archives N messages (default 1,000,000; 20,000
with ``--quick``) in a queue of the benchmark database, then measures in one run:

- export: ``pgq_spark export`` of those rows to Parquet (local[*]: every core), rows per
  second, against one Python process doing ``COPY (SELECT …) TO STDOUT`` into a pyarrow
  table (and that table written to Parquet), on the same rows and columns;
- the driver's memory: the Python driver's peak RSS before and after the export (the rows
  stream through the executors, so it should not grow with N);
- batch read: the pgq source read in full (a ``noop`` sink) with 1, 2 and 4 input partitions.

Each measurement runs once: at a million rows a run is long enough to be stable, and the
point is the ratio between contenders measured side by side.
"""

from __future__ import annotations

import io
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import common

# The exported columns, as the pgq source reads them (bodies and headers as JSON text).
COPY_COLUMNS = """
m.msg_id, q.name AS queue, m.message::text AS message, m.headers::text AS headers,
m.attributes::text AS attributes, m.label, m.priority, m.read_ct, m.enqueued_at, m.vt,
m.expires_at, m.group_id, m.archived_at, m.outcome::text AS outcome, m.error
"""


def _archive_rows(queue: str, rows: int) -> None:
    """Put ``rows`` acked messages of ``queue`` straight into the archive (set-up only)."""
    with common.connect() as conn:
        conn.execute(
            """
            INSERT INTO pgq_archived_message (msg_id, queue_id, message, headers, attributes,
                label, priority, read_ct, enqueued_at, vt, archived_at, outcome)
            SELECT nextval('pgq_message_msg_id_seq'), q.id,
                   jsonb_build_object('order', g, 'customer', 'c' || (g %% 1000),
                                      'amount', (g %% 10000) / 100.0, 'items', g %% 7),
                   jsonb_build_object('trace', md5(g::text), 'content_type', 'application/json'),
                   '{}'::jsonb, NULL, 0, 1 + (g %% 3 = 0)::int,
                   now() - make_interval(secs => 60 + g %% 600), now() - interval '30 seconds',
                   now() - make_interval(secs => g %% 50), 'acked'
            FROM pgq_queue q, generate_series(1, %s) g WHERE q.name = %s
            """,
            [rows, queue],
        )
        conn.execute("ANALYZE pgq_archived_message")


def _peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _copy_to_arrow(queue: str, parquet: Path | None) -> tuple[float, int]:
    """COPY the same rows into a pyarrow table (and Parquet); (seconds, rows)."""
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    start = time.perf_counter()
    buffer = io.BytesIO()
    with common.connect() as conn, conn.cursor() as cursor:
        statement = (
            f"COPY (SELECT {COPY_COLUMNS} FROM pgq_archived_message m "
            "JOIN pgq_queue q ON q.id = m.queue_id WHERE q.name = %s) "
            "TO STDOUT WITH (FORMAT csv, HEADER true)"
        )
        with cursor.copy(statement, [queue]) as copy:
            for chunk in copy:
                buffer.write(chunk)
    buffer.seek(0)
    table = pacsv.read_csv(buffer)
    if parquet is not None:
        pq.write_table(table, parquet)
    return time.perf_counter() - start, table.num_rows


def main(argv: Sequence[str] | None = None) -> int:
    def extra(parser: Any) -> None:
        parser.add_argument("--rows", type=int, default=None, help="archived messages")

    args = common.arguments(__doc__.splitlines()[0], argv, extra=extra)
    rows = args.rows or (20_000 if args.quick else 1_000_000)
    common.setup()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    import io as _io

    import pgq_django as pgq
    from pgq_django import spark as pgq_spark
    from pgq_django.spark import jobs
    from pgq_django.spark.runtime import JobRunner

    queue = pgq.create_queue(f"bench_spark_{uuid.uuid4().hex[:8]}").name
    warm = pgq.create_queue(f"bench_spark_warm_{uuid.uuid4().hex[:8]}").name
    workdir = Path(tempfile.mkdtemp(prefix="pgq-bench-spark-"))
    spark = None
    try:
        print(f"bench.spark: archiving {rows:,} messages ...", flush=True)
        _archive_rows(queue, rows)
        _archive_rows(warm, 20_000)
        spark = pgq_spark.session(
            conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4"}
        )
        spark.sparkContext.setLogLevel("ERROR")
        runner = JobRunner(spark, _io.StringIO())
        # Warm up (JIT, Python workers) on another queue: the first export of a session
        # runs at half speed, which would measure Spark's start-up, not the export.
        jobs.export(spark, runner, since=None, until=None, to=str(workdir / "w"), queue=warm,
                    record=False)  # fmt: skip

        rss_before = _peak_rss_mb()
        start = time.perf_counter()
        result = jobs.export(
            spark, runner, since=None, until=None, to=str(workdir / "x"), queue=queue, record=False
        )
        export_s = time.perf_counter() - start
        rss_after = _peak_rss_mb()
        assert result.rows == rows, result

        copy_s, copied = _copy_to_arrow(queue, None)
        copy_pq_s, _ = _copy_to_arrow(queue, workdir / "copy.parquet")
        assert copied == rows

        read_rates = {}
        for parts in (1, 2, 4):
            frame = (
                spark.read.format("pgq")
                .option("queue", queue)
                .option("numPartitions", str(parts))
                .load()
            )
            start = time.perf_counter()
            frame.write.format("noop").mode("overwrite").save()
            read_rates[parts] = rows / (time.perf_counter() - start)
    finally:
        if spark is not None:
            spark.stop()
        pgq.drop_queue(queue)
        pgq.drop_queue(warm)
        shutil.rmtree(workdir, ignore_errors=True)

    export_rate, copy_rate, copy_pq_rate = rows / export_s, rows / copy_s, rows / copy_pq_s
    common.print_table(
        f"Export of {rows:,} archived messages to Parquet (one run, local[*] on "
        f"{os.cpu_count()} cores)",
        ["contender", "rows/s", "pgq_spark export vs it"],
        [
            ["pgq_spark export (Spark, Parquet)", common.fmt(export_rate, 0), "1.00"],
            [
                "COPY TO -> pyarrow table",
                common.fmt(copy_rate, 0),
                common.fmt(export_rate / copy_rate),
            ],
            [
                "COPY TO -> pyarrow -> Parquet",
                common.fmt(copy_pq_rate, 0),
                common.fmt(export_rate / copy_pq_rate),
            ],
        ],
    )
    common.print_table(
        "Driver (Python) peak RSS around the export, MB",
        ["before", "after", "growth"],
        [
            [
                common.fmt(rss_before, 0),
                common.fmt(rss_after, 0),
                common.fmt(rss_after - rss_before, 0),
            ]
        ],
    )
    common.print_table(
        f"Batch read of {rows:,} rows (noop sink)",
        ["input partitions", "rows/s", "vs 1 partition"],
        [[p, common.fmt(r, 0), common.fmt(r / read_rates[1])] for p, r in read_rates.items()],
    )
    path = common.write_results(
        "spark-quick" if args.quick else "spark",
        {
            "rows": rows,
            "export_rows_per_second": export_rate,
            "copy_to_arrow_rows_per_second": copy_rate,
            "copy_to_arrow_parquet_rows_per_second": copy_pq_rate,
            "export_vs_copy": export_rate / copy_rate,
            "export_vs_copy_parquet": export_rate / copy_pq_rate,
            "driver_peak_rss_mb": {"before": rss_before, "after": rss_after},
            "read_rows_per_second": read_rates,
        },
    )
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
