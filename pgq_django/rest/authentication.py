"""HTTP basic and token authentication that cannot be turned against the server.

DRF's own classes, with three changes, used wherever the REST API would use DRF's
(:func:`~pgq_django.rest.permissions.authentication_classes` substitutes them):

- **Malformed credentials are refused, not looked up.** A username or token with a NUL
  character (which PostgreSQL cannot compare) or longer than any stored one answers 401
  without a query.
- **Failed passwords are throttled.** Each failed basic authentication is counted per
  client address and per username; past ``PGQ["REST_AUTH_FAILURES_PER_ADDRESS"]`` or
  ``PGQ["REST_AUTH_FAILURES_PER_USERNAME"]`` within ``PGQ["REST_AUTH_FAILURE_WINDOW"]``
  seconds the next attempt answers 429 with ``Retry-After``, before any password is hashed.
  The counts are kept per process (each server process counts its own).
- **Password hashing has threads of its own.** Checking a password is the slowest thing a
  request can ask for (a PBKDF2 hash takes a core for a good fraction of a second), so it
  runs on ``PGQ["REST_PASSWORD_THREADS"]`` dedicated threads with room for
  ``PGQ["REST_PASSWORD_QUEUE"]`` waiting checks; beyond that the request answers 429. A
  flood of wrong passwords then costs at most those threads' cores, and the threads that
  serve other requests stay free. Under :mod:`pgq_django.asgi` the check runs before the
  request reaches its thread at all (:func:`check_basic_early`); elsewhere the request's
  thread waits for it. Inside an atomic block (a test's transaction, ``ATOMIC_REQUESTS``)
  the check runs on the request's own thread and connection, which see that transaction.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import math
import secrets
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from django.apps import apps
from django.contrib.auth import authenticate, get_user_model
from django.db import close_old_connections, connections
from django.utils.module_loading import import_string
from drf_spectacular.authentication import BasicScheme
from rest_framework import authentication as drf
from rest_framework.exceptions import AuthenticationFailed, Throttled
from rest_framework.settings import api_settings

from ..api.recovery import drop_dead_connections
from ..conf import settings

# Longest username and token looked up: Django's own username field holds 150 characters,
# DRF's token key 40; a longer one cannot match a stored row.
MAX_USERNAME_LENGTH = 254
MAX_TOKEN_LENGTH = 255
INVALID = "Invalid username/password."
# Where pgq_django.asgi leaves the result of an early basic check in the request's scope.
SCOPE_KEY = "pgq.basic_auth"


def plausible(text: str, longest: int) -> bool:
    """Whether ``text`` could be a stored username or token at all."""
    return 0 < len(text) <= longest and "\x00" not in text


class FailureThrottle:
    """Failed authentications per client address and per username, in a sliding window."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failures: dict[tuple[str, str], deque[float]] = {}

    def _limits(self, address: str, username: str) -> list[tuple[tuple[str, str], int]]:
        return [
            (("address", address), int(settings.REST_AUTH_FAILURES_PER_ADDRESS)),
            (("username", username), int(settings.REST_AUTH_FAILURES_PER_USERNAME)),
        ]

    def wait(self, address: str, username: str) -> float:
        """Seconds until another attempt is allowed (0: allowed now)."""
        window = float(settings.REST_AUTH_FAILURE_WINDOW)
        now = time.monotonic()
        longest = 0.0
        with self._lock:
            for key, limit in self._limits(address, username):
                times = self._failures.get(key)
                if not times:
                    continue
                while times and times[0] <= now - window:
                    times.popleft()
                if not times:
                    del self._failures[key]
                elif len(times) >= limit:
                    longest = max(longest, times[-limit] + window - now)
        return longest

    def failed(self, address: str, username: str) -> None:
        now = time.monotonic()
        with self._lock:
            if len(self._failures) > 100_000:  # a spray of names: forget, do not grow
                self._failures.clear()
            for key, limit in self._limits(address, username):
                times = self._failures.setdefault(key, deque(maxlen=max(1, limit)))
                times.append(now)

    def reset(self) -> None:
        with self._lock:
            self._failures.clear()


throttle = FailureThrottle()


class PasswordChecks:
    """The dedicated threads that hash passwords, with a bounded number of waiting checks.

    Requests with the same credentials that arrive while one check of them runs share its
    answer (a client opening many connections at once costs one hash, not one each); the
    credentials are kept, as an HMAC under a key of this process, only while that check
    runs.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._slots: threading.BoundedSemaphore | None = None
        self._running: dict[bytes, Future[Any]] = {}
        self._key = secrets.token_bytes(32)

    def _started(self) -> tuple[ThreadPoolExecutor, threading.BoundedSemaphore]:
        with self._lock:
            if self._executor is None or self._slots is None:
                threads = max(1, int(settings.REST_PASSWORD_THREADS))
                self._executor = ThreadPoolExecutor(threads, thread_name_prefix="pgq-password")
                self._slots = threading.BoundedSemaphore(
                    threads + max(0, int(settings.REST_PASSWORD_QUEUE))
                )
            return self._executor, self._slots

    def submit(self, username: str, password: str, address: str) -> Future[Any]:
        """Check a password on the dedicated threads; 429 when throttled or when too many
        checks wait."""
        refuse_if_throttled(address, username)
        executor, slots = self._started()
        credentials = f"{username}\x00{password}".encode("utf-8", "surrogatepass")
        key = hmac.digest(self._key, credentials, "sha256")
        with self._lock:
            running = self._running.get(key)
            if running is not None:
                running.add_done_callback(lambda done: _count_failure(done, address, username))
                return running
            if not slots.acquire(blocking=False):
                raise Throttled(wait=1, detail="Too many password checks are waiting.")
            try:
                future = executor.submit(_check_on_own_thread, username, password, address)
            except BaseException:
                slots.release()
                raise
            self._running[key] = future

        def finished(_done: Future[Any]) -> None:
            with self._lock:
                self._running.pop(key, None)
            slots.release()

        future.add_done_callback(finished)
        return future


def _count_failure(done: Future[Any], address: str, username: str) -> None:
    """A request that shared a failed check counts as a failure of its own address."""
    if isinstance(done.exception(), AuthenticationFailed):
        throttle.failed(address, username)


def refuse_if_throttled(address: str, username: str) -> None:
    wait = throttle.wait(address, username)
    if wait > 0:
        raise Throttled(wait=math.ceil(wait), detail="Too many failed authentications.")


password_checks = PasswordChecks()


def check_password(username: str, password: str, address: str, request: Any = None) -> Any:
    """The active user these credentials name, or AuthenticationFailed / Throttled.

    Runs on the calling thread; failures count toward the throttle.
    """
    if not plausible(username, MAX_USERNAME_LENGTH):
        throttle.failed(address, username[:MAX_USERNAME_LENGTH])
        raise AuthenticationFailed(INVALID)
    refuse_if_throttled(address, username)
    credentials = {get_user_model().USERNAME_FIELD: username, "password": password}
    user = authenticate(request=request, **credentials)
    if user is None:
        throttle.failed(address, username)
        raise AuthenticationFailed(INVALID)
    if not user.is_active:
        raise AuthenticationFailed("User inactive or deleted.")
    return user


def _check_on_own_thread(username: str, password: str, address: str) -> Any:
    drop_dead_connections()
    try:
        return check_password(username, password, address)
    finally:
        close_old_connections()


def basic_credentials(header: bytes | str) -> tuple[str, str] | None:
    """(username, password) of an ``Authorization: Basic`` header; None for another scheme.

    Malformed basic credentials raise AuthenticationFailed, with DRF's messages.
    """
    raw = header.encode("latin-1") if isinstance(header, str) else header
    parts = raw.split()
    if not parts or parts[0].lower() != b"basic":
        return None
    if len(parts) == 1:
        raise AuthenticationFailed("Invalid basic header. No credentials provided.")
    if len(parts) > 2:
        raise AuthenticationFailed(
            "Invalid basic header. Credentials string should not contain spaces."
        )
    try:
        decoded = base64.b64decode(parts[1])
        try:
            text = decoded.decode("utf-8")
        except UnicodeDecodeError:
            text = decoded.decode("latin-1")
        username, password = text.split(":", 1)
    except (TypeError, ValueError, binascii.Error):
        raise AuthenticationFailed(
            "Invalid basic header. Credentials not correctly base64 encoded."
        ) from None
    return username, password


async def check_basic_early(scope: dict[str, Any], header: bytes) -> Any:
    """Check a request's basic credentials on the password threads, from the event loop.

    Answers the user (and leaves it in the scope, where :class:`BasicAuthentication` finds
    it), None for another scheme, or raises AuthenticationFailed / Throttled.
    """
    found = basic_credentials(header)
    if found is None:
        return None
    username, password = found
    address = (scope.get("client") or ("",))[0] or ""
    user = await asyncio.wrap_future(password_checks.submit(username, password, address))
    scope[SCOPE_KEY] = (header, user)
    return user


class BasicAuthentication(drf.BasicAuthentication):
    """DRF's HTTP basic authentication, throttled, with hashing on dedicated threads."""

    def authenticate_credentials(
        self, userid: str, password: str, request: Any = None
    ) -> tuple[Any, None]:
        scope = getattr(request, "scope", None)
        early = scope.get(SCOPE_KEY) if isinstance(scope, dict) else None
        if early is not None and request is not None:
            header = request.META.get("HTTP_AUTHORIZATION", "")
            if early[0] == header.encode("latin-1", "replace"):
                return early[1], None
        address = request.META.get("REMOTE_ADDR", "") if request is not None else ""
        if not plausible(userid, MAX_USERNAME_LENGTH) or _in_atomic_block():
            return check_password(userid, password, address, request), None
        return password_checks.submit(userid, password, address).result(), None


class BasicAuthenticationScheme(BasicScheme):
    """The OpenAPI security scheme of :class:`BasicAuthentication`: DRF's ``basicAuth``.

    drf-spectacular describes DRF's own class but not its subclasses, so without this every
    view's schema warned and offered no way to log in. (Its token scheme already covers
    subclasses, :class:`TokenAuthentication` included.) Defining the class registers it.
    """

    target_class = f"{BasicAuthentication.__module__}.{BasicAuthentication.__qualname__}"


class TokenAuthentication(drf.TokenAuthentication):
    """DRF's token authentication, refusing a key no token can have without a query."""

    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        if not plausible(key, MAX_TOKEN_LENGTH):
            raise AuthenticationFailed("Invalid token.")
        return super().authenticate_credentials(key)  # type: ignore[no-any-return]


def _in_atomic_block() -> bool:
    return any(db.in_atomic_block for db in connections.all(initialized_only=True))


_BUILTIN: list[type[drf.BaseAuthentication]] = [
    BasicAuthentication,
    drf.SessionAuthentication,
]
# DRF's classes and the hardened twins that serve in their place (above).
_HARDENED: dict[type[drf.BaseAuthentication], type[drf.BaseAuthentication]] = {
    drf.BasicAuthentication: BasicAuthentication,
    drf.TokenAuthentication: TokenAuthentication,
}


# The classes whose credentials come only from the Authorization header or the session
# cookie: with nothing else configured, a request with neither has no credentials at all.
KNOWN_CLASSES = frozenset(
    {BasicAuthentication, TokenAuthentication, drf.SessionAuthentication, *_HARDENED}
)


def authentication_classes() -> list[type[drf.BaseAuthentication]]:
    """The authenticators the REST API uses, resolved from the settings on each call.

    DRF's basic and token classes, wherever they are listed, are served by
    the throttled twins above.
    """
    configured = settings.REST_AUTHENTICATION_CLASSES
    if configured is not None:
        found = [import_string(path) if isinstance(path, str) else path for path in configured]
    elif "DEFAULT_AUTHENTICATION_CLASSES" in api_settings.user_settings:
        found = list(api_settings.DEFAULT_AUTHENTICATION_CLASSES)
    else:
        found = list(_BUILTIN)
        if apps.is_installed("rest_framework.authtoken"):
            found.append(TokenAuthentication)
    return [_HARDENED.get(cls, cls) for cls in found]
