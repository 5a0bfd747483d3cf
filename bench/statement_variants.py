"""What each lean variant of the send and ack statements saves over the general one.

pgq_django's usual send (one body, no options) does not run the general ``SEND``: it runs
``SEND_ONE`` (one INSERT, no room check) and, when the queue has a ``max_length`` or that
INSERT did not send, ``SEND_PLAIN`` (SEND's checks with the options as constants). The usual
ack does not run the general ``DELETE`` (arrays of receipts) either: it runs ``ACK_ONE`` (one
DELETE joined to its queue) and, when that did not delete, ``DELETE_ONE`` (DELETE's checks
with scalar parameters). Each variant is text to read and a statement to keep in step with
the others, so each must earn its place: the design keeps a variant only when it saves at
least 3 % on some case.

This bench runs the statements themselves, with the parameters the managers give them, on
one plain psycopg connection (prepared after psycopg's first few runs, as the runner does),
so nothing but the statement and its binding differs between contenders. Cases:

- ``send``: a send that commits on its own, into a queue without ``max_length``;
- ``send in a transaction``: the same inside ``BEGIN … COMMIT``, where the statement writes
  the counter row;
- ``send, bounded``: autocommit sends into a queue with ``max_length``, which SEND_ONE never
  serves;
- ``ack``, ``ack in a transaction`` and ``ack, archiving``: one leased message deleted by
  its receipt, the last into the archive (``archive_on_ack``), which ACK_ONE never serves.

Each case runs its statements in rotating order, a block of operations at a time; the table
gives the median microseconds per operation and each variant's saving over the general
statement (the median of per-round ratios, minus one). Queues are durable, so every
operation waits for its commit as a user's does; ``--no-flush`` turns ``synchronous_commit``
off for the session to show the statements' own cost without the WAL flush.

Run: ``python -m bench.statement_variants`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

import pgq_django as pgq
from pgq_django.conf import settings
from pgq_django.store.sql import messages
from pgq_django.store.sql.params import (
    delete_one_params,
    delete_params,
    send_one_params,
    send_params,
)

from . import common
from .core import ratio

BODY = {"event": "order.created", "order_id": 12345, "note": "x" * 64}
QUEUE = "bench_statement_variants"


@dataclass(frozen=True)
class Case:
    name: str
    #: The statements compared, from the general one to the leanest: each is measured
    #: against the general one and against the one before it, which it stands in front of.
    statements: tuple[str, ...]
    in_transaction: bool = False
    max_length: int | None = None
    archive_on_ack: bool = False

    @property
    def acks(self) -> bool:
        return self.statements[0].startswith("DELETE")


CASES = (
    Case("send", ("SEND_UNCOUNTED", "SEND_PLAIN", "SEND_ONE")),
    Case(
        "send in a transaction",
        ("SEND", "SEND_PLAIN_COUNTED", "SEND_ONE_COUNTED"),
        in_transaction=True,
    ),
    Case("send, bounded", ("SEND_UNCOUNTED", "SEND_PLAIN"), max_length=10**9),
    Case("ack", ("DELETE_UNCOUNTED", "DELETE_ONE_UNCOUNTED", "ACK_ONE")),
    Case("ack in a transaction", ("DELETE", "DELETE_ONE"), in_transaction=True),
    Case("ack, archiving", ("DELETE_UNCOUNTED", "DELETE_ONE_UNCOUNTED"), archive_on_ack=True),
)


def _statement(case: Case, name: str) -> str:
    """The statement's text; the ack shapes are keyed by whether the queue archives on ack."""
    found = getattr(messages, name)
    return found[case.archive_on_ack] if isinstance(found, dict) else found


def _send_params(name: str) -> dict[str, Any]:
    """What the manager passes the named send statement for one body without options."""
    body = json.dumps(BODY)
    size = len(body.encode())
    channel = settings.NOTIFY_CHANNEL
    if name in ("SEND", "SEND_UNCOUNTED"):
        return send_params(QUEUE, [body], size=size, channel=channel, notify=True, options={})
    return send_one_params(QUEUE, body, size=size, channel=channel, notify=True)


def _ack_params(name: str, receipt: tuple[int, int]) -> dict[str, Any]:
    """What the manager passes the named delete statement for one receipt."""
    if name in ("DELETE", "DELETE_UNCOUNTED"):
        return delete_params(QUEUE, [receipt], result=None)
    return delete_one_params(QUEUE, receipt, result=None)


def _leased(n: int) -> list[tuple[int, int]]:
    """Send ``n`` messages and lease them all: their receipts (msg_id, read_ct)."""
    pgq.send_batch(QUEUE, [BODY] * n)
    return [(m.msg_id, m.read_ct) for m in pgq.read(QUEUE, qty=n)]


def _block(conn: psycopg.Connection[Any], case: Case, name: str, n: int) -> Callable[[int], float]:
    """A block of ``n`` operations by the named statement: microseconds per operation."""
    statement = _statement(case, name)

    def one(params: dict[str, Any]) -> None:
        if conn.execute(statement, params).fetchone() is None:
            raise RuntimeError(f"{name} did not act on {QUEUE}")

    def timed(_round: int) -> float:
        if case.acks:
            batches = [_ack_params(name, r) for r in _leased(n)]
        else:
            batches = [_send_params(name)] * n
        start = common.clock()
        for params in batches:
            if case.in_transaction:
                with conn.transaction():
                    one(params)
            else:
                one(params)
        return (common.clock() - start) / n * 1e6

    return timed


def _run_case(case: Case, n: int, rounds: int, no_flush: bool) -> list[list[Any]]:
    """A table row per statement: µs per operation (median of rounds), its saving over the
    general statement and over the one before it."""
    if any(q.name == QUEUE for q in pgq.list_queues()):
        pgq.drop_queue(QUEUE)
    pgq.create_queue(QUEUE, max_length=case.max_length, archive_on_ack=case.archive_on_ack)
    conn = common.connect()
    try:
        if no_flush:
            conn.execute("SET synchronous_commit = off")
        blocks = {name: _block(conn, case, name, n) for name in case.statements}
        for block in blocks.values():  # warm up: psycopg prepares after its fifth run
            block(0)
        values = common.interleave(
            rounds, blocks, before_each=lambda _name, _round: pgq.purge_queue(QUEUE)
        )
    finally:
        conn.close()
        pgq.drop_queue(QUEUE)
    general = case.statements[0]
    rows: list[list[Any]] = [[case.name, general, common.median(values[general]), None, None]]
    for before, name in zip(case.statements, case.statements[1:], strict=False):
        # What ``name`` saves over the general statement and over the one before it: the
        # median of per-round ratios, minus one.
        over_general, over_before = ratio(values, general, name), ratio(values, before, name)
        assert over_general is not None and over_before is not None
        rows.append(
            [case.name, name, common.median(values[name]), over_general - 1, over_before - 1]
        )
    return rows


def _percent(saving: float | None) -> str:
    return "-" if saving is None else f"{saving:+.1%}"


def main(argv: Sequence[str] | None = None) -> int:
    args = common.arguments(
        __doc__ or "",
        argv,
        extra=lambda p: p.add_argument(
            "--no-flush", action="store_true", help="synchronous_commit off for the session"
        ),
    )
    common.setup()
    rounds = args.rounds or (3 if args.quick else 15)
    n = 20 if args.quick else 300
    rows: list[list[Any]] = []
    for case in CASES:
        print(f"  {case.name}: {rounds} rounds of {n} per statement …", file=sys.stderr)
        rows.extend(_run_case(case, n, rounds, args.no_flush))
    flush = "synchronous_commit off" if args.no_flush else "durable commits"
    common.print_table(
        f"Statement variants, µs per operation (median of rounds, {flush})",
        ["case", "statement", "µs per op", "saves over the general", "over the one above"],
        [
            [case, name, common.fmt(micros, 1), _percent(general), _percent(above)]
            for case, name, micros, general, above in rows
        ],
    )
    keys = ("case", "statement", "micros", "saves_over_general", "saves_over_previous")
    path = common.write_results(
        "statement_variants",
        {
            "rounds": rounds,
            "n": n,
            "no_flush": args.no_flush,
            "rows": [dict(zip(keys, row, strict=True)) for row in rows],
        },
    )
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
