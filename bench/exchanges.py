"""Publishing to a fanout exchange with 10 bound queues vs 10 separate sends.

Both contenders put the same message on the same 10 queues, each delivery in its own
autocommit transaction, interleaved round by round on one database:

- ``publish``: ``pgq.publish(exchange, body)`` — one statement routes and inserts 10 rows.
- ``10 sends``: ``pgq.send(queue, body)`` once per queue — 10 statements, 10 round trips.
- ``10 sends, one tx``: the same 10 sends inside one ``transaction.atomic()`` (the fair
  comparison for throughput: one commit, still 10 round trips).

The table shows deliveries per second and the ratio of publish to each. Run:
``python -m bench.exchanges`` (``--quick`` for a smoke run, ``--rounds N``).
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from . import common

FANOUT = 10
BODY = {"event": "order.created", "order_id": 12345, "items": ["a", "b", "c"], "note": "x" * 64}


def _contenders(exchange: str, queues: list[str], n: int) -> dict[str, Callable[[int], float]]:
    from django.db import transaction

    import pgq_django as pgq

    def publish(_: int) -> float:
        return common.timed(lambda: [pgq.publish(exchange, BODY) for _ in range(n)])

    def sends(_: int) -> float:
        return common.timed(lambda: [pgq.send(q, BODY) for _ in range(n) for q in queues])

    def sends_in_one_tx(_: int) -> float:
        def run() -> None:
            for _ in range(n):
                with transaction.atomic():
                    for q in queues:
                        pgq.send(q, BODY)

        return common.timed(run)

    return {"publish": publish, "10 sends": sends, "10 sends, one tx": sends_in_one_tx}


def main(argv: Sequence[str] | None = None) -> int:
    args = common.arguments(__doc__.splitlines()[0], argv)
    rounds = args.rounds or (3 if args.quick else 7)
    per_round = 20 if args.quick else 300
    common.setup()
    import pgq_django as pgq

    tag = uuid.uuid4().hex[:8]
    exchange = pgq.create_exchange(f"bench_fanout_{tag}").name
    queues = [pgq.create_queue(f"bench_x{i}_{tag}").name for i in range(FANOUT)]
    for q in queues:
        pgq.bind_queue(q, exchange)
    print(f"bench.exchanges: {rounds} rounds x {per_round} messages x {FANOUT} queues", flush=True)

    def purge(_name: str, _round: int) -> None:
        for q in queues:
            pgq.purge_queue(q)

    try:
        seconds = common.interleave(
            rounds, _contenders(exchange, queues, per_round), before_each=purge
        )
    finally:
        pgq.drop_exchange(exchange, cascade=True)
    deliveries = per_round * FANOUT
    rate = {name: deliveries / common.median(values) for name, values in seconds.items()}
    rows: list[list[Any]] = [
        [name, common.fmt(r, 0), common.fmt(rate["publish"] / r)] for name, r in rate.items()
    ]
    common.print_table(
        f"Fanout to {FANOUT} queues: deliveries per second (median of {rounds} rounds)",
        ["contender", "deliveries/s", "publish is x faster"],
        rows,
    )
    path = common.write_results(
        "exchanges-quick" if args.quick else "exchanges",
        {
            "rounds": rounds,
            "messages_per_round": per_round,
            "fanout": FANOUT,
            "seconds": seconds,
            "deliveries_per_second": rate,
            "ratios": {name: rate["publish"] / r for name, r in rate.items()},
        },
    )
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
