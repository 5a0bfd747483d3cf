"""``manage.py pgq_partitions``: partition upkeep on demand (the worker leader runs it too)."""

from __future__ import annotations

import argparse
import signal
import threading
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from pgq_django.management.arguments import non_negative_int
from pgq_django.store.partitions import MAX_PREMAKE, upkeep


def premake_count(value: str) -> int:
    """A number of partitions to premake: 0 to MAX_PREMAKE."""
    number = non_negative_int(value)
    if number > MAX_PREMAKE:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_PREMAKE}")
    return number


class Command(BaseCommand):
    help = (
        "Repair rows in the default partitions, premake message and archive partitions ahead "
        "of the msg_id sequence, tune live partitions' autovacuum settings and drop drained "
        "ones (and truncate a drained live range the sequence is still in), printing each "
        "action as it is done."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--premake",
            type=premake_count,
            default=None,
            help="Ranges to keep ready ahead of the sequence, 0-100 "
            "(default: PGQ['PARTITION_PREMAKE']).",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="Print what would be done; change nothing."
        )

    def handle(self, *args: Any, premake: int | None, dry_run: bool, **options: Any) -> None:
        stopping: list[int] = []

        def stop_after_this_action(signum: int, frame: Any) -> None:
            # The first signal ends the run between two actions (each is its own committed
            # transaction); the previous handlers come back, so a second signal interrupts.
            stopping.append(signum)
            for sig, handler in previous.items():
                signal.signal(sig, handler)

        # Only the main thread may install signal handlers. Called from another thread (a
        # scheduler, a job runner), the run is not the process's to stop: it runs to the end.
        previous = (
            {
                sig: signal.signal(sig, stop_after_this_action)
                for sig in (signal.SIGINT, signal.SIGTERM)
            }
            if threading.current_thread() is threading.main_thread()
            else {}
        )
        started = time.monotonic()
        prefix = "would " if dry_run else ""
        count = 0
        try:
            for action in upkeep(premake, dry_run=dry_run, stop=lambda: bool(stopping)):
                count += 1
                self.stdout.write(f"{prefix}{action}")
                self.stdout.flush()
        finally:
            for sig, handler in previous.items():
                if signal.getsignal(sig) is stop_after_this_action:
                    signal.signal(sig, handler)
        elapsed = time.monotonic() - started
        if stopping:
            self.stdout.write(f"stopped by signal after {count} actions ({elapsed:.1f}s)")
        elif not count:
            self.stdout.write("partitions are up to date")
        else:
            self.stdout.write(f"{count} actions in {elapsed:.1f}s")
