"""``python -m bench``: run every benchmark module that is present, one after the other.

Modules are found by name and skipped when absent, so a checkout with only some of them
still runs; each exposes ``main(argv) -> int`` and takes the common options (``--quick``,
``--rounds``).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

MODULES = (
    "bench.core",
    "bench.core_cpu",
    "bench.idempotency",
    "bench.otel",
    "bench.statement_variants",
    "bench.limits",
    "bench.workers",
    "bench.exchanges",
    "bench.rest",
    "bench.sqs",
    "bench.sqs_peers",
    "bench.spark",
)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    status = 0
    for name in MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            print(f"({name} is not present; skipped)")
            continue
        print(f"\n=== {name} ===", flush=True)
        status = max(status, int(module.main(args) or 0))
    return status


if __name__ == "__main__":
    sys.exit(main())
