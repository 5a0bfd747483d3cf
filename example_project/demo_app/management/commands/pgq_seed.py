"""``manage.py pgq_seed``: create the demo queues and send demo traffic."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from ...seed import seed_exchanges, seed_queues, seed_traffic


class Command(BaseCommand):
    help = "Create the example project's demo queues and send them demo messages."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--no-traffic",
            action="store_true",
            help="Only create the queues; send no messages.",
        )

    def handle(self, *args: Any, no_traffic: bool = False, **options: Any) -> None:
        seed_queues(log=self.stdout.write)
        seed_exchanges(log=self.stdout.write)
        if not no_traffic:
            seed_traffic(log=self.stdout.write)
        self.stdout.write(self.style.SUCCESS("demo queues are ready"))
