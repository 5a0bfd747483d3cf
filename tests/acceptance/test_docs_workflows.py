"""docs/workflows.md runs as written: each Python block in page order, in one namespace,
against the test database, as a reader would paste them into ``manage.py shell`` (with the
handler modules the page shows registered, and a worker serving them where a block needs
one to answer).

Nothing is created for the page: a block that uses a queue it never made raises
``QueueNotFound`` here as it would for the reader.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import pgq_django as pgq
from pgq_django.worker import registry
from pgq_django.worker.loop import Worker
from tests.acceptance.test_docs import (
    _is_file_block,
    _namespace,
    _python_blocks,
    _restore_handler_registry,
)
from tests.conftest import ROOT

pytestmark = pytest.mark.docs

__all__ = ["_restore_handler_registry"]  # autouse: the page's handlers do not leak

PAGE = ROOT / "docs" / "workflows.md"


@contextmanager
def _worker_for(queues: list[str]) -> Iterator[None]:
    """A worker in this process serving ``queues``, as ``pgq_worker --queue …`` would."""
    worker = Worker(queues, lead=False)
    worker.start()
    try:
        yield
    finally:
        worker.stop()
        worker.shutdown()


@pytest.mark.django_db(transaction=True)
def test_workflow_samples_run_in_order_as_written() -> None:
    namespace = _namespace()
    before = set(registry.registered())
    ran = 0
    for number, block in enumerate(_python_blocks(PAGE), 1):
        code = compile(block, f"workflows.md:block{number}", "exec")
        if _is_file_block(block):
            if "@pgq.handler" in block:
                exec(code, {"__name__": "docs_handlers"})
            continue
        if "pgq.request(" in block:
            with _worker_for(sorted(set(registry.registered()) - before)):
                exec(code, namespace)
        else:
            exec(code, namespace)
        ran += 1
    assert ran >= 5

    # The chain: extract is ready, what waits for it is held.
    [ready] = pgq.read("extract")
    assert ready.msg_id == namespace["extract"]
    assert pgq.read("transform") == [] and pgq.read("load") == []
    # The group: its hundred members wait, and so does the follow-up.
    status: Any = namespace["status"]
    assert (status.status, status.size, status.pending) == ("pending", 100, 100)
    assert pgq.read_by_id("albums", status.then_msg_id) is not None
    # The request got the handler's answer.
    assert namespace["reply"] == {"cart": 1234, "total": 42.5}
    # The schedules and limits blocks did what their comments say.
    assert [s.name for s in pgq.list_schedules()] == ["nightly-report"]
    emails = {q.name: q for q in pgq.list_queues()}["emails"]
    assert (emails.rate_limit, emails.concurrency_limit) == (None, 3)
