"""What an idempotency key costs a send: ``pgq.send`` with and without a ``dedup_id``.

A send under a key (``dedup_id``) writes a claim beside the message (``pgq_dedup``, keyed
by queue and key), so that a repeat of the key within the deduplication window answers the
first msg_id instead of storing the message again. That is what makes a send safe to retry
after ``ConnectionLost`` (docs/operations.md, "Sends that can be retried"). Keys are off
unless the caller gives one; this measures what giving one costs.

Contenders, interleaved round by round on one queue, one connection, outside any
transaction (each send its own commit, as an application's plain ``pgq.send`` is):

- ``send``: ``pgq.send(queue, body)``.
- ``send, dedup_id``: the same with a new key per send (``uuid4().hex``, made inside the
  timed loop, since a caller makes one per message too).

Each is measured in wall time and in CPU time (this process and the PostgreSQL backend
serving it, from ``/proc``: see :mod:`bench.cputime`), which holds still on a loaded machine.

The queue is drained after each round, so both start every round from the same table.

Run: ``python -m bench.idempotency`` (``--quick`` for a smoke run, ``--rounds N``,
``--sends N`` per round).
"""

from __future__ import annotations

import argparse
import sys
import uuid
from collections.abc import Callable, Sequence

from django.db import connection

import pgq_django as pgq

from . import common, cputime

QUEUE = "bench_idempotency"
BODY = {"event": "order.created", "order_id": 12345, "items": ["a", "b", "c"], "note": "x" * 64}


def _backend() -> list[int]:
    """The PostgreSQL backend serving this process's Django connection."""
    connection.ensure_connection()
    return [connection.connection.info.backend_pid]


_METER = cputime.Meter(_backend)


def _contender(n: int, keyed: bool, cpu: list[float]) -> Callable[[int], float]:
    """``measure(round)``: µs of wall time per send; appends µs of CPU per send (this
    process and its backend: steady under load, where wall time is not) to ``cpu``."""

    def sends() -> float:
        start = common.clock()
        for _ in range(n):
            if keyed:
                pgq.send(QUEUE, BODY, dedup_id=uuid.uuid4().hex)
            else:
                pgq.send(QUEUE, BODY)
        return common.clock() - start

    def measure(_round: int) -> float:
        wall, used = _METER.measure(sends)
        cpu.append(used / n * 1e6)
        return wall / n * 1e6

    return measure


def _ratio(values: list[float], against: list[float]) -> float:
    """The median of each round's ratio: a slow moment of the machine lands on both sends of
    a round, so it moves the ratio less than it moves the two medians apart."""
    return common.median(v / a for v, a in zip(values, against, strict=True))


def _emptied(_name: str, _round: int) -> None:
    pgq.purge_queue(QUEUE)


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sends", type=int, default=None, help="sends per round and contender")


def main(argv: Sequence[str] | None = None) -> int:
    args = common.arguments(__doc__ or "", argv, extra=_options)
    rounds = args.rounds or (3 if args.quick else 15)
    sends = args.sends or (50 if args.quick else 1000)
    common.setup()
    pgq.drop_queue(QUEUE)
    pgq.create_queue(QUEUE)
    try:
        cpu: dict[str, list[float]] = {"send": [], "send, dedup_id": []}
        for warm in (_contender(20, False, []), _contender(20, True, [])):
            warm(0)
        values = common.interleave(
            rounds,
            {
                "send": _contender(sends, False, cpu["send"]),
                "send, dedup_id": _contender(sends, True, cpu["send, dedup_id"]),
            },
            before_each=_emptied,
        )
    finally:
        pgq.drop_queue(QUEUE)
    rows = []
    for case in ("send", "send, dedup_id"):
        wall, used = values[case], cpu[case]
        rows.append(
            [
                case,
                common.fmt(common.median(wall), 0),
                common.fmt(_ratio(wall, values["send"])),
                common.fmt(common.median(used), 0),
                common.fmt(_ratio(used, cpu["send"])),
            ]
        )
    common.print_table(
        f"One send per commit, {sends} sends x {rounds} rounds (medians of rounds; a ratio "
        "is the median of each round's)",
        ["case", "wall µs per send", "wall vs send", "CPU µs per send", "CPU vs send"],
        rows,
    )
    common.write_results(
        "idempotency",
        {"rounds": rounds, "sends": sends, "wall_microseconds": values, "cpu_microseconds": cpu},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
