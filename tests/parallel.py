"""Running the suite in parallel (pytest-xdist) and making sure it ends.

- **A database per worker.** tests/settings.py names the test database after the xdist
  worker (``pgq_test_gw0``…), and the child processes a test starts inherit the worker's
  name, so they find the same database. pytest-django would add a suffix of its own on top;
  :func:`django_db_modify_db_settings_xdist_suffix` below keeps it from doing so.
- **One server, shared.** Every worker uses the same PostgreSQL (the embedded one, or
  ``DATABASE_URL``'s). A test marked ``exclusive`` restarts or crashes that server, so it
  must run while no other test does: every test holds the server's lock shared, an
  exclusive test holds it alone (:class:`ServerLock`). The lock lives beside the embedded
  server's data directory, so separate runs on one server respect it too. The restart ends
  the sessions the other workers keep between tests, so each closes its Django
  connections before its next test once an exclusive test has run (:class:`ServerLock`
  counts them).
- **Nothing waits for ever.** pytest-timeout (configured in pyproject.toml) fails a test that
  runs past its limit, with every thread's stack; and a SIGTERM ends the run at once, even
  while a test is blocked inside a C call (see :func:`pytest_sessionstart`).
"""

from __future__ import annotations

import fcntl
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import pytest
from django.db import connections

ROOT = Path(__file__).resolve().parent.parent
LOCK_DIR = ROOT / ".pgdata"


class ServerLock:
    """A readers-writer lock between processes, on two files.

    Readers (ordinary tests) share ``server``; a writer (an ``exclusive`` test) takes it
    alone. A writer first takes ``gate`` alone, and readers pass the gate (shared) before
    they take ``server``, so a waiting writer stops new readers and gets its turn as soon
    as the running tests end, instead of waiting for a moment when no worker happens to be
    inside a test. flock locks belong to open files, which Python opens close-on-exec: the
    children a test starts do not hold them.
    """

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._gate: IO[str] = (directory / "tests-gate.lock").open("a")
        self._server: IO[str] = (directory / "tests-server.lock").open("a")
        # How many exclusive tests have ended, written by each under the lock; a reader
        # that finds a number other than the one it last saw knows the server restarted.
        self._restarts = directory / "tests-server.restarts"
        self._seen = self._read_restarts()

    def _read_restarts(self) -> int:
        try:
            return int(self._restarts.read_text() or 0)
        except FileNotFoundError:
            return 0

    @contextmanager
    def shared(self) -> Iterator[bool]:
        """Hold the lock shared; yields whether an exclusive test ran since the last hold."""
        fcntl.flock(self._gate, fcntl.LOCK_SH)
        try:
            fcntl.flock(self._server, fcntl.LOCK_SH)
        finally:
            fcntl.flock(self._gate, fcntl.LOCK_UN)
        try:
            restarts = self._read_restarts()
            restarted, self._seen = restarts != self._seen, restarts
            yield restarted
        finally:
            fcntl.flock(self._server, fcntl.LOCK_UN)

    @contextmanager
    def exclusive(self) -> Iterator[bool]:
        fcntl.flock(self._gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(self._server, fcntl.LOCK_EX)
            try:
                restarted = self._read_restarts() != self._seen
                yield restarted
            finally:
                self._seen = self._read_restarts() + 1
                self._restarts.write_text(str(self._seen))
                fcntl.flock(self._server, fcntl.LOCK_UN)
        finally:
            fcntl.flock(self._gate, fcntl.LOCK_UN)


_lock: ServerLock | None = None


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """Hold the server lock around a test's whole protocol, fixtures' set-up and teardown
    included (a module's server or browser starts in its first test's set-up). Outermost,
    so the wait for an exclusive test is not counted against a test's time limit."""
    global _lock
    if _lock is None:
        _lock = ServerLock(LOCK_DIR)
    hold = _lock.exclusive if item.get_closest_marker("exclusive") else _lock.shared
    with hold() as restarted:
        if restarted:
            # Sessions this process kept between tests ended with the server; Django would
            # hand the next test a dead one.
            connections.close_all()
        yield


@pytest.fixture(scope="session")
def django_db_modify_db_settings_xdist_suffix() -> None:
    """pytest-django's adds ``_gwN`` to the test database's name; tests/settings.py has
    already named it after the worker, as the worker's children do."""


def pytest_sessionstart(session: pytest.Session) -> None:
    """Let SIGTERM take its default action in the test processes.

    The embedded server's module turns SIGTERM into a Python handler (it leaves the server
    first), and a Python handler runs only when the main thread gets back to the
    interpreter: a test blocked inside libpq would keep the run alive after ``timeout`` or
    CI sends SIGTERM. The default action ends the process at once; the server's reaper
    stops it once its last user is gone, as after a SIGKILL.
    """
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
