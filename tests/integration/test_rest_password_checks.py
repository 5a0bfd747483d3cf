"""The password checks of HTTP basic, in this process: where they hash, and how requests
with the same credentials share one hash.

Outside pgq_django.asgi (a WSGI server, Django's own ASGI handler) the early check does not
run, and :class:`~pgq_django.rest.authentication.BasicAuthentication` hands the password to
the dedicated threads while the request's thread waits. The sharing of one check among
requests that arrive while it runs is shown on
:class:`~pgq_django.rest.authentication.PasswordChecks` itself: over HTTP nothing observable
tells the test that a second request has joined the check rather than not arrived yet, and
here each ``submit`` returns once it has joined. The gated hasher of tests/password_gate.py
holds the first hash so the others provably arrive while it runs.
"""

from __future__ import annotations

import base64
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

import pytest
from django.test import RequestFactory, override_settings
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from pgq_django.rest.authentication import BasicAuthentication, PasswordChecks, throttle
from tests.http_server import PASSWORD
from tests.password_gate import GATE_ENV, PASSWORD_THREAD_PREFIX, HashGate


@pytest.fixture
def gate(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[HashGate]:
    """This process hashes with the gated hasher, reporting to a gate of this test."""
    gate = HashGate()
    monkeypatch.setenv(GATE_ENV, gate.path)
    settings.PASSWORD_HASHERS = ["tests.password_gate.GatedMD5Hasher"]
    yield gate
    gate.close()


def address() -> str:
    """A client address no other test counts failures for."""
    return "198.51.100." + uuid.uuid4().hex[:6]


def finished(future: Future[Any]) -> threading.Event:
    """Set once every callback registered on ``future`` before this one has run.

    Callbacks run in the order they were added, so this is set after PasswordChecks has
    released the check's place and forgotten its credentials (a waiter of ``result()`` may
    wake before that).
    """
    event = threading.Event()
    future.add_done_callback(lambda _done: event.set())
    return event


def test_outside_the_early_check_the_hash_runs_on_a_password_thread(
    gate: HashGate, make_user: Callable[..., Any]
) -> None:
    """DRF's basic authentication, as a WSGI server runs it: the request's thread waits while
    a dedicated thread hashes, so a slow hash never occupies a thread that serves requests."""
    user = make_user()
    credentials = base64.b64encode(f"{user.get_username()}:{PASSWORD}".encode()).decode()
    request = Request(RequestFactory().get("/v1/queues", HTTP_AUTHORIZATION=f"Basic {credentials}"))
    authenticated, _auth = BasicAuthentication().authenticate(request)
    assert authenticated.pk == user.pk
    [hashed] = gate.hashes
    assert hashed.thread.startswith(PASSWORD_THREAD_PREFIX), hashed
    assert hashed.thread != threading.current_thread().name


def test_requests_with_the_same_credentials_share_one_hash(
    gate: HashGate, make_user: Callable[..., Any]
) -> None:
    """Many requests with the same credentials arriving while their check runs cost one hash
    and all get its answer; other credentials get a check of their own; and once the check
    is answered its credentials are forgotten: the next request hashes again."""
    user = make_user()
    name = user.get_username()
    checks = PasswordChecks()
    gate.shut()
    try:
        first = checks.submit(name, PASSWORD, address())
        gate.wait_for(1)  # the check runs and is held
        joined = [checks.submit(name, PASSWORD, address()) for _ in range(20)]
        wrong = checks.submit(name, "not-" + PASSWORD, address())
        assert all(future is first for future in joined)
        assert wrong is not first
        gate.wait_for(2)  # the other credentials' check runs beside it
        gate.open()
        assert first.result(timeout=60).pk == user.pk
        with pytest.raises(AuthenticationFailed):
            wrong.result(timeout=60)
    finally:
        gate.open()
    assert sorted(h.password for h in gate.hashes) == sorted([PASSWORD, "not-" + PASSWORD])
    assert finished(first).wait(60)
    again = checks.submit(name, PASSWORD, address())
    assert again is not first
    assert again.result(timeout=60).pk == user.pk
    assert [h.password for h in gate.hashes].count(PASSWORD) == 2


def test_a_shared_failed_check_counts_a_failure_for_each_address(
    gate: HashGate, make_user: Callable[..., Any]
) -> None:
    """Sharing a hash shares no leniency: a request that joined a check of a wrong password
    counts as a failed attempt of its own address, so spreading a guess over connections
    from many addresses does not keep any of them under the throttle."""
    user = make_user()
    name = user.get_username()
    checks = PasswordChecks()
    guesser, joiner, bystander = address(), address(), address()
    with override_settings(PGQ={"REST_AUTH_FAILURES_PER_ADDRESS": 1}):
        gate.shut()
        try:
            first = checks.submit(name, "guess", guesser)
            gate.wait_for(1)
            assert checks.submit(name, "guess", joiner) is first
            gate.open()
            with pytest.raises(AuthenticationFailed):
                first.result(timeout=60)
        finally:
            gate.open()
        assert finished(first).wait(60)
        assert len(gate.hashes) == 1
        other = "someone_" + uuid.uuid4().hex[:8]
        assert throttle.wait(guesser, other) > 0
        assert throttle.wait(joiner, other) > 0
        assert throttle.wait(bystander, other) == 0
