"""``manage.py pgq_worker``: run the handlers of queued messages.

The command only parses and checks its arguments and starts a
:class:`pgq_django.worker.loop.Worker`; everything else lives in the worker package.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from pgq_django.conf import settings
from pgq_django.management.arguments import (
    MAX_BATCH_SIZE,
    batch_size,
    non_negative_float,
    positive_float,
    positive_int,
)
from pgq_django.readiness import not_migrated_message, unapplied_migrations
from pgq_django.store.availability import logger as availability_logger
from pgq_django.worker.executor import message_logger

# The worker's lines about single messages (acks, lease extensions): shown from -v 3.
MESSAGE_LOGGER = message_logger.name
AVAILABILITY_LOGGER = availability_logger.name


class Command(BaseCommand):
    help = "Lease messages and run their handlers until stopped (SIGTERM/SIGINT)."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--queue",
            action="append",
            dest="queues",
            metavar="QUEUE",
            help="Serve this queue (repeatable). Default: every queue with a handler.",
        )
        parser.add_argument(
            "--concurrency",
            type=positive_int,
            default=None,
            help="Worker threads (default PGQ['WORKER_CONCURRENCY']).",
        )
        parser.add_argument("--min-workers", type=positive_int, default=None)
        parser.add_argument(
            "--max-workers",
            type=positive_int,
            default=None,
            help="Grow up to this many threads while messages wait.",
        )
        parser.add_argument(
            "--idle-timeout",
            type=non_negative_float,
            default=60.0,
            help="Seconds a thread above --min-workers may idle before it stops.",
        )
        parser.add_argument(
            "--once",
            action="store_true",
            help="Drain what is visible, print processed=N failed=M and exit: status 1 if a "
            "handler failed (cron, CI, tests).",
        )
        parser.add_argument(
            "--grace",
            type=non_negative_float,
            default=None,
            help="Seconds a stop waits for running handlers (default PGQ['WORKER_GRACE_PERIOD']).",
        )
        parser.add_argument(
            "--poll-interval",
            type=non_negative_float,
            default=None,
            help="Fallback poll interval in seconds when no NOTIFY arrives.",
        )
        parser.add_argument(
            "--handler-timeout",
            type=positive_float,
            default=None,
            help="Seconds one attempt may run before it is nacked as failed and its lease is "
            "no longer extended (handlers' own timeout= wins). Default: no limit.",
        )
        parser.add_argument(
            "--batch-size",
            type=batch_size,
            default=None,
            metavar="N",
            help="Batch commit: lease N messages at a time and run each batch in one "
            "transaction, every handler in its own savepoint, the successes acknowledged "
            f"together (1-{MAX_BATCH_SIZE}; handlers with atomic=False keep one message per "
            "transaction). Default: one transaction per message.",
        )
        parser.add_argument(
            "--no-listen", action="store_true", help="Do not LISTEN for wake-ups; poll only."
        )
        parser.add_argument(
            "--no-maintenance",
            action="store_true",
            help="Never take part in leader election and maintenance.",
        )
        parser.add_argument(
            "--import",
            action="append",
            dest="imports",
            default=[],
            metavar="MODULE",
            help="Import this module to register handlers (besides each app's pgq_handlers).",
        )

    def check(self, *args: Any, **kwargs: Any) -> None:
        """Missing migrations first, as one line, before the system checks' report of them."""
        self._require_migrated()
        super().check(*args, **kwargs)

    def _require_migrated(self) -> None:
        """Stop with "run migrate" when the database lacks pgq_django's migrations.

        Without them the first query fails deep inside the worker with PostgreSQL's
        ``relation "pgq_queue" does not exist`` and a long traceback.
        """
        if getattr(self, "_migrated", False):
            return
        unapplied = unapplied_migrations(settings.DATABASE)
        if unapplied:
            raise CommandError(not_migrated_message(settings.DATABASE, unapplied))
        self._migrated = True

    def handle(self, *args: Any, **options: Any) -> None:
        from pgq_django.exceptions import PgqError
        from pgq_django.worker.loop import Worker
        from pgq_django.worker.registry import autodiscover

        self._configure_logging(options["verbosity"])
        self._require_migrated()
        if options["concurrency"] and (options["min_workers"] or options["max_workers"]):
            raise CommandError("Use --concurrency or --min-workers/--max-workers, not both.")
        concurrency = options["concurrency"] or settings.WORKER_CONCURRENCY
        min_workers = options["min_workers"] or (
            min(concurrency, options["max_workers"]) if options["max_workers"] else concurrency
        )
        if options["max_workers"] and options["max_workers"] < min_workers:
            raise CommandError("--max-workers must be at least --min-workers.")
        try:
            autodiscover(options["imports"])
            worker = Worker(
                options["queues"],
                min_workers=min_workers,
                max_workers=options["max_workers"] or min_workers,
                idle_timeout=options["idle_timeout"],
                once=options["once"],
                grace=_or(options["grace"], settings.WORKER_GRACE_PERIOD),
                poll_interval=_or(options["poll_interval"], settings.WORKER_POLL_INTERVAL),
                listen=not options["no_listen"],
                lead=not options["no_maintenance"],
                maintenance_interval=settings.WORKER_MAINTENANCE_INTERVAL,
                handler_timeout=options["handler_timeout"],
                batch_size=options["batch_size"],
            )
        except (PgqError, ImportError) as exc:
            raise CommandError(str(exc)) from None
        if not worker.handlers:
            raise CommandError("No queue has a handler: nothing to do.")
        code = worker.run()
        if options["once"]:
            self.stdout.write(f"processed={worker.processed} failed={worker.failed}")
        if code:
            sys.exit(code)

    def _configure_logging(self, verbosity: int) -> None:
        """``-v`` sets the worker's log level; its lines go to stderr unless the project's
        LOGGING already gives ``pgq_django.worker`` (or an ancestor) a handler.

        ``-v 2`` is DEBUG with a ``worker_summary`` line per interval; the lines written per
        message (``pgq_django.worker.messages``) take ``-v 3``, so a busy worker at ``-v 2``
        does not write a line for every message it handles.
        """
        level = {0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG)
        # The worker's own lines, and the process's outage lines (database lost, still
        # down, back), which every part of the worker shares.
        for name in ("pgq_django.worker", AVAILABILITY_LOGGER):
            log = logging.getLogger(name)
            if not log.hasHandlers():
                handler = logging.StreamHandler(sys.stderr)
                handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
                log.addHandler(handler)
                log.propagate = False
            log.setLevel(level)
        per_message = logging.getLogger(MESSAGE_LOGGER)
        per_message.setLevel(logging.DEBUG if verbosity >= 3 else logging.INFO)


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value
