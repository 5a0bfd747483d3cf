"""``manage.py pgq_partitions``: partition upkeep on demand (the worker leader runs it too)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from .pgq_worker import non_negative_int


def premake_count(value: str) -> int:
    """A number of partitions to premake: 0 to MAX_PREMAKE."""
    import argparse

    from pgq_django.partitions import MAX_PREMAKE

    number = non_negative_int(value)
    if number > MAX_PREMAKE:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_PREMAKE}")
    return number


class Command(BaseCommand):
    help = (
        "Premake message and archive partitions ahead of the msg_id sequence and drop "
        "drained ones, printing each action."
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
        from pgq_django.partitions import run_maintenance

        actions = run_maintenance(premake, dry_run=dry_run)
        prefix = "would " if dry_run else ""
        for action in actions:
            self.stdout.write(prefix + action)
        if not actions:
            self.stdout.write("partitions are up to date")
