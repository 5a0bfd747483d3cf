"""A failover, for real: the primary dies under load and its synchronous standby is promoted.

The test makes a primary and a synchronous streaming standby of its own
(:mod:`tests.replication`; the suite's shared server is never touched), and points every
process at both through one multi-host ``DATABASE_URL`` with
``target_session_attrs=read-write``, as a production deployment would. A ``pgq_worker``, a
sending process and a server of the REST API and the SQS endpoint (uvicorn) run on it. Then
the primary is killed with SIGKILL (every one of its processes at once: no shutdown, no
goodbye on any connection), and after ``SWITCH_SECONDS`` the standby is promoted. Nothing
is restarted.

Every send that returned before, during or after the switch must be there afterwards, and
handled exactly once: the sender gives each message a key of its own (``dedup_id``) and
sends it again under the same key when a send fails with ``ConnectionLost`` (outcome
unknown) or ``DatabaseUnavailable``. A message whose handler finished while the primary was
gone comes back once its lease runs out, not before. The worker's leader is elected again
on the new primary, and the REST API and the SQS endpoint answer again. The time from the
promotion to the first send that returned, and to the first message the worker handled, is
printed.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
import requests
from botocore.config import Config
from botocore.exceptions import ClientError

from pgq_django.testing import start_asgi_server
from tests.conftest import ROOT, Child, run_django, subprocess_env, wait_until
from tests.failover_handlers import QUEUE
from tests.replication import ReplicatedPair

pytestmark = [pytest.mark.slow, pytest.mark.install]

#: How long the application goes without a primary: the time a failover manager (Patroni,
#: a cloud database's own) takes to notice the death and promote the standby.
SWITCH_SECONDS = 2.0
#: The held message's lease: it must come back after it, not before.
VISIBILITY_TIMEOUT = 6
THREADS = 3
#: The worker's fallback poll when no NOTIFY wakes it.
POLL_SECONDS = 60.0
DATABASE = "failover"
PASSWORD = "failover-ops-password"

SENDER = """
import sys
import django
django.setup()
from tests.failover_handlers import send_until_stopped
send_until_stopped(sys.argv[1])
"""

SQS_QUEUE = "failover_sqs"
SET_UP = f"""
import pgq_django as pgq
from django.contrib.auth.models import User
from pgq_django.models import AccessKey
pgq.create_queue({QUEUE!r}, visibility_timeout={VISIBILITY_TIMEOUT}, archive_on_ack=True)
pgq.create_queue({SQS_QUEUE!r})
ops = User.objects.create_superuser("ops", password={PASSWORD!r})
key, secret = AccessKey.objects.create_key(ops)
print(key.key_id, secret)
"""

READ_METRICS = f"import pgq_django as pgq; print(pgq.metrics({QUEUE!r}).total_messages)"


@dataclass
class Site:
    """The pair, migrated, with the test's queues and a user of the REST and SQS servers."""

    pair: ReplicatedPair
    sqs_key: tuple[str, str]  # access key id, secret


@pytest.fixture
def site() -> Iterator[Site]:
    with ReplicatedPair() as made:
        made.primary.query(f"CREATE DATABASE {DATABASE}")
        done = run_django("migrate", "--no-input", database_url=made.url(DATABASE))
        assert done.returncode == 0, done.stdout + done.stderr
        done = run_django("shell", "-c", SET_UP, database_url=made.url(DATABASE))
        assert done.returncode == 0, done.stdout + done.stderr
        key_id, secret = done.stdout.split()[-2:]
        yield Site(made, (key_id, secret))


def _env(url: str) -> dict[str, str]:
    env = {k: v for k, v in subprocess_env().items() if k != "PGQ_USE_TEST_DB"}
    env["DATABASE_URL"] = url
    return env


def _lines(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def _times(path: Path) -> list[float]:
    """The wall-clock column (the last) of a file of lines."""
    return [float(fields[-1]) for fields in _lines(path)]


def _first_after(times: list[float], moment: float) -> float | None:
    later = [t for t in times if t > moment]
    return min(later) if later else None


def _rest_send(base: str, body: dict[str, str], key: str) -> requests.Response:
    return requests.post(
        f"{base}/v1/queues/{QUEUE}/messages",
        json={"body": body, "dedup_id": key},
        auth=("ops", PASSWORD),
        timeout=30,
    )


def _rest_send_until_created(base: str, body: dict[str, str], key: str) -> int:
    """Send through REST under ``key`` until it answers 201 (503 meanwhile); the msg_id."""
    deadline = time.monotonic() + 60
    while True:
        answer = _rest_send(base, body, key)
        if answer.status_code == 201:
            return int(answer.json()["id"])
        assert answer.status_code == 503, answer.text
        assert time.monotonic() < deadline, f"REST never answered 201: {answer.text}"
        time.sleep(0.1)


def _sqs_client(base: str, key: tuple[str, str]) -> Any:
    """boto3 on the server's SQS endpoint, one attempt per call: the test retries itself."""
    return boto3.client(
        "sqs",
        endpoint_url=f"{base}/sqs/",
        region_name="eu-west-1",
        aws_access_key_id=key[0],
        aws_secret_access_key=key[1],
        config=Config(retries={"total_max_attempts": 1}, read_timeout=30),
    )


def _sqs_send_until_sent(sqs: Any, queue_url: str, body: str) -> str:
    """SendMessage until it works (ServiceUnavailable meanwhile); the message id."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return str(sqs.send_message(QueueUrl=queue_url, MessageBody=body)["MessageId"])
        except ClientError as exc:
            assert exc.response["Error"]["Code"] == "ServiceUnavailable", exc.response
            assert time.monotonic() < deadline, f"SQS never answered: {exc.response}"
            time.sleep(0.1)


def test_failover_under_load_loses_no_acknowledged_send(site: Site, tmp_path: Path) -> None:
    pair = site.pair
    url = pair.url(DATABASE)
    worker = Child(
        [sys.executable, "-m", "django", "pgq_worker", "--queue", QUEUE,
         "--concurrency", str(THREADS), "--import", "tests.failover_handlers",
         "--poll-interval", str(POLL_SECONDS)],
        workdir=tmp_path, cwd=ROOT, env=_env(url),
    )  # fmt: skip
    sender = Child([sys.executable, "-c", SENDER, str(tmp_path)], workdir=tmp_path, cwd=ROOT,
                   env=_env(url))  # fmt: skip
    rest = start_asgi_server(
        "tests.asgi:application", env=_env(url), cwd=ROOT, ready_path="/v1/ready"
    )
    try:
        wait_until(lambda: worker.logged("event=leader_elected"), what="the worker's leader")
        wait_until(lambda: (tmp_path / "started").exists(), what="the held handler to start")
        wait_until(lambda: len(_lines(tmp_path / "handled")) >= 100, what="work under way")
        rest_before = _rest_send(rest.url, {"workdir": str(tmp_path)}, "rest-before")
        assert rest_before.status_code == 201, rest_before.text
        sqs = _sqs_client(rest.url, site.sqs_key)
        sqs_queue = sqs.get_queue_url(QueueName=SQS_QUEUE)["QueueUrl"]
        sqs.send_message(QueueUrl=sqs_queue, MessageBody="before")
        # The standby serves what only reads (docs/operations.md, read replicas).
        on_replica = run_django(
            "shell", "-c", READ_METRICS, database_url=pair.standby_url(DATABASE)
        )
        assert on_replica.returncode == 0, on_replica.stdout + on_replica.stderr
        assert int(on_replica.stdout.split()[-1]) > 0, on_replica.stdout

        worker_from, sender_from = (len(p.err_path.read_text()) for p in (worker, sender))
        crashed_at = time.time()
        pair.crash_primary()
        # The held handler finishes now, while its acknowledgement cannot commit anywhere.
        (tmp_path / "go").write_text("go")
        wait_until(lambda: worker.logged("event=ack_failed"), what="the failed ack")
        # The switch itself: its length is the scenario, not a wait for something to happen.
        time.sleep(max(0.0, crashed_at + SWITCH_SECONDS - time.time()))
        pair.promote()
        promoted_at = time.time()

        rest_id = _rest_send_until_created(rest.url, {"workdir": str(tmp_path)}, "rest-after")
        # The same server's SQS endpoint: a send, then both messages received and deleted.
        _sqs_send_until_sent(sqs, sqs_queue, "after")
        received = sqs.receive_message(
            QueueUrl=sqs_queue, MaxNumberOfMessages=10, WaitTimeSeconds=5
        ).get("Messages", [])
        for message in received:
            sqs.delete_message(QueueUrl=sqs_queue, ReceiptHandle=message["ReceiptHandle"])
        sent_then = len(_lines(tmp_path / "sent"))
        wait_until(lambda: len(_lines(tmp_path / "sent")) > sent_then + 200, what="more sends")
        # The sender keeps the worker busy until the held message's lease has run out.
        wait_until(lambda: len(_lines(tmp_path / "runs")) >= 2, what="the held message again")
        (tmp_path / "stop").write_text("stop")
        out, _err = sender.communicate(timeout=180)
        report = json.loads(out.splitlines()[-1])
        wait_until(
            lambda: (
                pair.standby.query("SELECT count(*) FROM pgq_message", dbname=DATABASE) == [(0,)]
            ),
            timeout=120,
            what="the worker to handle every message",
        )
        # Idle now, the worker waits for a NOTIFY on its LISTEN connection, polling only
        # every POLL_SECONDS: a message handled well before that was announced on the
        # connection its LISTEN hub made to the new primary.
        handled_then = len(_lines(tmp_path / "handled"))
        wake_sent_at = time.time()
        wake = _rest_send(rest.url, {"workdir": str(tmp_path)}, "rest-wake")
        assert wake.status_code == 201, wake.text
        wait_until(
            lambda: len(_lines(tmp_path / "handled")) > handled_then,
            timeout=POLL_SECONDS,
            what="the worker to handle the message sent while it was idle",
        )
        woken_after = _times(tmp_path / "handled")[-1] - wake_sent_at
        ready = requests.get(f"{rest.url}/v1/ready", timeout=30)
        worker_alive = worker.poll() is None
    finally:
        rest.stop()
        for child in (worker, sender):
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
                try:
                    child.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    child.kill()

    worker_log = worker.err_path.read_text()
    sender_log = sender.err_path.read_text()
    assert report["other"] == [], (report, sender_log)
    assert worker_alive, worker_log
    assert sorted(m["Body"] for m in received) == ["after", "before"], received
    assert ready.status_code == 200, ready.text

    # Every send that returned is there, handled (archived on ack) exactly once, under
    # the id its send answered; a message's second send under its key found the first.
    sent = {key: int(msg_id) for key, msg_id, _at in _lines(tmp_path / "sent")}
    assert len(sent) == len(_lines(tmp_path / "sent")), "a key was answered twice"
    archived = pair.standby.query(
        "SELECT dedup_id, msg_id, outcome FROM pgq_archived_message", dbname=DATABASE
    )
    by_key: dict[str | None, list[int]] = {}
    for key, msg_id, outcome in archived:
        assert outcome == "acked", (key, msg_id, outcome)
        by_key.setdefault(key, []).append(msg_id)
    for key, msg_id in sent.items():
        assert by_key.get(key) == [msg_id], (key, msg_id, by_key.get(key))
    assert by_key.get("rest-after") == [rest_id]
    assert by_key.get("rest-wake") == [int(wake.json()["id"])]
    assert len(by_key.get("rest-before", [])) == 1
    unkeyed = by_key.get(None, [])
    assert unkeyed == [report["held"]], unkeyed
    assert len(archived) == len(sent) + 4  # the held message and the three REST sends
    assert report["sends"] == len(sent)
    handled = [int(fields[0]) for fields in _lines(tmp_path / "handled")]
    assert len(set(handled)) == len(archived)

    # The held message ran during the switch (its ack failed, saying so) and once more
    # after its lease ran out on the new primary, not before.
    runs = _lines(tmp_path / "runs")
    assert [fields[0] for fields in runs] == ["1", "2"], runs
    first_lease_ends, second_run_at = float(runs[0][2]), float(runs[1][1])
    assert second_run_at >= first_lease_ends, runs
    assert f"msg_id={report['held']} " in worker_log
    assert "event=message_failed" not in worker_log, worker_log
    # The leader was elected again, on the new primary, by the same worker.
    assert worker_log.count("event=leader_elected") >= 2, worker_log
    assert woken_after < POLL_SECONDS / 2, woken_after

    # Quietly: no traceback, one line when the primary went, one when a primary was back,
    # and one per message whose handler finished while its ack could not commit.
    for log, start in ((worker_log, worker_from), (sender_log, sender_from)):
        switch = log[start:].splitlines()
        ended = [i for i, line in enumerate(switch) if "event=database_back" in line]
        assert ended, log[start:]
        switch = switch[: ended[0] + 1]
        assert not any("Traceback" in line for line in switch), log[start:]
        acks = [line for line in switch if "event=ack_failed" in line]
        assert len(acks) <= THREADS and len(switch) - len(acks) <= 4, log[start:]
        assert sum("event=database_lost" in line for line in switch) == 1, log[start:]
    assert "Traceback" not in worker_log + sender_log, worker_log + sender_log
    # The new leader's duties ran on fresh connections, not on ones of the dead primary.
    assert "event=maintenance_failed" not in worker_log, worker_log
    assert "event=limits_check_failed" not in worker_log, worker_log

    resumed_send = _first_after(_times(tmp_path / "sent"), promoted_at)
    resumed_work = _first_after(_times(tmp_path / "handled"), promoted_at)
    assert resumed_send is not None and resumed_work is not None
    print(
        f"\nfailover: primary killed, standby promoted {promoted_at - crashed_at:.1f} s later; "
        f"first send returned {resumed_send - promoted_at:.2f} s after the promotion, "
        f"first message handled {resumed_work - promoted_at:.2f} s after it; a message sent "
        f"to the idle worker handled in {woken_after:.2f} s; "
        f"{len(sent)} keyed sends, {report['retried_keys']} sent again under their key "
        f"({report['lost']} ConnectionLost, {report['unavailable']} DatabaseUnavailable)"
    )
