"""A throwaway PgBouncer in transaction mode in front of a PostgreSQL, for CI and benchmarks.

:class:`PgBouncer` writes a configuration in a temporary directory (``pool_mode =
transaction``, a wildcard ``*`` database so any database on the server can be reached,
SCRAM authentication against a generated password), starts Debian's ``pgbouncer`` on a free
loopback port and on a Unix socket in that directory (``.s.PGSQL.<port>``, so a local client
can skip loopback TCP as it can with PostgreSQL's own socket: bench/pooler.py measures
both), and stops it again. Other PgBouncer settings can be laid over the configuration
(``settings=``) for A/B runs. PgBouncer refuses to run as root: under root it runs as the
system user that owns the PostgreSQL socket directory (the embedded server's user), which
can reach the socket.

The configuration is what docs/howto/pgbouncer.md advises: transaction pooling, and the
defaults of ``server_reset_query_always`` (0: no ``DISCARD ALL`` after each transaction,
which would drop the plans pgq_django's server-side functions keep), ``server_check_delay``
and ``server_round_robin``.

Run as a module it wraps a command: it starts (or attaches to) the embedded PostgreSQL in
``--data-dir``, puts PgBouncer in front of it and runs the command with

- ``DATABASE_URL``: the ``postgres`` database through PgBouncer (transaction pooling);
- ``DIRECT_DATABASE_URL``: the same server without PgBouncer, for the connections that need
  a session of their own (LISTEN, see docs/howto/pgbouncer.md);

then stops both and exits with the command's status. ``.ci/test-pgbouncer`` runs the test
suite this way::

    python -m bench.pgbouncer -- python -m pytest -q -m 'not spark'

``--setting KEY=VALUE`` (repeatable) lays PgBouncer settings over the configuration. With
``max_prepared_statements`` above 0 (PgBouncer 1.21 or newer: put it first on ``PATH``) the
command also gets ``POOLER_KEEPS_PREPARED=1``, and the test settings then keep
``PREPARED_STATEMENTS`` on, as docs/howto/pgbouncer.md advises for such a PgBouncer.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import hmac
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
from psycopg.conninfo import conninfo_to_dict

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA_DIR = ROOT / ".pgdata" / "pgbouncer"

CONFIG = """\
[databases]
* = host={backend_host} port={backend_port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir = {workdir}
auth_type = scram-sha-256
auth_file = {workdir}/userlist.txt
pool_mode = transaction
max_client_conn = 800
default_pool_size = {pool_size}
max_db_connections = {max_db_connections}
server_reset_query =
ignore_startup_parameters = extra_float_digits
logfile = {workdir}/pgbouncer.log
pidfile = {workdir}/pgbouncer.pid
log_connections = 0
log_disconnections = 0
"""


def scram_secret(password: str, iterations: int = 4096) -> str:
    """The SCRAM-SHA-256 verifier of ``password`` as PostgreSQL stores it (RFC 5802/7677).

    PgBouncer given the verifier instead of the password does not derive it again for
    every login, which halves what a new connection costs it.
    """
    salt = secrets.token_bytes(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    stored_key = hashlib.sha256(client_key).digest()
    server_key = hmac.new(salted, b"Server Key", "sha256").digest()
    b64 = base64.b64encode
    return (
        f"SCRAM-SHA-256${iterations}:{b64(salt).decode()}"
        f"${b64(stored_key).decode()}:{b64(server_key).decode()}"
    )


def free_port() -> int:
    """A loopback port nobody listens on right now (PgBouncer binds it a moment later)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PgBouncer:
    """PgBouncer in transaction mode in front of the server of ``backend_dsn``.

    ``backend_dsn`` must name a Unix socket directory or host PgBouncer can reach and a
    user the server lets in without a password (the embedded server trusts local users):
    PgBouncer checks the password itself and logs in to the server as the same user.
    """

    def __init__(
        self,
        backend_dsn: str,
        *,
        pool_size: int = 20,
        max_db_connections: int = 60,
        settings: dict[str, str] | None = None,
    ):
        parts = conninfo_to_dict(backend_dsn)
        self.backend_host = str(parts.get("host") or "/var/run/postgresql")
        self.backend_port = int(parts.get("port") or 5432)
        self.user = str(parts.get("user") or "postgres")
        self.password = secrets.token_urlsafe(18)
        self.pool_size = pool_size
        self.max_db_connections = max_db_connections
        self.settings = dict(settings or {})  # more [pgbouncer] settings, after ours
        self.port = 0
        self.workdir: Path | None = None
        self.process: subprocess.Popen[bytes] | None = None

    def url(self, dbname: str = "postgres", *, unix: bool = False) -> str:
        """A libpq URI of database ``dbname`` through this PgBouncer: its TCP port, or with
        ``unix`` its Unix socket."""
        where = f"?host={quote(str(self.socket_dir), safe='/')}" if unix else ""
        return (
            f"postgresql://{quote(self.user)}:{quote(self.password)}"
            f"@{'' if unix else '127.0.0.1'}:{self.port}/{quote(dbname)}{where}"
        )

    @property
    def socket_dir(self) -> Path:
        """The directory of PgBouncer's Unix socket (``.s.PGSQL.<port>``), beside its TCP
        port: a client on this machine then skips loopback TCP, as a direct connection to
        the server's socket does."""
        if self.workdir is None:
            raise RuntimeError("PgBouncer is not running")
        return self.workdir

    def pid(self) -> int:
        """PgBouncer's own process id (under root, ``runuser`` is the child we started)."""
        if self.workdir is None:
            raise RuntimeError("PgBouncer is not running")
        return int((self.workdir / "pgbouncer.pid").read_text().split()[0])

    def _run_as(self) -> str | None:
        """The user to run PgBouncer as: None (ourselves) unless we are root."""
        if os.getuid() != 0:
            return None
        owner = Path(self.backend_host).stat().st_uid if self.backend_host.startswith("/") else 0
        return pwd.getpwuid(owner).pw_name if owner != 0 else "postgres"

    def start(self, timeout: float = 30.0) -> PgBouncer:
        binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
        if not Path(binary).exists():
            raise RuntimeError("pgbouncer is not installed (apt-get install pgbouncer)")
        self.workdir = Path(tempfile.mkdtemp(prefix="pgq-pgbouncer-"))
        secret = scram_secret(self.password)
        (self.workdir / "userlist.txt").write_text(f'"{self.user}" "{secret}"\n')
        command = [binary, "-q", str(self.workdir / "pgbouncer.ini")]  # -q: log to file only
        user = self._run_as()
        if user is not None:
            entry = pwd.getpwnam(user)
            for path in (self.workdir, *self.workdir.iterdir()):
                os.chown(path, entry.pw_uid, entry.pw_gid)
            command = ["runuser", "-u", user, "--", *command]
        (self.workdir / "userlist.txt").chmod(0o600)
        for _attempt in range(5):  # another process may take the free port first
            self.port = free_port()
            (self.workdir / "pgbouncer.ini").write_text(self._config())
            self.process = subprocess.Popen(
                command, start_new_session=True, stderr=subprocess.DEVNULL
            )
            if self._wait_ready(timeout):
                return self
            self._kill()
        log = self.workdir / "pgbouncer.log"
        raise RuntimeError(f"pgbouncer did not start: {log.read_text()[-2000:]}")

    def _config(self) -> str:
        """:data:`CONFIG` filled in, with ``settings`` replacing or added to its lines."""
        lines = CONFIG.format(
            backend_host=self.backend_host,
            backend_port=self.backend_port,
            port=self.port,
            workdir=self.workdir,
            pool_size=self.pool_size,
            max_db_connections=self.max_db_connections,
        ).splitlines()
        extra = dict(self.settings)
        for i, line in enumerate(lines):
            key = line.split("=", 1)[0].strip()
            if "=" in line and key in extra:
                lines[i] = f"{key} = {extra.pop(key)}"
        lines += [f"{key} = {value}" for key, value in extra.items()]
        return "\n".join(lines) + "\n"

    def _wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                return False
            with contextlib.suppress(psycopg.OperationalError):
                psycopg.connect(self.url(), connect_timeout=2).close()
                return True
            time.sleep(0.05)
        return False

    def _kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()  # SIGTERM: PgBouncer closes every connection and exits
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def stop(self) -> None:
        self._kill()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def __enter__(self) -> PgBouncer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def direct_url(backend_dsn: str) -> str:
    """The embedded server's URI as libpq takes it (the wheel's has an empty password), with
    its port spelled out: settings laid over a pooler's must not keep the pooler's port."""
    parts = conninfo_to_dict(backend_dsn)
    parts.pop("password", None)
    parts.setdefault("port", "5432")
    return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in parts.items()})


def setting_argument(text: str) -> tuple[str, str]:
    """A ``KEY=VALUE`` command-line argument: one [pgbouncer] setting."""
    key, equals, value = text.partition("=")
    if not equals or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key.strip(), value.strip()


def keeps_prepared(settings: dict[str, str]) -> bool:
    """Whether a PgBouncer with these settings keeps protocol-level prepared statements in
    transaction mode (1.21 and later, with ``max_prepared_statements`` above 0)."""
    value = settings.get("max_prepared_statements", "0").strip() or "0"
    return value.isdigit() and int(value) > 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.pgbouncer",
        description="Run a command against the embedded PostgreSQL through PgBouncer "
        "(transaction mode): DATABASE_URL goes through PgBouncer, DIRECT_DATABASE_URL not.",
    )
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument(
        "--setting",
        metavar="KEY=VALUE",
        type=setting_argument,
        action="append",
        default=[],
        help="a [pgbouncer] setting over the configuration's (repeatable); with "
        "max_prepared_statements above 0 the command is told so (POOLER_KEEPS_PREPARED=1)",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    from pgq_django.testing import embedded_dsn

    backend = direct_url(embedded_dsn(args.data_dir))
    settings = dict(args.setting)
    with PgBouncer(backend, settings=settings) as bouncer:
        env = dict(os.environ, DATABASE_URL=bouncer.url(), DIRECT_DATABASE_URL=backend)
        if keeps_prepared(settings):
            env["POOLER_KEEPS_PREPARED"] = "1"
        print(f"PgBouncer (transaction mode) on 127.0.0.1:{bouncer.port}", flush=True)
        child = subprocess.Popen(command, env=env)
        forward: dict[int, Any] = {}

        def relay(signum: int, _frame: Any) -> None:
            child.send_signal(signum)  # the command decides how to stop; we wait for it

        for sig in (signal.SIGINT, signal.SIGTERM):
            forward[sig] = signal.signal(sig, relay)
        try:
            return child.wait()
        finally:
            for sig, previous in forward.items():
                signal.signal(sig, previous)


if __name__ == "__main__":
    sys.exit(main())
