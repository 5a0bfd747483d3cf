"""What a rate or concurrency limit costs a lease: pgq_django against itself, in one run.

Three queues, drained by read+delete in one process, rounds interleaved: one without
limits, one with a rate limit and one with a concurrency limit, both far above what the
process reaches, so they never hold a message back and only the limited lease's own work is
measured (the queue's limit row locked, the bucket and the held leases kept, in a
transaction of its own). Cases: qty 1 and qty 100. The ratios are limited / unlimited (1.00:
as fast).

Run: ``python -m bench.limits`` (``--quick`` for a smoke run, ``--rounds N``).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from . import common

BODY = {"event": "order.created", "order_id": 12345, "items": ["a", "b", "c"], "note": "x" * 64}
# Contender -> create_queue() options: limits no single process comes near.
QUEUES: dict[str, dict[str, Any]] = {
    "unlimited": {},
    "rate_limit": {"rate_limit": 1_000_000},
    "concurrency_limit": {"concurrency_limit": 1_000_000},
}
# (title, qty, messages, messages with --quick)
CASES = (
    ("read+delete qty 1", 1, 2000, 40),
    ("read+delete qty 100", 100, 20_000, 400),
)


def queue_name(contender: str) -> str:
    return f"bench_limits_{contender}"


def main(argv: Sequence[str] | None = None) -> int:
    args = common.arguments(__doc__.splitlines()[0], argv)
    rounds = args.rounds or (3 if args.quick else 7)
    common.setup()
    import pgq_django as pgq  # after setup(): the package's models need Django configured

    for contender, options in QUEUES.items():
        pgq.drop_queue(queue_name(contender))
        pgq.create_queue(queue_name(contender), **options)
    print(f"bench.limits: {rounds} rounds per case", flush=True)
    rows = []
    summary: dict[str, dict[str, float | None]] = {}
    try:
        for title, qty, messages, quick in CASES:
            n = quick if args.quick else messages

            def fill(contender: str, _round: int, n: int = n) -> None:
                for start in range(0, n, 1000):
                    pgq.send_batch(queue_name(contender), [BODY] * min(1000, n - start))

            def measure(contender: str, n: int = n, qty: int = qty) -> float:
                seconds = common.timed(lambda: common.drain(queue_name(contender), qty))
                return n / seconds

            print(f"  {title}: {rounds} rounds of {n} messages …", flush=True)
            values = common.interleave(
                rounds,
                {c: (lambda _r, c=c: measure(c)) for c in QUEUES},
                before_each=fill,
            )
            ratios = {
                c: common.median(a / b for a, b in zip(values[c], values["unlimited"], strict=True))
                for c in QUEUES
                if c != "unlimited"
            }
            summary[title] = {"unlimited_msgs_per_s": common.median(values["unlimited"]), **ratios}
            rows.append(
                [
                    title,
                    common.fmt(common.median(values["unlimited"]), 0),
                    common.fmt(ratios["rate_limit"]),
                    common.fmt(ratios["concurrency_limit"]),
                ]
            )
    finally:
        for contender in QUEUES:
            pgq.drop_queue(queue_name(contender))
    common.print_table(
        "Limited leases: median of per-round ratios to the unlimited queue (1.00 = as fast)",
        ["case", "unlimited msg/s", "rate_limit / unlimited", "concurrency_limit / unlimited"],
        rows,
    )
    path = common.write_results(
        "limits-quick" if args.quick else "limits",
        {"rounds": rounds, "quick": args.quick, "summary": summary},
    )
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
