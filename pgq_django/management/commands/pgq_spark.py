"""``manage.py pgq_spark export|report|replay``: the Spark pipeline over the archive.

The command parses and checks arguments, builds a session for ``--master`` and calls
:mod:`pgq_django.spark.jobs`; progress goes to stdout. SIGINT/SIGTERM cancel the running
Spark job and exit with 128 + the signal number.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime, time, timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from pgq_django.exceptions import PgqError


def valid_time(value: str) -> datetime:
    """An ISO 8601 date or time; without an offset it is UTC."""
    from pgq_django.spark.options import timestamp

    try:
        found = timestamp(value, "time")
    except PgqError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None
    assert found is not None
    return found


def valid_day(value: str) -> datetime:
    """``yesterday``, ``today`` or a date: the UTC midnight it starts at."""
    today = datetime.now(UTC).date()
    named = {"today": today, "yesterday": today - timedelta(days=1)}
    if value in named:
        return datetime.combine(named[value], time(), tzinfo=UTC)
    try:
        return datetime.combine(datetime.strptime(value, "%Y-%m-%d").date(), time(), tzinfo=UTC)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a day: use YYYY-MM-DD, 'today' or 'yesterday'"
        ) from None


def _window(options: dict[str, Any], *, default_until: bool) -> tuple[Any, Any]:
    since, until, day = options.get("since"), options.get("until"), options.get("day")
    if day is not None:
        if since is not None or until is not None:
            raise CommandError("--day cannot be combined with --since or --until.")
        return day, day + timedelta(days=1)
    if until is None and default_until:
        until = datetime.now(UTC)
    if since is not None and until is not None and since >= until:
        raise CommandError("--since must be earlier than --until.")
    return since, until


class Command(BaseCommand):
    help = "Export the archive to Parquet, report on it, or replay archived messages (PySpark)."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

        def common(sub: argparse.ArgumentParser, *, window: bool = True) -> None:
            sub.add_argument(
                "--master",
                default=None,
                help="local[*] (default), a Spark master URL, or sc://host:port (Spark Connect).",
            )
            if window:
                sub.add_argument("--since", type=valid_time, help="archived_at >= this (UTC).")
                sub.add_argument("--until", type=valid_time, help="archived_at < this (UTC).")
                sub.add_argument(
                    "--day", type=valid_day, help="One UTC day: YYYY-MM-DD, today or yesterday."
                )

        export = actions.add_parser("export", help="Archive to Parquet, by queue and day.")
        common(export)
        export.add_argument("--to", required=True, metavar="PATH", help="Parquet directory.")

        report = actions.add_parser("report", help="Per-queue figures to JSON and a PNG chart.")
        common(report)
        report.add_argument(
            "--to", required=True, metavar="DIR", help="Directory for report.json/report.png."
        )

        replay = actions.add_parser("replay", help="Send archived or exported messages again.")
        common(replay)
        replay.add_argument(
            "--from",
            dest="source",
            required=True,
            metavar="PATH|archive",
            help="An export's Parquet directory, or 'archive' to read the archive table.",
        )
        replay.add_argument("--queue", required=True, help="The queue to send them to.")
        replay.add_argument(
            "--filter",
            default=None,
            metavar="EXPR",
            help="A Spark SQL condition on the archived columns, e.g. \"outcome = 'dead'\".",
        )

    def handle(self, *args: Any, action: str, master: str | None, **options: Any) -> None:
        from pyspark.sql import SparkSession

        from pgq_django.spark import jobs, session
        from pgq_django.spark.runtime import Interrupted, JobRunner, pgq_error_in

        since, until = _window(options, default_until=action == "export")
        # Called from a process that has a session already (call_command in a notebook):
        # use it and leave it running.
        ours = SparkSession.getActiveSession() is None
        try:
            if action == "replay":
                jobs.check_filter(options["filter"])
            spark = session(master, app_name=f"pgq_spark {action}")
        except PgqError as exc:
            raise CommandError(exc.message) from None
        runner = JobRunner(spark, self.stdout)
        try:
            with runner.signals():
                self._run(jobs, spark, runner, action, since, until, options)
        except Interrupted as exc:
            self.stderr.write(exc.message)
            sys.exit(128 + exc.signum)
        except PgqError as exc:
            raise CommandError(exc.message) from None
        except Exception as exc:
            message = pgq_error_in(exc)
            if message is None:
                raise
            raise CommandError(message) from None
        finally:
            if ours:
                spark.stop()

    def _run(
        self,
        jobs: Any,
        spark: Any,
        runner: Any,
        action: str,
        since: Any,
        until: Any,
        options: dict[str, Any],
    ) -> None:
        if action == "export":
            jobs.export(spark, runner, since=since, until=until, to=options["to"])
        elif action == "report":
            jobs.report(spark, runner, since=since, until=until, to=options["to"])
        else:
            jobs.replay(
                spark,
                runner,
                source=options["source"],
                queue=options["queue"],
                filter=options["filter"],
                since=since,
                until=until,
            )
