"""HTTP basic cannot be turned into a denial of service: passwords hash on threads of their
own, a full password queue answers 429, and a flood of wrong passwords leaves the threads
that serve other requests free.

A real uvicorn server (pgq_django.asgi) with the gated hasher of tests/password_gate.py:
each hash reports its thread and waits while the test holds the gate, so "the password
thread is busy" is a fact the test has seen, not a duration it hoped for. The server has
one password thread with room for ``QUEUE`` waiting checks and ``ASGI_THREADS`` request
threads, fewer than the checks a flood can keep in flight, so a hash on a request thread
would leave no thread for anyone else.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

import pytest
import requests
from rest_framework.authtoken.models import Token

import pgq_django as pgq
from pgq_django.testing import start_asgi_server
from tests.conftest import ROOT, subprocess_env, wait_until
from tests.http_server import PASSWORD, server_app_name, wait_for_server_connections_to_close
from tests.password_gate import GATE_ENV, PASSWORD_THREAD_PREFIX, HashGate

QUEUE = 5  # PGQ["REST_PASSWORD_QUEUE"] of the server: checks that may wait for the thread
ASGI_THREADS = 4  # fewer than the 1 + QUEUE checks in flight during a flood
SERVER_PGQ = {
    "REST_PASSWORD_THREADS": 1,
    "REST_PASSWORD_QUEUE": QUEUE,
    "ASGI_THREADS": ASGI_THREADS,
    # The failure throttle is tested elsewhere; here it must not answer before the queue.
    "REST_AUTH_FAILURES_PER_USERNAME": 1000,
    "REST_AUTH_FAILURES_PER_ADDRESS": 1000,
}


@pytest.fixture(scope="module")
def module_gate() -> Iterator[HashGate]:
    gate = HashGate()
    yield gate
    gate.close()


@pytest.fixture(scope="module")
def server(module_gate: HashGate, django_db_setup: Any, django_db_blocker: Any) -> Iterator[str]:
    app_name = server_app_name()
    env = subprocess_env(
        PGAPPNAME=app_name,
        PGQ_TEST_PGQ=json.dumps(SERVER_PGQ),
        **{GATE_ENV: module_gate.path},
    )
    env["DJANGO_SETTINGS_MODULE"] = "tests.password_gate_settings"
    live = start_asgi_server("tests.asgi:application", env=env, cwd=ROOT, ready_path="/v1/queues")
    yield live.url
    module_gate.open()
    live.stop()
    with django_db_blocker.unblock():
        wait_for_server_connections_to_close(app_name)


@pytest.fixture
def gate(module_gate: HashGate) -> Iterator[HashGate]:
    """The server's gate, open and with no hashes seen; opened again after the test, so
    requests a failed test left held finish and free their places in the password queue."""
    module_gate.reset()
    yield module_gate
    module_gate.open()


def send(url: str, auth: tuple[str, str], body: int) -> requests.Response:
    return requests.post(url, json={"body": body}, auth=auth, timeout=60)


def test_a_basic_password_is_hashed_once_on_a_password_thread(
    server: str, gate: HashGate, make_queue: Callable[..., Any], make_user: Callable[..., Any]
) -> None:
    """The hash of a basic-auth request runs on the dedicated threads, never on the thread
    that serves the request, and only once although both the early check and the view's
    authentication see the credentials."""
    queue = make_queue()
    user = make_user(is_superuser=True)
    answer = send(f"{server}/v1/queues/{queue.name}/messages", (user.get_username(), PASSWORD), 1)
    assert answer.status_code == 201, answer.text
    [hashed] = gate.hashes
    assert hashed.thread.startswith(PASSWORD_THREAD_PREFIX), hashed
    assert hashed.password == PASSWORD
    assert [m.message for m in pgq.read(queue, qty=10)] == [1]


def test_a_full_password_queue_answers_429_and_the_refused_request_changes_nothing(
    server: str, gate: HashGate, make_queue: Callable[..., Any], make_user: Callable[..., Any]
) -> None:
    """With the one password thread held and its queue filled, one request more is refused
    at once with 429 and ``Retry-After``, is never hashed and sends nothing; the same user is
    served as soon as there is room."""
    queue = make_queue()
    url = f"{server}/v1/queues/{queue.name}/messages"
    users = [make_user(is_superuser=True) for _ in range(QUEUE + 2)]
    gate.shut()
    try:
        with ThreadPoolExecutor(len(users)) as pool:
            first = pool.submit(send, url, (users[0].get_username(), PASSWORD), 0)
            gate.wait_for(1)  # the password thread is busy with the first request
            # The rest arrive together: QUEUE of them take the places in the queue, and
            # whichever comes last finds none.
            rest = {
                pool.submit(send, url, (user.get_username(), PASSWORD), n): n
                for n, user in enumerate(users[1:], 1)
            }
            done, _pending = wait(rest, timeout=60, return_when=FIRST_COMPLETED)
            assert done, "no request was answered while the password queue was full"
            [refused] = done  # nothing else can finish while the gate holds the hash
            assert not first.done()
            gate.open()
            answers = {rest[f]: f.result() for f in rest}
            assert first.result().status_code == 201, first.result().text
    finally:
        gate.open()
    refused_body = rest[refused]
    answer = answers.pop(refused_body)
    assert answer.status_code == 429, answer.text
    assert answer.json()["error"]["code"] == "throttled"
    assert int(answer.headers["Retry-After"]) >= 1
    assert {n: a.status_code for n, a in answers.items()} == dict.fromkeys(answers, 201)
    # One hash per admitted request: the refused one was never checked.
    assert len(gate.hashes) == 1 + QUEUE
    sent = Counter(m.message for m in pgq.read(queue, qty=100))
    assert sent == Counter([0, *answers])
    # The refusal is no lock-out: with room again, the same request is served.
    user = users[refused_body]
    again = send(url, (user.get_username(), PASSWORD), refused_body)
    assert again.status_code == 201, again.text


def test_a_token_request_is_served_while_wrong_passwords_hold_every_password_thread(
    server: str, gate: HashGate, make_queue: Callable[..., Any], make_user: Callable[..., Any]
) -> None:
    """A flood of wrong passwords — more checks in flight than the server has request
    threads, the password thread provably busy and its queue full — does not keep a
    token-authenticated request from its answer: it gets its 200 before any of the flood's
    checks is let go. Were passwords hashed on request threads, the held hashes would take
    every one of them and the token request would wait for the gate."""
    queue = make_queue()
    victim = make_user(is_superuser=True)
    reader = make_user(is_superuser=True)
    token = Token.objects.create(user=reader)
    url = f"{server}/v1/queues/{queue.name}/messages"
    flood_size = 1 + QUEUE + 2  # two more than the password thread and its queue take
    admitted = 1 + QUEUE
    assert admitted > ASGI_THREADS
    gate.shut()
    try:
        with ThreadPoolExecutor(flood_size) as pool:
            flood: list[Future[requests.Response]] = [
                pool.submit(send, url, (victim.get_username(), f"wrong-{n}"), n)
                for n in range(flood_size)
            ]
            gate.wait_for(1)  # the password thread is busy
            # The overflow is refused (429) without a hash; the rest wait for the thread.
            wait_until(
                lambda: sum(f.done() for f in flood) == flood_size - admitted,
                what="the flood's overflow to be refused",
            )
            answer = requests.get(
                f"{server}/v1/queues/{queue.name}",
                headers={"Authorization": f"Token {token.key}"},
                timeout=60,
            )
            # Still held: one hash started and waits, the admitted requests wait for it.
            assert len(gate.hashes) == 1
            assert sum(not f.done() for f in flood) == admitted
            gate.open()
            statuses = sorted(f.result().status_code for f in flood)
    finally:
        gate.open()
    assert answer.status_code == 200, answer.text
    assert statuses == [401] * admitted + [429] * (flood_size - admitted)
    assert len(gate.hashes) == admitted
    assert all(h.thread.startswith(PASSWORD_THREAD_PREFIX) for h in gate.hashes), gate.hashes
    assert pgq.metrics(queue).total_messages == 0
