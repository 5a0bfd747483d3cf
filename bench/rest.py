"""The REST API against the Python API it translates, in one run on one database.

Cases (a live uvicorn process serving ``pgq_django.asgi``, a keep-alive ``requests``
session with DRF token authentication as a staff user who holds a grant on the queue — what
a real client is: not a superuser, and not HTTP basic, which runs the password hasher on
every request — both on 127.0.0.1). REST and the Python API take turns round by round, so
a neighbour's burst on this shared machine hits both:

- ``send``: one message per call — ``POST /v1/queues/q/messages`` vs ``pgq.send``; once
  with requests and once with http.client, which costs the client far less CPU;
- ``send batch 100``: ``POST {"messages": [...100]}`` vs ``pgq.send_batch``;
- ``consume+ack 100``: ``GET …/messages?limit=100`` then ``PUT …/messages/ack`` with the
  receipts vs ``pgq.read(qty=100)`` then ``pgq.delete(ids)``;
- ``metrics scrape``: ``GET /metrics`` with 1,000 queues vs ``pgq.metrics_all()``;
- long-polls: 500 concurrent ``wait_seconds`` consumers on the one server process, first
  each on a queue of its own, then all on one queue (where a send used to wake all 500) —
  the server's resident memory, and the delay from each send to the woken consumer's answer.

Goals (printed, never asserted): batch paths within 3x of the Python API, p50 of a single
send under 5 ms. Run: ``python -m bench.rest`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

import asyncio
import http.client as http_client
import json
import os
import sys
import time
import uuid
from collections.abc import Sequence
from typing import Any

from . import common

WAITERS = 500


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _timed_each(n: int, call: Any) -> list[float]:
    out = []
    for _ in range(n):
        started = time.perf_counter()
        call()
        out.append(time.perf_counter() - started)
    return out


def _throughput_cases(http: Any, user: Any, rounds: int, n_single: int) -> list[list[Any]]:
    import pgq_django as pgq

    queue = "bench_rest_" + uuid.uuid4().hex[:8]
    pgq.create_queue(queue)
    pgq.grant_queue_access(queue, user, read=True, write=True)
    url = f"/v1/queues/{queue}/messages"
    body = {"order": 12345, "items": ["a", "b", "c"], "note": "x" * 64}
    rows = []

    def check(response: Any, status: int) -> Any:
        assert response.status_code == status, response.text
        return response

    # Warm both paths (connections, prepared statements, the server's imports).
    for _ in range(20):
        check(http.post(url, json={"body": body}), 201)
        pgq.send(queue, body)
    pgq.purge_queue(queue)

    # The same request through http.client: what the server costs without requests' own
    # per-call overhead (about a millisecond of the client's CPU on this machine).
    raw = http_client.HTTPConnection(*http.base_address)
    raw_headers = {
        "Authorization": http.headers["Authorization"],
        "Content-Type": "application/json",
    }
    raw_body = json.dumps({"body": body})

    def raw_send() -> None:
        raw.request("POST", url, raw_body, raw_headers)
        response = raw.getresponse()
        assert response.status == 201, response.read()
        response.read()

    per_round = max(1, n_single // rounds)
    single = common.interleave(
        rounds,
        {
            "rest": lambda _: _timed_each(
                per_round, lambda: check(http.post(url, json={"body": body}), 201)
            ),
            "raw": lambda _: _timed_each(per_round, raw_send),
            "python": lambda _: _timed_each(per_round, lambda: pgq.send(queue, body)),
        },
    )
    raw.close()
    py_single = _flat(single["python"])
    rows.append(_row("send (p50 per call)", _flat(single["rest"]), py_single))
    rows.append(_row("send (p50, http.client)", _flat(single["raw"]), py_single))
    pgq.purge_queue(queue)

    batch = {"messages": [{"body": body} for _ in range(100)]}
    sent = common.interleave(
        rounds,
        {
            "rest": lambda _: common.timed(lambda: check(http.post(url, json=batch), 201)),
            "python": lambda _: common.timed(lambda: pgq.send_batch(queue, [body] * 100)),
        },
    )
    rows.append(_row("send batch 100", sent["rest"], sent["python"]))
    pgq.purge_queue(queue)

    def rest_consume() -> None:
        got = check(http.get(url + "?limit=100"), 200).json()["data"]
        receipts = [m["receipt"] for m in got]
        acked = check(http.put(url + "/ack", json={"ids": receipts}), 200).json()["acked"]
        assert len(acked) == 100

    def py_consume() -> None:
        got = pgq.read(queue, qty=100)
        assert len(pgq.delete(queue, [m.receipt for m in got])) == 100

    consumed = common.interleave(
        rounds,
        {
            "rest": lambda _: common.timed(rest_consume),
            "python": lambda _: common.timed(py_consume),
        },
        before_each=lambda _name, _round: pgq.send_batch(queue, [body] * 100),
    )
    rows.append(_row("consume+ack 100", consumed["rest"], consumed["python"]))
    pgq.drop_queue(queue)
    return rows


def _flat(values: list[Any]) -> list[float]:
    return [x for group in values for x in group]


def _row(case: str, rest: list[float], py: list[float]) -> list[Any]:
    r, p = common.median(rest) * 1000, common.median(py) * 1000
    return [case, f"{r:.2f}", f"{p:.2f}", f"{r / p:.2f}x"]


def _metrics_case(http: Any, n_queues: int, rounds: int) -> list[Any]:
    import pgq_django as pgq

    prefix = "bench_m_" + uuid.uuid4().hex[:6]
    names = [f"{prefix}_{i}" for i in range(n_queues)]
    for name in names:
        pgq.create_queue(name)
    for name in names[:: max(1, n_queues // 50)]:
        pgq.send_batch(name, list(range(10)))
    http.get("/metrics").raise_for_status()
    scrape = common.interleave(
        rounds,
        {
            "rest": lambda _: common.timed(lambda: http.get("/metrics").raise_for_status()),
            "python": lambda _: common.timed(pgq.metrics_all),
        },
    )
    rest, py = scrape["rest"], scrape["python"]
    size = len(http.get("/metrics").content)
    for name in names:
        pgq.drop_queue(name)
    row = _row(f"metrics scrape, {n_queues} queues", rest, py)
    return [*row[:3], f"{row[3]} ({size // 1024} KiB of text)"]


def _cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process so far."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _long_polls(
    base: str, token: str, user: Any, pid: int, waiters: int, herd_sends: int
) -> dict[str, Any]:
    import aiohttp
    from asgiref.sync import sync_to_async

    import pgq_django as pgq

    tag = uuid.uuid4().hex[:6]
    queues = [f"bench_lp_{tag}_{i}" for i in range(waiters)]
    shared = f"bench_lp_{tag}_shared"

    def create() -> None:
        for q in [*queues, shared]:
            pgq.create_queue(q)
            pgq.grant_queue_access(q, user, read=True, write=False)

    await sync_to_async(create)()
    headers = {"Authorization": f"Token {token}"}
    rss_before = _rss_kib(pid)
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=300)
    answered: dict[Any, float] = {}
    send = sync_to_async(pgq.send)
    async with aiohttp.ClientSession(connector=connector, headers=headers, timeout=timeout) as s:

        async def poll(key: Any, queue: str) -> None:
            # A consumer polls again when its wait ends empty, as a real one would.
            url = f"{base}/v1/queues/{queue}/messages?limit=1&wait_seconds=20"
            while True:
                async with s.get(url) as response:
                    assert response.status == 200, await response.text()
                    data = (await response.json())["data"]
                if data:
                    assert len(data) == 1, data
                    answered[key] = time.perf_counter()
                    return

        async def answers(n: int) -> None:
            deadline = time.monotonic() + 300
            while len(answered) < n:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{n - len(answered)} long-polls were never answered")
                await asyncio.sleep(0.0005)

        async def settle() -> None:
            # Let every request reach its wait (bench only; a test would poll a condition).
            await asyncio.sleep(3.0)

        # Each waiter on a queue of its own: a send wakes exactly one.
        tasks = [asyncio.create_task(poll(q, q)) for q in queues]
        await settle()
        rss_waiting = _rss_kib(pid)
        own = []
        for queue in queues:
            started = time.perf_counter()
            await send(queue, "wake")
            await answers(len(own) + 1)
            own.append(answered[queue] - started)
        await asyncio.gather(*tasks)

        # Every waiter on one queue: sends one at a time, then one batch for the rest.
        answered.clear()
        tasks = [asyncio.create_task(poll(i, shared)) for i in range(waiters)]
        await settle()
        herd = []
        cpu_before = _cpu_seconds(pid)
        for n in range(1, herd_sends + 1):
            started = time.perf_counter()
            await send(shared, "wake")
            await answers(n)
            herd.append(max(answered.values()) - started)
        cpu_per_send = (_cpu_seconds(pid) - cpu_before) / herd_sends
        rest = waiters - herd_sends
        started = time.perf_counter()
        await sync_to_async(pgq.send_batch)(shared, ["wake"] * rest)
        await asyncio.gather(*tasks)
        batch_all = max(answered.values()) - started
    rss_after = _rss_kib(pid)
    await sync_to_async(lambda: [pgq.drop_queue(q) for q in [*queues, shared]])()

    def spread(values: list[float]) -> dict[str, float]:
        return {
            "p50": common.percentile(values, 50) * 1000,
            "p99": common.percentile(values, 99) * 1000,
            "max": max(values) * 1000,
        }

    return {
        "waiters": waiters,
        "rss_kib": {"before": rss_before, "waiting": rss_waiting, "after": rss_after},
        "wake_ms": spread(own),
        "one_queue": {
            "sends": herd_sends,
            "wake_ms": spread(herd),
            "server_cpu_ms_per_send": cpu_per_send * 1000,
            "batch": rest,
            "batch_all_answered_ms": batch_all * 1000,
        },
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = common.arguments(__doc__.split("\n\n")[0], argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.rest_settings")
    common.setup()
    import requests
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    from pgq_django.testing import start_asgi_server

    rounds = args.rounds or (3 if args.quick else 15)
    user, _ = get_user_model().objects.update_or_create(
        username="bench_rest", defaults={"is_staff": True, "is_superuser": False}
    )
    token, _ = Token.objects.get_or_create(user=user)
    common.close_django_connections()
    env = {**os.environ, "PYTHONPATH": str(common.ROOT)}
    # Idle keep-alive connections are kept while the other contender takes its turn.
    server = start_asgi_server(
        "pgq_django.asgi:get_asgi_application",
        factory=True,
        env=env,
        cwd=common.ROOT,
        ready_path="/v1/queues",
        options=["--timeout-keep-alive", "300"],
    )
    base = server.url
    try:
        http = requests.Session()
        http.headers["Authorization"] = f"Token {token.key}"
        original = http.request
        http.request = lambda method, url, *a, **k: original(method, base + url, *a, **k)  # type: ignore[method-assign]
        http.base_address = server.listener.getsockname()  # type: ignore[attr-defined]
        rows = _throughput_cases(http, user, rounds, 30 if args.quick else 600)
        rows.append(_metrics_case(http, 50 if args.quick else 1000, rounds))
        common.print_table(
            "REST vs the Python API (median ms per operation; ratio = REST / Python)",
            ["case", "REST ms", "Python ms", "ratio"],
            rows,
        )
        waiters = 20 if args.quick else WAITERS
        herd_sends = 5 if args.quick else 50
        polls = asyncio.run(_long_polls(base, token.key, user, server.pid, waiters, herd_sends))
        rss = polls["rss_kib"]
        wake = polls["wake_ms"]
        one = polls["one_queue"]
        print(
            f"\n{waiters} concurrent long-polls on one uvicorn process: server RSS "
            f"{rss['before'] / 1024:.1f} MiB before, {rss['waiting'] / 1024:.1f} MiB while "
            f"they wait, {rss['after'] / 1024:.1f} MiB after.\n"
            f"Each on its own queue, send → woken answer: p50 {wake['p50']:.1f} ms, "
            f"p99 {wake['p99']:.1f} ms, max {wake['max']:.1f} ms.\n"
            f"All on one queue, {one['sends']} sends one at a time: p50 "
            f"{one['wake_ms']['p50']:.1f} ms, p99 {one['wake_ms']['p99']:.1f} ms, max "
            f"{one['wake_ms']['max']:.1f} ms, server CPU {one['server_cpu_ms_per_send']:.1f} "
            f"ms per send; then one batch of {one['batch']}: all answered in "
            f"{one['batch_all_answered_ms']:.0f} ms."
        )
        path = common.write_results(
            "rest", {"rows": rows, "long_polls": polls, "quick": args.quick}
        )
        print(f"\nresults: {path}")
    finally:
        server.stop(timeout=15)
    return 0


if __name__ == "__main__":
    sys.exit(main())
