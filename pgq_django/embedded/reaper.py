"""The reaper: a small process per embedded data directory that stops the server once no
user of it is alive, the one thing that can stop it after its last user got SIGKILL.

Started by a user that finds none running (:func:`ensure_reaper`), it runs
``python -m pgq_django.embedded reap DATA_DIR`` in a session of its own, writes its pid to
``DATA_DIR/.reaper.pid`` and what it does to ``DATA_DIR/reaper.log``.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from .server import (
    REAPER_FILE,
    is_reaper,
    live_users,
    locked,
    read_pid,
    stop_server,
    write_atomically,
)

__all__ = ["REAPER_LOG", "REAP_INTERVAL", "ensure_reaper", "reap"]

logger = logging.getLogger("pgq_django.embedded")

REAPER_LOG = "reaper.log"
REAP_INTERVAL = 1.0

_reaper: subprocess.Popen[bytes] | None = None


def ensure_reaper(data_dir: Path) -> None:
    """Start the data directory's reaper unless one runs. It lives in a session of its own,
    so a terminal's Ctrl-C or hang-up, which end its users, leaves it to clean up."""
    global _reaper
    with locked():
        running = read_pid(data_dir / REAPER_FILE)
        if running is not None and is_reaper(running, data_dir):
            return
        package_parent = str(Path(__file__).resolve().parents[2])  # where pgq_django is
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
        write_atomically(data_dir / REAPER_FILE, str(_reaper.pid))


def reap(data_dir: str | Path, *, interval: float = REAP_INTERVAL) -> None:
    """The reaper: every ``interval`` seconds, drop dead users of ``data_dir``'s server, and
    when none is left, stop the server and exit.

    It also exits when another reaper takes its place (or ``stop`` removes its pid file).
    The reaper is not a user of the server: it never keeps the server up.
    """
    path = Path(data_dir).resolve()
    me = os.getpid()
    logger.info("reaper %s watches %s", me, path)
    while True:
        time.sleep(interval)
        with locked():
            if read_pid(path / REAPER_FILE) != me:
                logger.info("reaper %s replaced; exiting", me)
                return
            if live_users(path):
                continue
            stopped = stop_server(path)
            (path / REAPER_FILE).unlink(missing_ok=True)
        logger.info(
            "no process uses %s any more; %s",
            path,
            "stopped its server" if stopped else "no server ran",
        )
        return
