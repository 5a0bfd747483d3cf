"""Five hundred concurrent long-polls on one uvicorn process, woken by one send.

Each waiter is a coroutine registered with the process's one LISTEN connection; the server
runs its synchronous work on a fixed pool of threads (pgq_django.asgi), so no thread or
database connection is held per waiting client. Latency and memory are measured by
bench/rest.py; this test asserts correctness: every waiter gets exactly one message and no
message is delivered twice.
"""

from __future__ import annotations

import asyncio
import time

import pytest
import requests

import pgq_django as pgq
from tests.conftest import wait_until

WAITERS = 500


@pytest.mark.slow
def test_five_hundred_long_polls_are_all_woken_and_each_message_is_delivered_once(
    admin_api, live_url
):
    import aiohttp

    assert admin_api.post("/v1/queues", json={"id": "q_longpoll"}).status_code == 201
    headers = {"Authorization": aiohttp.encode_basic_auth(*admin_api.auth)}

    def send_all() -> list[int]:
        from django.db import connections

        try:
            return pgq.send_batch("q_longpoll", list(range(WAITERS)))
        finally:
            connections.close_all()

    async def scenario() -> tuple[list[list[dict]], list[int]]:
        connector = aiohttp.TCPConnector(limit=0)
        timeout = aiohttp.ClientTimeout(total=120)
        async with aiohttp.ClientSession(
            connector=connector, headers=headers, timeout=timeout
        ) as http:

            async def long_poll() -> list[dict]:
                url = f"{live_url}/v1/queues/q_longpoll/messages?limit=1&wait_seconds=20"
                async with http.get(url) as response:
                    assert response.status == 200, await response.text()
                    return (await response.json())["data"]

            polls = [asyncio.create_task(long_poll()) for _ in range(WAITERS)]
            deadline = time.monotonic() + 60
            while True:
                async with http.get(f"{live_url}/_test/waiters") as response:
                    waiting = (await response.json())["waiters"]
                if waiting >= WAITERS:
                    break
                assert time.monotonic() < deadline, f"only {waiting} waiters registered"
                assert not any(p.done() for p in polls), "a poll ended before any send"
                await asyncio.sleep(0.05)
            ids = await asyncio.to_thread(send_all)
            return await asyncio.gather(*polls), ids

    results, sent = asyncio.run(scenario())
    received = [m["id"] for batch in results for m in batch]
    assert all(len(batch) == 1 for batch in results)
    assert len(received) == len(set(received)) == WAITERS
    assert set(received) == set(sent)
    assert all(m["delivery_attempts"] == 1 for batch in results for m in batch)


@pytest.mark.parametrize(
    ("method", "path", "query", "on_loop"),
    [
        ("GET", "/v1/queues/q/messages", b"limit=5&wait_seconds=3", True),
        ("GET", "/v1/queues/q/messages/", b"wait_seconds=0", True),
        ("GET", "/v1/queues/q/messages", b"limit=5", False),
        ("POST", "/v1/queues/q/messages", b"wait_seconds=3", False),
        ("PUT", "/v1/queues/q/messages/ack", b"", False),
        ("GET", "/v1/queues", b"", False),
        ("GET", "/_test/waiters", b"", False),
        ("GET", "/no/such/path", b"", False),
    ],
)
def test_only_a_consume_that_may_wait_is_served_on_the_event_loop(method, path, query, on_loop):
    """Everything else runs Django's synchronous cycle in one hop to a thread."""
    from pgq_django.asgi import resolve_scope

    scope = {"type": "http", "method": method, "path": path, "query_string": query}
    needs_loop, match = resolve_scope(scope)
    assert needs_loop is on_loop
    assert (match is None) is (path == "/no/such/path")


def test_a_long_poll_that_finds_a_message_at_once_or_never_answers_like_a_plain_consume(
    admin_api,
):
    assert admin_api.post("/v1/queues", json={"id": "q_lp_now"}).status_code == 201
    pgq.send("q_lp_now", "ready")
    got = admin_api.get("/v1/queues/q_lp_now/messages?wait_seconds=5&limit=3")
    assert got.status_code == 200
    assert [m["body"] for m in got.json()["data"]] == ["ready"]
    empty = admin_api.get("/v1/queues/q_lp_now/messages?wait_seconds=0.2&label=none")
    assert empty.status_code == 200 and empty.json() == {"data": [], "limit": 10}
    from pgq_django.store import notify

    assert notify.hub().waiters() == 0  # (this process's hub; the server's is checked below)
    assert admin_api.get("/_test/waiters").json() == {"waiters": 0}


def test_long_polls_with_a_hundred_labels_form_one_wakeup_group_and_each_gets_its_label(
    make_user, live_url
):
    """Idle waiters cost one check per poll interval whatever their labels: the server's
    hub holds one group for the queue; a send still reaches the waiter of its label, and a
    message that becomes visible without a notification is found by the group's head for
    the waiter of its label."""
    import aiohttp
    from django.db import connections
    from rest_framework.authtoken.models import Token

    from tests.conftest import time_passes

    user = make_user(is_staff=True, is_superuser=True)
    token = Token.objects.create(user=user).key
    pgq.create_queue("q_labels")

    def in_thread(call, *args, **kwargs):
        def run():
            try:
                return call(*args, **kwargs)
            finally:
                connections.close_all()

        return asyncio.to_thread(run)

    async def scenario() -> None:
        headers = {"Authorization": f"Token {token}"}
        async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=120),
        ) as http:

            async def long_poll(label: str) -> list[dict]:
                url = f"{live_url}/v1/queues/q_labels/messages?wait_seconds=20&label={label}"
                async with http.get(url) as response:
                    assert response.status == 200, await response.text()
                    return (await response.json())["data"]

            async def hub() -> dict:
                async with http.get(f"{live_url}/_test/wakeup_groups") as response:
                    return await response.json()

            polls = {n: asyncio.create_task(long_poll(f"l{n}")) for n in range(100)}
            deadline = time.monotonic() + 60
            while (await hub())["waiters"] < 100:
                assert time.monotonic() < deadline, "the long-polls never all waited"
                await asyncio.sleep(0.05)
            assert (await hub())["groups"] == 1

            await in_thread(pgq.send, "q_labels", "for 42", label="l42")
            got = await asyncio.wait_for(polls.pop(42), 15)
            assert [(m["body"], m["label"]) for m in got] == [("for 42", "l42")]

            # Delayed: no notification when it becomes visible; the head's check finds it.
            await in_thread(pgq.send, "q_labels", "for 7", label="l7", delay=3600)
            await in_thread(time_passes, "q_labels", 3600)
            got = await asyncio.wait_for(polls.pop(7), 15)
            assert [(m["body"], m["label"]) for m in got] == [("for 7", "l7")]
            assert not any(p.done() for p in polls.values())
            for poll in polls.values():
                poll.cancel()
            await asyncio.gather(*polls.values(), return_exceptions=True)

    asyncio.run(scenario())
    wait_until(
        lambda: (
            requests.get(f"{live_url}/_test/wakeup_groups", timeout=10).json()
            == {"groups": 0, "waiters": 0}
        ),
        what="the server to drop the cancelled long-polls",
    )
