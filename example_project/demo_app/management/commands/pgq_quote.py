"""``manage.py pgq_quote ITEM …``: ask the pricing handler for a quote and print its reply.

The demo of request/reply (docs/workflows.md): ``pgq.request`` sends the request and waits
for the worker's reply, so a worker must be running (``make demo`` starts one).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

import pgq_django as pgq


class Command(BaseCommand):
    help = "Ask the demo pricing service for a quote (needs a running worker)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("items", nargs="+", help="Items to price.")
        parser.add_argument("--timeout", type=float, default=10.0, help="Seconds to wait.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            reply = pgq.request("pricing", {"items": options["items"]}, timeout=options["timeout"])
        except pgq.RequestTimeout as exc:
            raise CommandError(f"{exc.message} Is a worker running?") from None
        self.stdout.write(f"{reply['items']} item(s), total {reply['total']}")
