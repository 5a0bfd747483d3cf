#!/usr/bin/env python
"""The example shop's nightly Spark pipeline (see docs/spark.md).

1. ``pgq_spark export``: yesterday's archive to Parquet under OUT/archive, by queue and day;
   the export is recorded in ``SparkExport``, so retention knows it is safe elsewhere.
2. ``pgq_spark report``: per-queue throughput, latency percentiles, retry and dead-letter
   rates of that day, to OUT/reports/DAY/report.json and report.png.
3. ``pgq_spark replay``: the messages that died that day in a queue without a dead-letter
   queue (archived as ``dead``) are read back from the export and sent to their queue
   again (a filter Spark evaluates on the exported rows).

``python example_project/spark_pipeline.py [--day YYYY-MM-DD|yesterday] [--out DIR]
[--master URL] [--no-replay]``. Needs the spark extra (``make venv`` installs it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def main() -> None:
    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--day", default="yesterday", help="YYYY-MM-DD, today or yesterday")
    parser.add_argument("--out", default=str(root / ".spark"), help="output directory")
    parser.add_argument("--master", default=None, help="Spark master (default local[*])")
    parser.add_argument("--no-replay", action="store_true", help="export and report only")
    args = parser.parse_args()

    import django

    django.setup()
    from django.core.management import call_command

    from pgq_django.management.commands.pgq_spark import valid_day

    day = valid_day(args.day).date().isoformat()
    out = Path(args.out)
    master = ["--master", args.master] if args.master else []
    archive, reports = out / "archive", out / "reports" / day
    call_command("pgq_spark", "export", "--day", day, "--to", str(archive), *master)
    call_command("pgq_spark", "report", "--day", day, "--to", str(reports), *master)
    figures = json.loads((reports / "report.json").read_text())["queues"]
    for queue in (q["queue"] for q in figures if q["dead_letter_rate"] > 0):
        if args.no_replay:
            print(f"{queue} has dead letters on {day}; not replayed (--no-replay)")
            continue
        # Messages that died in this queue (it has no dead-letter queue; a queue with one
        # keeps its dead letters live there, for pgq.redrive()).
        condition = f"day = DATE'{day}' AND queue = '{queue}' AND outcome = 'dead'"
        call_command(
            "pgq_spark", "replay", "--from", str(archive), "--queue", queue,
            "--filter", condition, *master,
        )  # fmt: skip


if __name__ == "__main__":
    main()
