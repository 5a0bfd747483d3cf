"""What each REST shortcut of pgq_django.seams is worth, measured inside one process.

``pgq_django.asgi``'s application is called with ASGI messages (no socket, no HTTP client,
so only the server's own work is timed) for a send of one message and a send of a batch of
100, as a granted staff user with a DRF token. ``PGQ["FAST_PATHS"]`` takes turns round by
round — all shortcuts, all but ``asgi_one_hop``, all but ``present_fields``, none — so a
neighbour's burst on a shared machine hits each alike. Prints the median wall and CPU time
per request and each one's CPU against all shortcuts. Run: ``python -m bench.rest_paths``
(``--quick`` for a smoke run).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from typing import Any

from . import common

REST_SHORTCUTS = ("asgi_one_hop", "present_fields")
BODY = {"order": 12345, "items": ["a", "b", "c"], "note": "x" * 64}


def _configs() -> dict[str, Any]:
    from pgq_django import seams

    configs: dict[str, Any] = {"all shortcuts": True}
    for name in REST_SHORTCUTS:
        configs[f"all but {name}"] = [s for s in seams.SHORTCUTS if s != name]
    configs["none"] = False
    return configs


def _caller(app: Any, path: str, token: str) -> Any:
    async def call(body: bytes) -> None:
        scope = {
            "type": "http",
            "method": "POST",
            "path": path,
            "root_path": "",
            "query_string": b"",
            "scheme": "http",
            "http_version": "1.1",
            "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 8000),
            "headers": [
                (b"host", b"127.0.0.1"),
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"authorization", f"Token {token}".encode()),
            ],
        }
        pending = [{"type": "http.request", "body": body, "more_body": False}]
        answered = asyncio.Event()
        statuses: list[int] = []

        async def receive() -> dict[str, Any]:
            if pending:
                return pending.pop()
            await answered.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                statuses.append(message["status"])

        await app(scope, receive, send)
        answered.set()
        assert statuses == [201], statuses

    return call


def main(argv: Sequence[str] | None = None) -> int:
    args = common.arguments(__doc__.split("\n\n")[0], argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.rest_settings")
    common.setup()
    from django.contrib.auth import get_user_model
    from django.test import override_settings
    from rest_framework.authtoken.models import Token

    import pgq_django as pgq
    from pgq_django.asgi import get_asgi_application

    rounds = args.rounds or (3 if args.quick else 9)
    single_n, batch_n = (10, 2) if args.quick else (60, 6)
    user, _ = get_user_model().objects.update_or_create(
        username="bench_rest", defaults={"is_staff": True, "is_superuser": False}
    )
    token, _ = Token.objects.get_or_create(user=user)
    queue = "bench_paths_" + uuid.uuid4().hex[:8]
    pgq.create_queue(queue)
    pgq.grant_queue_access(queue, user, read=True, write=True)
    common.close_django_connections()
    call = _caller(get_asgi_application(), f"/v1/queues/{queue}/messages", token.key)
    cases = {
        "send": (json.dumps({"body": BODY}).encode(), single_n),
        "send batch 100": (json.dumps({"messages": [{"body": BODY}] * 100}).encode(), batch_n),
    }
    configs = _configs()
    times: dict[tuple[str, str], list[tuple[float, float]]] = {
        (case, config): [] for case in cases for config in configs
    }

    async def run() -> None:
        for _ in range(20):  # the server's imports, connections and prepared statements
            await call(cases["send"][0])
        for _ in range(rounds):
            for config, fast_paths in configs.items():
                with override_settings(PGQ={"FAST_PATHS": fast_paths}):
                    for case, (body, n) in cases.items():
                        wall, cpu = time.perf_counter(), time.process_time()
                        for _ in range(n):
                            await call(body)
                        times[(case, config)].append(
                            ((time.perf_counter() - wall) / n, (time.process_time() - cpu) / n)
                        )
            await asyncio.to_thread(pgq.purge_queue, queue)

    try:
        asyncio.run(run())
    finally:
        pgq.drop_queue(queue)
    rows = []
    for case in cases:
        base = statistics.median(cpu for _w, cpu in times[(case, "all shortcuts")])
        for config in configs:
            wall = statistics.median(w for w, _c in times[(case, config)])
            cpu = statistics.median(c for _w, c in times[(case, config)])
            rows.append(
                [case, config, f"{wall * 1000:.2f}", f"{cpu * 1000:.2f}", f"{cpu / base:.2f}x"]
            )
    common.print_table(
        f"REST shortcuts (median per request over {rounds} rounds; cpu = the process's)",
        ["case", "FAST_PATHS", "wall ms", "cpu ms", "cpu / all"],
        rows,
    )
    path = common.write_results("rest-paths", {"rows": rows, "quick": args.quick})
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
