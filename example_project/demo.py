#!/usr/bin/env python
"""``make demo``: the example project running on its own PostgreSQL, one command.

Steps: start the embedded PostgreSQL in ``.pgdata/demo`` (or use ``DATABASE_URL``), migrate,
create the demo login and print it, seed the demo queues and traffic, then serve the example
project with uvicorn (``runserver`` without it) on 127.0.0.1:$PORT (8000 by default) and, when the
``pgq_worker`` command exists, a worker process beside it. Ctrl-C or SIGTERM stops the
children, and the embedded server stops when this script exits.

The addresses and the login are printed last, once the site answers and the worker has
logged its start-up lines (its output is relayed line by line), so they are not buried
under them. The worker's "card declined" failures that follow are on purpose: see
:data:`DEAD_LETTER_NOTE`.

``--check`` (or ``DEMO_CHECK=1``) does everything up to serving, fetches the admin login
page once over HTTP to prove the site answers, stops, and exits 0; the test suite runs it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import FrameType

ROOT = Path(__file__).resolve().parent.parent
MANAGE = ROOT / "example_project" / "manage.py"
SETTINGS = "example_project.settings"
DEMO_USER = "demo"
DEMO_PASSWORD = "demo"
STARTUP_TIMEOUT = 60.0
STOP_TIMEOUT = 15.0
# The worker's start-up is over once its output pauses this long after "worker_started"
# (the leader's election and first upkeep follow it by milliseconds), or at the latest
# SETTLE_LIMIT seconds after it: messages it handles may keep it talking.
SETTLE_PAUSE = 0.5
SETTLE_LIMIT = 5.0
DEAD_LETTER_NOTE = (
    'the worker\'s "card declined" failures are the dead-letter demo: every payment fails '
    "(example_project/demo_app/pgq_handlers.py), is retried with backoff and then moves to "
    "the payments-dlq queue, where the admin can redrive it"
)


class Stop(Exception):
    """Raised by the signal handlers so the ``finally`` clauses shut everything down."""


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise Stop(signal.Signals(signum).name)


def say(text: str) -> None:
    print(f"[demo] {text}", flush=True)


def database_url() -> str:
    """``DATABASE_URL``, or the URI of the embedded server, which this process then owns.

    Children get the URI in their environment, so they connect to the same server without
    registering as its owners: the server stops when this script exits, not before.
    """
    url = os.environ.get("DATABASE_URL")
    if url:
        say("using the PostgreSQL server of DATABASE_URL")
        return url
    from pgq_django.testing import embedded_dsn

    data_dir = ROOT / ".pgdata" / "demo"
    say(f"starting the embedded PostgreSQL in {data_dir.relative_to(ROOT)}")
    return embedded_dsn(data_dir)


def prepare_database() -> None:
    """Migrate, create the demo login and seed the demo queues, in this process."""
    import django
    from django.core.management import call_command

    django.setup()
    say("migrating")
    call_command("migrate", interactive=False, verbosity=0)
    ensure_demo_user()
    say("seeding demo queues and traffic")
    call_command("pgq_seed")
    from django.db import connections

    connections.close_all()


def ensure_demo_user() -> None:
    from django.contrib.auth import get_user_model

    user_model = get_user_model()
    user, _ = user_model.objects.get_or_create(username=DEMO_USER)
    user.is_staff = user.is_superuser = True
    user.set_password(DEMO_PASSWORD)
    user.save()


def has_command(name: str) -> bool:
    from django.core.management import get_commands

    return name in get_commands()


def has_route(path: str) -> bool:
    from django.urls import Resolver404, resolve

    try:
        resolve(path)
    except Resolver404:
        return False
    return True


def start(
    args: list[str], env: dict[str, str], *, stderr: int | None = None
) -> subprocess.Popen[bytes]:
    # Each child gets its own session, so a Ctrl-C in the terminal reaches only this script,
    # which then stops every child once with SIGTERM: a worker that also got the terminal's
    # SIGINT would take the SIGTERM as a second signal and force its stop.
    return subprocess.Popen(
        [sys.executable, str(MANAGE), *args],
        cwd=ROOT,
        env=env,
        start_new_session=True,
        stderr=stderr,
    )


class WorkerOutput:
    """Relays a worker's stderr to ours line by line and notices its start-up.

    The relay runs for the worker's whole life (a pipe nobody reads would block the worker
    once full); it tells :meth:`wait_started` when the worker logged ``event=worker_started``
    and when it last said anything. Holding :attr:`held` keeps the worker's lines back (in
    the pipe) while the demo prints a block of its own.
    """

    def __init__(self, worker: subprocess.Popen[bytes]) -> None:
        self.worker = worker
        self.started = threading.Event()
        self.held = threading.Lock()
        self.last_line = time.monotonic()
        self._thread = threading.Thread(target=self._relay, name="demo-worker-output", daemon=True)
        self._thread.start()

    def _relay(self) -> None:
        assert self.worker.stderr is not None
        for line in self.worker.stderr:
            with self.held:
                sys.stderr.buffer.write(line)
                sys.stderr.flush()
            self.last_line = time.monotonic()
            if b"event=worker_started" in line:
                self.started.set()

    def wait_started(self) -> None:
        """Return once the worker has started and its start-up lines are out.

        Raises if the worker exits first; gives up waiting (and says so) after
        ``STARTUP_TIMEOUT`` seconds, so the addresses are printed whatever the worker logs.
        """
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while not self.started.wait(0.1):
            if self.worker.poll() is not None:
                raise RuntimeError(f"the worker exited with code {self.worker.returncode}")
            if time.monotonic() > deadline:
                say("the worker has not reported its start yet")
                return
        settled_by = time.monotonic() + SETTLE_LIMIT
        while time.monotonic() < settled_by and time.monotonic() - self.last_line < SETTLE_PAUSE:
            time.sleep(0.05)


def start_server(port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """uvicorn serving example_project/asgi.py when installed (REST long-polls wait as
    coroutines there), else ``runserver``."""
    import importlib.util

    if importlib.util.find_spec("uvicorn") is None:
        return start(["runserver", "--noreload", f"127.0.0.1:{port}"], env)
    say("serving with uvicorn (example_project/asgi.py)")
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "example_project.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--lifespan",
            "off",
        ],
        cwd=ROOT,
        env=env,
        start_new_session=True,
    )


def wait_until_serving(url: str, server: subprocess.Popen[bytes]) -> tuple[int, str]:
    """Poll ``url`` until it answers; (status, body). Raises if the server dies first."""
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while True:
        if server.poll() is not None:
            raise RuntimeError(f"the web server exited with code {server.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return response.status, response.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode("utf-8", "replace")
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not answer within {STARTUP_TIMEOUT:.0f} s") from None
            time.sleep(0.2)


def stop_all(children: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM every child still running, then wait; kill those that do not stop in time."""
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT
    for child in children:
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def print_addresses(base: str, *, dead_letters: bool) -> None:
    """The block a user looks for: where the site is, how to log in, what the noise is."""
    say("ready:")
    say(f"admin:   {base}/admin/   login: {DEMO_USER} / {DEMO_PASSWORD}")
    if has_route("/admin/pgq_django/queue/dashboard/"):
        say(f"dashboard: {base}/admin/pgq_django/queue/dashboard/")
    if has_route("/v1/docs"):
        say(f"swagger: {base}/v1/docs")
    if has_route("/metrics"):
        say(f"metrics: {base}/metrics")
    if has_route("/sqs/"):
        python = os.path.relpath(sys.executable, ROOT)
        say(
            f"sqs:     {base}/sqs/   (boto3 endpoint_url; keys: {python} "
            f"example_project/manage.py pgq_credentials create {DEMO_USER})"
        )
    if dead_letters:
        say(DEAD_LETTER_NOTE)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check",
        action="store_true",
        default=os.environ.get("DEMO_CHECK") == "1",
        help="prepare and start everything, fetch the admin login page once, then exit",
    )
    options = parser.parse_args(argv)
    port = int(os.environ.get("PORT", "8000"))

    sys.path.insert(0, str(ROOT))
    os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS
    signal.signal(signal.SIGTERM, _raise_stop)
    signal.signal(signal.SIGINT, _raise_stop)

    children: list[subprocess.Popen[bytes]] = []
    try:
        os.environ["DATABASE_URL"] = database_url()
        prepare_database()
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}

        base = f"http://127.0.0.1:{port}"
        server = start_server(port, env)
        children.append(server)
        worker_output = None
        if has_command("pgq_worker"):
            say("starting a worker (manage.py pgq_worker)")
            worker = start(["pgq_worker"], env, stderr=subprocess.PIPE)
            children.append(worker)
            worker_output = WorkerOutput(worker)
        else:
            say("no pgq_worker command yet: messages wait in their queues")

        status, body = wait_until_serving(f"{base}/admin/login/", server)
        if worker_output is not None:
            worker_output.wait_started()
        with worker_output.held if worker_output is not None else contextlib.nullcontext():
            print_addresses(base, dead_letters=worker_output is not None)
        if options.check:
            if status != 200 or "csrfmiddlewaretoken" not in body:
                say(f"check failed: /admin/login/ answered HTTP {status}")
                return 1
            # Its stylesheet too: uvicorn serves static files only through WhiteNoise.
            css, _ = wait_until_serving(f"{base}/static/admin/css/base.css", server)
            if css != 200:
                say(f"check failed: /static/admin/css/base.css answered HTTP {css}")
                return 1
            say("check passed: the admin login page and its stylesheet are served")
            return 0
        say("press Ctrl-C to stop")
        while all(child.poll() is None for child in children):
            time.sleep(0.5)
        say("a child process exited; stopping")
        return 1
    except Stop as stop:
        say(f"{stop}: stopping")
        return 0
    except RuntimeError as exc:  # the site did not come up (port taken, a broken setting)
        say(f"failed: {exc}")
        return 1
    finally:
        # Ignore further signals while cleaning up, so a second Ctrl-C cannot leave the
        # children or the embedded server behind half-stopped.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        stop_all(children)


if __name__ == "__main__":
    sys.exit(main())
