"""How much the worker says at each ``-v``: a summary per interval at 2, each message at 3.

A busy worker at ``-v 2`` used to write a line for every message it acknowledged; it now
writes one ``worker_summary`` line per interval in which it handled messages, and the lines
about single messages (``pgq_django.worker.messages``) need ``-v 3``. The command runs in
this process (``--once``), so its log records reach ``caplog``.
"""

from __future__ import annotations

import io
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command

import pgq_django as pgq
from pgq_django.models import Queue
from pgq_django.worker import registry
from pgq_django.worker.loop import Worker
from tests.conftest import wait_until

LOGGERS = ("pgq_django.worker", "pgq_django.worker.messages")


@pytest.fixture
def worker_loggers() -> Iterator[None]:
    """The command sets these loggers' levels for the process: put them back afterwards."""
    before = {name: logging.getLogger(name).level for name in LOGGERS}
    yield
    for name, level in before.items():
        logging.getLogger(name).setLevel(level)


@pytest.fixture
def handled_queue(transactional_db: Any) -> Iterator[Queue]:
    queue = pgq.create_queue("verbosity_q")
    registry.handler(queue.name)(_handle)
    yield queue
    registry.unregister(queue.name)


def _handle(message: Any) -> None:
    """Does nothing: the test is about what the worker logs around it."""


def _lines(caplog: pytest.LogCaptureFixture, event: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(f"event={event}")]


@pytest.mark.parametrize(
    ("verbosity", "acks", "summaries"),
    [(1, 0, 0), (2, 0, 1), (3, 5, 1)],
    ids=["-v1", "-v2", "-v3"],
)
def test_v2_logs_a_summary_instead_of_each_message_and_v3_logs_each_message(
    handled_queue: Queue,
    caplog: pytest.LogCaptureFixture,
    worker_loggers: None,
    verbosity: int,
    acks: int,
    summaries: int,
) -> None:
    pgq.send_batch(handled_queue, [{"n": n} for n in range(5)])
    out = io.StringIO()
    call_command(
        "pgq_worker", "--queue", handled_queue.name, "--once", verbosity=verbosity, stdout=out
    )
    assert out.getvalue().strip() == "processed=5 failed=0"
    assert len(_lines(caplog, "message_acked")) == acks
    summary = _lines(caplog, "worker_summary")
    assert len(summary) == summaries
    if summaries:
        assert "processed=5 failed=0" in summary[0]
    assert len(_lines(caplog, "worker_stopped")) == (1 if verbosity >= 1 else 0)


def test_a_running_worker_summarizes_each_busy_interval_and_stays_quiet_when_idle(
    handled_queue: Queue, caplog: pytest.LogCaptureFixture, worker_loggers: None
) -> None:
    caplog.set_level(logging.DEBUG, logger="pgq_django.worker")
    logging.getLogger("pgq_django.worker.messages").setLevel(logging.INFO)  # as -v 2 sets it
    worker = Worker(
        handlers=registry.resolve([handled_queue.name]),
        summary_interval=0.2,
        poll_interval=0.05,
        listen=False,
        lead=False,
    )
    runner = threading.Thread(target=worker.run)
    runner.start()
    try:
        pgq.send_batch(handled_queue, [{"n": n} for n in range(3)])
        wait_until(lambda: _summarized(caplog) == 3, what="summaries of the first three")
        pgq.send_batch(handled_queue, [{"n": n} for n in range(2)])
        wait_until(lambda: _summarized(caplog) == 5, what="summaries of the next two")
    finally:
        worker.stop()
        runner.join(30)
    assert not runner.is_alive()
    # At least one line per burst (the second was sent after the first was summarized), none
    # for an interval without messages, the stop's included; never a line per message.
    counts = [_processed(line) for line in _lines(caplog, "worker_summary")]
    assert len(counts) >= 2 and all(count > 0 for count in counts) and sum(counts) == 5
    assert _lines(caplog, "message_acked") == []


def _processed(summary: str) -> int:
    fields = dict(field.split("=", 1) for field in summary.split())
    assert fields["failed"] == "0", summary
    return int(fields["processed"])


def _summarized(caplog: pytest.LogCaptureFixture) -> int:
    return sum(_processed(line) for line in _lines(caplog, "worker_summary"))
