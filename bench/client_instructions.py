"""The client's instructions per operation, counted by valgrind: pgq_django's Python work
on a single send and on a single read+delete, with its defaults and with shortcuts off.

Timings on a shared machine move by ±10 % from run to run, which hides a change of a few
percent in what the client does. Instructions do not move: ``valgrind --tool=callgrind``
counts the same total for the same code and inputs whatever else the machine runs. Each
variant runs twice in a child process under callgrind, once with ``--small`` and once with
``--large`` operations after the same warm-up, and the difference of the two main-thread
totals divided by the difference of the counts is the cost of one operation (start-up,
imports and the warm-up cancel out; the background threads are counted apart and left out).
The server's work is not counted: see ``bench.core_cpu`` for it.

Needs valgrind (Debian: ``apt-get install valgrind``). Run: ``python -m bench.client_instructions``
(``--quick`` for smaller counts).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from django.test import override_settings

import pgq_django as pgq
from pgq_django import seams

from . import common

BODY = {"event": "order.created", "order_id": 12345, "items": ["a", "b", "c"], "note": "x" * 64}

#: (label, PGQ["FAST_PATHS"]) of each variant measured.
VARIANTS: tuple[tuple[str, Any], ...] = (
    ("defaults", True),
    ("without libpq_statement", "all-but:libpq_statement"),
    ("without unwrapped_cursor", "all-but:unwrapped_cursor"),
    ("FAST_PATHS off", False),
)
CASES = ("send", "read+delete")


def _child(case: str, count: int, fast_paths: Any) -> None:
    """Run in the measured process: 20 operations to warm up, then ``count`` more."""
    common.setup()
    if isinstance(fast_paths, str):
        skipped = fast_paths.split(":", 1)[1]
        fast_paths = [name for name in seams.SHORTCUTS if name != skipped]
    override_settings(PGQ={"FAST_PATHS": fast_paths}).enable()
    queue = "bench_instructions"
    if not any(q.name == queue for q in pgq.list_queues()):
        pgq.create_queue(queue)
    pgq.purge_queue(queue)
    if case == "send":
        for _ in range(20):
            pgq.send(queue, BODY)
        for _ in range(count):
            pgq.send(queue, BODY)
    else:
        pgq.send_batch(queue, [BODY] * (count + 20))
        for _ in range(count + 20):
            [message] = pgq.read(queue, qty=1)
            pgq.delete(queue, message.receipt)
    pgq.purge_queue(queue)


def _main_thread_total(out: Path) -> int:
    """The instructions callgrind counted on the main thread (its first dump file)."""
    first = sorted(out.parent.glob(out.name + "*-01"))[0]
    for line in first.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {first}")


def _count(case: str, count: int, fast_paths: Any, workdir: Path) -> int:
    out = workdir / f"cg.{case.replace('+', '_')}.{count}.{abs(hash(json.dumps(fast_paths)))}"
    command = [
        "valgrind",
        "--tool=callgrind",
        "--separate-threads=yes",
        f"--callgrind-out-file={out}",
        sys.executable,
        "-m",
        "bench.client_instructions",
        "--child",
        json.dumps([case, count, fast_paths]),
    ]
    subprocess.run(
        command, cwd=common.ROOT, check=True, capture_output=True, env={**os.environ}, timeout=3600
    )
    return _main_thread_total(out)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        case, count, fast_paths = json.loads(argv[1])
        _child(case, count, fast_paths)
        return
    args = common.arguments(__doc__ or "", argv)
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    common.setup()
    small, large = (20, 120) if args.quick else (100, 600)
    rows = []
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, fast_paths in VARIANTS:
            row: list[Any] = [label]
            for case in CASES:
                print(f"{label}: {case} …", file=sys.stderr, flush=True)
                low = _count(case, small, fast_paths, Path(tmp))
                high = _count(case, large, fast_paths, Path(tmp))
                per_op = (high - low) / (large - small)
                results.setdefault(label, {})[case] = per_op
                row.append(f"{per_op / 1000:,.0f}k")
            rows.append(row)
    common.print_table("Client instructions per operation (main thread)", ["variant", *CASES], rows)
    common.write_results("client_instructions", {"small": small, "large": large, **results})


if __name__ == "__main__":
    main()
