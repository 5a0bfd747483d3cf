"""The REST server under attack and after a database restart, with real servers of its own:
refusals before the body is read, the failed-password throttle, and the first calls after
PostgreSQL ended every server connection."""

from __future__ import annotations

import base64
import json
import socket
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import psycopg
import pytest
import requests
from botocore.config import Config
from rest_framework.authtoken.models import Token

import pgq_django as pgq
from pgq_django.models import AccessKey
from pgq_django.store.notify import connection_params
from tests.conftest import needs_direct_server, wait_until
from tests.http_server import (
    PASSWORD,
    SERVER_APP_NAME,
    app_name_of,
    start_uvicorn,
    stop,
    wait_for_server_connections_to_close,
)


@pytest.fixture(scope="module")
def server(django_db_setup: Any, django_db_blocker: Any) -> Iterator[str]:
    """A server whose threads keep their connections (CONN_MAX_AGE), with a low
    failed-password limit, serving the SQS endpoint through Django's view."""
    limits = {"REST_AUTH_FAILURES_PER_USERNAME": 3, "REST_AUTH_FAILURES_PER_ADDRESS": 8}
    proc, base, sock = start_uvicorn(PGQ_TEST_CONN_MAX_AGE="600", PGQ_TEST_PGQ=json.dumps(limits))
    yield base
    stop(proc, sock)
    with django_db_blocker.unblock():
        wait_for_server_connections_to_close(app_name_of(proc))


def raw_request(base: str, head: str, body: bytes = b"") -> tuple[int, dict[str, str], bytes]:
    """Send a request's head and part of its body over a socket; read the answer.

    The answer must come while most of the declared body was never sent: proof that the
    server answered without waiting for it.
    """
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as conn:
        conn.sendall(head.encode("latin-1") + b"\r\n" + body)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
        head_bytes, _, rest = data.partition(b"\r\n\r\n")
        lines = head_bytes.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.lower(): v.strip() for k, v in (x.split(":", 1) for x in lines[1:])}
        length = int(headers.get("content-length", "0"))
        while len(rest) < length:
            chunk = conn.recv(65536)
            if not chunk:
                break
            rest += chunk
    return status, headers, rest


def head_for(path: str, *, length: int, extra: str = "") -> str:
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n{extra}"
    )


def basic(username: str, password: str) -> str:
    token = base64.b64encode(f"{username}:{password}".encode()).decode()
    return f"Authorization: Basic {token}\r\n"


def test_an_unauthenticated_huge_upload_is_answered_401_before_its_body(server, make_queue):
    queue = make_queue()
    status, headers, body = raw_request(
        server, head_for(f"/v1/queues/{queue.name}/messages", length=5 * 1024**2), b'{"body": "'
    )
    assert status == 401
    assert json.loads(body)["error"]["code"] == "not_authenticated"
    assert headers["www-authenticate"].startswith("Basic")
    assert pgq.metrics(queue).total_messages == 0


def test_a_declared_body_over_the_limit_is_answered_413_before_it_is_read(
    server, make_queue, make_user
):
    queue = make_queue()
    user = make_user(is_superuser=True)
    status, _h, body = raw_request(
        server,
        head_for(
            f"/v1/queues/{queue.name}/messages",
            length=300 * 1024**2,
            extra=basic(user.get_username(), PASSWORD),
        ),
        b'{"body": "',
    )
    assert status == 413
    assert json.loads(body)["error"]["code"] == "request_too_large"
    assert pgq.metrics(queue).total_messages == 0


def test_a_wrong_password_is_refused_before_the_body_is_read(server, make_queue, make_user):
    queue = make_queue()
    user = make_user(is_superuser=True)
    status, _h, body = raw_request(
        server,
        head_for(
            f"/v1/queues/{queue.name}/messages",
            length=4 * 1024**2,
            extra=basic(user.get_username(), "wrong"),
        ),
        b'{"body": "',
    )
    assert status == 401
    assert json.loads(body)["error"]["code"] == "authentication_failed"
    assert pgq.metrics(queue).total_messages == 0


def test_a_chunked_body_is_read_only_up_to_the_limit(server, make_queue, make_user):
    queue = make_queue()
    user = make_user(is_superuser=True)

    def chunks() -> Iterator[bytes]:
        yield b'{"body": "'
        for _ in range(64):  # 16 MiB, twice the limit, if it were all read
            yield b"x" * (256 * 1024)

    response = requests.post(
        f"{server}/v1/queues/{queue.name}/messages",
        data=chunks(),
        headers={"Content-Type": "application/json"},
        auth=(user.get_username(), PASSWORD),
        timeout=60,
    )
    assert response.status_code == 413, response.text
    assert pgq.metrics(queue).total_messages == 0


def terminate_server_connections() -> None:
    """End every connection the live servers hold, as a PostgreSQL restart would."""
    with psycopg.connect(**connection_params(), autocommit=True) as admin:
        pids = [
            row[0]
            for row in admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name LIKE %s"
                " AND datname = current_database()",
                [SERVER_APP_NAME + "-%"],
            )
        ]
        assert pids
        for pid in pids:
            admin.execute("SELECT pg_terminate_backend(%s)", [pid])

        def gone() -> bool:
            admin.execute("SELECT pg_stat_clear_snapshot()")
            row = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", [pids]
            ).fetchone()
            return row is not None and row[0] == 0

        wait_until(gone, what="the server's backends to exit")


@needs_direct_server
def test_after_the_database_ends_every_connection_the_first_calls_succeed(
    server, make_queue, make_user
):
    queue = make_queue()
    user = make_user(is_superuser=True)
    token = Token.objects.create(user=user)
    key, secret = AccessKey.objects.create_key(user)
    sqs = boto3.client(
        "sqs",
        endpoint_url=server + "/sqs/",
        region_name="eu-west-1",
        aws_access_key_id=key.key_id,
        aws_secret_access_key=secret,
        config=Config(retries={"total_max_attempts": 1}),
    )
    headers = {"Authorization": f"Token {token.key}"}
    calls = 2 * 8  # every pool thread twice (PGQ["ASGI_THREADS"] is 8)

    def every_call_works() -> None:
        for _ in range(calls):
            answer = requests.get(f"{server}/v1/queues", headers=headers, timeout=60)
            assert answer.status_code == 200, answer.text
            sqs.get_queue_url(QueueName=queue.name)
            basic_answer = requests.get(
                f"{server}/v1/queues", auth=(user.get_username(), PASSWORD), timeout=60
            )
            assert basic_answer.status_code == 200, basic_answer.text

    every_call_works()  # every thread now holds a connection
    terminate_server_connections()
    every_call_works()


def test_failed_passwords_are_throttled_per_username_with_retry_after(
    server, make_queue, make_user
):
    queue = make_queue()
    victim = make_user(is_superuser=True)
    other = make_user(is_superuser=True)
    url = f"{server}/v1/queues/{queue.name}/messages"
    statuses = [
        requests.post(url, json={"body": 1}, auth=(victim.get_username(), "bad"), timeout=60)
        for _ in range(3)
    ]
    assert [s.status_code for s in statuses] == [401, 401, 401]
    throttled = requests.post(
        url, json={"body": 1}, auth=(victim.get_username(), PASSWORD), timeout=60
    )
    assert throttled.status_code == 429, throttled.text
    assert throttled.json()["error"]["code"] == "throttled"
    assert int(throttled.headers["Retry-After"]) >= 1
    # Another user from the same address is not locked out by the victim's failures.
    ok = requests.post(url, json={"body": 2}, auth=(other.get_username(), PASSWORD), timeout=60)
    assert ok.status_code == 201, ok.text
    assert [m.message for m in pgq.read(queue, qty=10)] == [2]


def test_failed_passwords_from_one_address_are_throttled_across_usernames(
    server, make_queue, make_user
):
    """Each attempt names a new user; the address's limit (8 here) still stops them. (The
    last test of the module: the address stays throttled for the window.)"""
    queue = make_queue()
    url = f"{server}/v1/queues/{queue.name}/messages"
    seen: list[int] = []
    while len(seen) <= 8 and 429 not in seen:
        name = "nobody_" + uuid.uuid4().hex[:8]
        seen.append(
            requests.post(url, json={"body": 1}, auth=(name, "bad"), timeout=60).status_code
        )
    assert seen[-1] == 429 and set(seen[:-1]) <= {401}, seen
    assert pgq.metrics(queue).total_messages == 0


@pytest.mark.parametrize("fast_paths", [True, False], ids=["one hop", "Django's handler"])
def test_a_chunked_body_past_the_limit_is_answered_413_before_it_ends(
    fast_paths, make_queue, make_user, django_db_blocker
):
    """Both ways pgq_django.asgi serves a REST view stop reading a body at the limit: the
    answer comes although the body never ends (no closing chunk is sent)."""
    queue = make_queue()
    user = make_user(is_superuser=True)
    limit = 64 * 1024
    settings = {"REST_MAX_BODY_SIZE": limit, "FAST_PATHS": fast_paths}
    proc, base, sock = start_uvicorn(PGQ_TEST_PGQ=json.dumps(settings))
    try:
        part = b'{"body": "' + b"x" * (2 * limit)
        status, _h, body = raw_request(
            base,
            f"POST /v1/queues/{queue.name}/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
            + basic(user.get_username(), PASSWORD),
            f"{len(part):x}\r\n".encode() + part + b"\r\n",
        )
    finally:
        stop(proc, sock)
        with django_db_blocker.unblock():
            wait_for_server_connections_to_close(app_name_of(proc))
    assert status == 413
    assert json.loads(body)["error"] == {
        "code": "request_too_large",
        "message": f"The request body is larger than {limit} bytes.",
        "details": {"max_body_size": limit},
    }
    assert pgq.metrics(queue).total_messages == 0
