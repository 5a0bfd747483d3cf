"""A password hasher the tests can watch and hold, in this process or in a live server.

The REST API checks HTTP basic passwords on threads of their own
(:class:`pgq_django.rest.authentication.PasswordChecks`). To show which thread hashes, how
many hashes a burst of requests costs, and what the server still serves while every password
thread is busy, the tests need to see each hash as it starts and to keep it from finishing
until they say so — with events, never with a guessed sleep or a timing threshold.

:class:`GatedMD5Hasher` is Django's MD5 hasher (the test settings' hasher, so the passwords
``make_user`` sets verify unchanged) whose ``verify`` first reports to the :class:`HashGate`
named by the ``PGQ_TEST_HASH_GATE`` environment variable: it sends the name of the thread it
runs on and the password it checks over a Unix socket, and returns only when the gate lets
it go. Without that variable it is the plain MD5 hasher. A live server gets it through
``DJANGO_SETTINGS_MODULE=tests.password_gate_settings``; a test in this process through
``settings.PASSWORD_HASHERS``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import threading
from dataclasses import dataclass

from django.contrib.auth.hashers import MD5PasswordHasher

GATE_ENV = "PGQ_TEST_HASH_GATE"
# The thread name prefix of PasswordChecks' executor (pgq_django/rest/authentication.py).
PASSWORD_THREAD_PREFIX = "pgq-password"


class GatedMD5Hasher(MD5PasswordHasher):
    """MD5, reporting each verification to the gate and waiting for its word first."""

    def verify(self, password: str, encoded: str) -> bool:
        path = os.environ.get(GATE_ENV)
        if path:
            report = {"thread": threading.current_thread().name, "password": password}
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.connect(path)
                conn.sendall(json.dumps(report).encode() + b"\n")
                with conn.makefile("rb") as answer:
                    answer.readline()  # the gate's word: it answers once it is open
        return super().verify(password, encoded)


@dataclass(frozen=True)
class Hash:
    """One password verification the gate saw: where it ran and what it checked."""

    thread: str
    password: str


class HashGate:
    """The test's end of :class:`GatedMD5Hasher`: records every hash, holds them while shut.

    Open, it lets each hash go at once; after :meth:`shut`, each new hash waits until
    :meth:`open`. :meth:`wait_for` blocks until a number of hashes have started, on a
    condition variable the reporting threads notify (its timeout only guards against a hang).
    """

    def __init__(self) -> None:
        # A short directory: a Unix socket's path is limited to about 100 bytes.
        self._dir = tempfile.mkdtemp(prefix="pgq-gate-", dir="/tmp")
        self.path = os.path.join(self._dir, "gate.sock")
        self._cond = threading.Condition()
        self._open = True
        self._hashes: list[Hash] = []
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self.path)
        self._listener.listen(128)
        threading.Thread(target=self._accept, name="hash-gate", daemon=True).start()

    @property
    def hashes(self) -> list[Hash]:
        with self._cond:
            return list(self._hashes)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:  # closed
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as lines:
            report = json.loads(lines.readline())
            with self._cond:
                self._hashes.append(Hash(report["thread"], report["password"]))
                self._cond.notify_all()
                self._cond.wait_for(lambda: self._open)
            conn.sendall(b"go\n")

    def shut(self) -> None:
        """Hold every hash that starts from now on until :meth:`open`."""
        with self._cond:
            self._open = False

    def open(self) -> None:
        """Let every held hash finish, and every later one pass at once."""
        with self._cond:
            self._open = True
            self._cond.notify_all()

    def reset(self) -> None:
        """Open, and forget the hashes seen so far (a test's fresh start)."""
        self.open()
        with self._cond:
            self._hashes.clear()

    def wait_for(self, count: int, timeout: float = 60.0) -> list[Hash]:
        """The hashes seen, once at least ``count`` have started."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self._hashes) >= count, timeout):
                raise AssertionError(f"{len(self._hashes)} hashes started, not {count}")
            return list(self._hashes)

    def close(self) -> None:
        self.open()
        self._listener.close()
        shutil.rmtree(self._dir, ignore_errors=True)
