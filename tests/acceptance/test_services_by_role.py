"""Services by role: workers run the store's services, web processes do their work inline.

A web server (here a real uvicorn process serving the test settings) that sends and acks
starts no ``pgq-*`` thread unless it opts in with ``PGQ["BACKGROUND_SERVICES"]``, and its
counters are still exact. The LISTEN hub is the one service a web process starts, and only
when a client waits: a long poll asks to be woken by a send, and is, within milliseconds. A
worker runs the services while it runs, and leaves its process as it found it.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
import requests
from django.db.models import Sum

import pgq_django as pgq
from pgq_django import services
from pgq_django.models import QueueCounter
from pgq_django.store import notify, tallies, wakeups
from pgq_django.worker import registry
from pgq_django.worker.loop import Worker
from tests.conftest import wait_until
from tests.http_server import Api, start_uvicorn, stop

pytestmark = pytest.mark.django_db(transaction=True)


def _stored(queue: str, kind: str) -> int:
    total = QueueCounter.objects.filter(queue__name=queue, kind=kind).aggregate(n=Sum("n"))["n"]
    return int(total or 0)


# The store's services (the ASGI set-up's own pool threads are pgq-asgi-*, the server's).
SERVICE_THREADS = {
    tallies.CounterFlusher.thread_name,
    wakeups.WakeupFlusher.thread_name,
    notify.Hub.thread_name,
}


def _pgq_threads(api: requests.Session) -> list[str]:
    names = api.get("/_test/threads").json()["threads"]
    return [name for name in names if name in SERVICE_THREADS]


def _traffic(api: requests.Session, queue: str) -> None:
    """What a web process does: sends (one and a batch), a long poll woken by a send, acks."""
    assert api.post("/v1/queues", json={"id": queue}).status_code == 201
    polled: list[Any] = []

    def long_poll() -> None:
        polled.append(api.get(f"/v1/queues/{queue}/messages?wait_seconds=20&limit=1"))

    poller = threading.Thread(target=long_poll)
    poller.start()
    wait_until(
        lambda: api.get(f"/_test/waiters?queue={queue}").json()["waiters"] == 1,
        what="the long poll to wait",
    )
    assert api.post(f"/v1/queues/{queue}/messages", json={"body": "first"}).status_code == 201
    poller.join(60)
    assert polled and polled[0].status_code == 200, polled
    woken = polled[0].json()["data"]
    assert [m["body"] for m in woken] == ["first"]  # woken by the send, before its deadline
    batch = {"messages": [{"body": "b1"}, {"body": "b2"}]}
    assert api.post(f"/v1/queues/{queue}/messages", json=batch).status_code == 201
    leased = api.get(f"/v1/queues/{queue}/messages?limit=10").json()["data"]
    assert sorted(m["body"] for m in leased) == ["b1", "b2"]
    for message in [*woken, *leased]:
        acked = api.put(f"/v1/queues/{queue}/messages/{message['id']}/ack")
        assert acked.status_code in (200, 204), acked.text


def test_a_web_process_starts_no_thread_to_send_or_ack_and_only_the_hub_for_a_wait(
    admin_api, queue_name
):
    proc, base, sock = start_uvicorn()  # its own server: the session's has served waits
    try:
        api = Api(base)
        api.auth = admin_api.auth
        assert _pgq_threads(api) == []
        plain = queue_name + "_plain"
        assert api.post("/v1/queues", json={"id": plain}).status_code == 201
        assert api.post(f"/v1/queues/{plain}/messages", json={"body": 1}).status_code == 201
        [leased] = api.get(f"/v1/queues/{plain}/messages?limit=1").json()["data"]
        assert api.put(f"/v1/queues/{plain}/messages/{leased['id']}/ack").status_code in (200, 204)
        assert _pgq_threads(api) == []
        _traffic(api, queue_name)
        assert _pgq_threads(api) == [notify.Hub.thread_name]
        # Counted inline: the rows are there as soon as the requests have answered.
        assert (_stored(queue_name, "sent"), _stored(queue_name, "acked")) == (3, 3)
        metrics = api.get("/metrics").text
        assert f'pgq_messages_sent_total{{queue="{queue_name}"}} 3.0' in metrics
        api.close()
    finally:
        stop(proc, sock)


def test_a_web_process_that_opts_in_runs_the_services(admin_api, queue_name):
    opted_in = json.dumps({"BACKGROUND_SERVICES": True})
    proc, base, sock = start_uvicorn(PGQ_TEST_PGQ=opted_in)
    try:
        api = Api(base)
        api.auth = admin_api.auth
        assert _pgq_threads(api) == []  # on demand: nothing has left them work yet
        _traffic(api, queue_name)
        threads = _pgq_threads(api)
        assert "pgq-notify" in threads and "pgq-tallies" in threads, threads
        # Summed and written by pgq-tallies within its interval.
        wait_until(
            lambda: (_stored(queue_name, "sent"), _stored(queue_name, "acked")) == (3, 3),
            what="the flusher to write the counts",
        )
        api.close()
    finally:
        stop(proc, sock)


def test_sends_and_acks_of_this_web_process_count_in_their_own_statements(queue_name):
    pgq.create_queue(queue_name)
    before = {where: dict(sums) for where, sums in tallies.flusher.pending.items()}
    ids = pgq.send_batch(queue_name, [1, 2])
    pgq.send(queue_name, 3)
    assert pgq.delete(queue_name, ids) == ids
    assert (_stored(queue_name, "sent"), _stored(queue_name, "acked")) == (3, 2)
    assert tallies.flusher.pending == before  # nothing left for a thread to write
    found = pgq.read_with_poll(queue_name, max_poll_seconds=5, poll_interval_ms=50)
    assert [m.message for m in found] == [3]


def test_a_worker_runs_the_services_while_it_runs_and_no_longer(queue_name):
    queue = pgq.create_queue(queue_name)
    assert not services.services_run()
    seen: list[bool] = []

    def handle(message: Any) -> None:
        seen.append(services.services_run())

    pgq.send(queue, {"n": 1})
    handlers = {queue.name: registry.Handler(queue.name, handle, batch=1)}
    assert Worker(handlers=handlers, once=True, lead=False, listen=False).run() == 0
    assert seen == [True]  # its ack was counted by the process's flusher
    assert not services.services_run()  # the worker left the process as it found it
    tallies.flush()
    assert _stored(queue_name, "acked") == 1
