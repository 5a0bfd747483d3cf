"""A bare consumer process for the concurrency tests: lease, record, delete, until empty.

Prints one line per message it deleted: ``<msg_id> <read_ct>``.
"""

from __future__ import annotations

import sys

import django


def main(queue: str, batch: int) -> None:
    django.setup()
    import pgq_django as pgq

    empty_reads = 0
    out = []
    while empty_reads < 3:
        messages = pgq.read(queue, qty=batch, vt=120)
        if not messages:
            empty_reads += 1
            continue
        empty_reads = 0
        deleted = set(pgq.delete(queue, [m.receipt for m in messages]))
        out.extend(f"{m.msg_id} {m.read_ct}" for m in messages if m.msg_id in deleted)
    print("\n".join(out))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
