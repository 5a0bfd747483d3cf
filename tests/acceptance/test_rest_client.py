"""A Python client generated from the live /v1/schema works against the live server.

openapi-python-client (a maintained generator on PyPI, in the dev extra) writes a typed
client package from the server's own OpenAPI 3.0 document; the test imports it and runs the
psqlqueue flow through it with DRF token authentication: create a queue, send one and a
batch, consume, ack with receipts, read stats, and get a typed error for a missing queue.
Nothing is hand-written on the client side, so a schema that misdescribes a request or a
response fails here.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Iterator
from http import HTTPStatus
from pathlib import Path
from typing import Any

import pytest
import requests

import pgq_django as pgq
from tests.http_server import PASSWORD

PACKAGE = "pgq_generated_client"


@pytest.fixture
def generated(live_url: str, tmp_path: Path, make_user: Any) -> Iterator[Any]:
    """The generated client package, imported from a temporary directory."""
    reader = make_user(is_staff=True)  # the schema is served to logged-in users
    schema = requests.get(
        f"{live_url}/v1/schema",
        headers={"Accept": "application/json"},
        auth=(reader.get_username(), PASSWORD),
        timeout=60,
    )
    assert schema.status_code == 200, schema.text
    assert schema.json()["openapi"].startswith("3.0")
    (tmp_path / "schema.json").write_bytes(schema.content)
    bin_dir = Path(sys.executable).parent
    generator = bin_dir / "openapi-python-client"
    # The generator formats its output with ruff (a dev dependency too) found on PATH.
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(
        [
            str(generator),
            "generate",
            "--path",
            str(tmp_path / "schema.json"),
            "--output-path",
            str(tmp_path / PACKAGE),
            "--meta",
            "none",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Warning" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
            del sys.modules[name]


def test_a_client_generated_from_the_schema_runs_the_queue_flow(generated, make_user, live_url):
    from rest_framework.authtoken.models import Token

    api = importlib.import_module(f"{PACKAGE}.api.queues")
    models = importlib.import_module(f"{PACKAGE}.models")
    for name in [
        "queues_create",
        "messages_send",
        "messages_consume",
        "messages_ack_batch",
        "messages_ack",
        "queues_stats",
    ]:
        importlib.import_module(f"{PACKAGE}.api.queues.{name}")

    user = make_user(is_staff=True, is_superuser=True)
    token = Token.objects.create(user=user)
    client = generated.AuthenticatedClient(base_url=live_url, token=token.key, prefix="Token")
    with client:
        created = api.queues_create.sync(
            client=client, body=models.QueueCreateInRequest(id="q_gen", ack_deadline_seconds=30)
        )
        assert isinstance(created, models.QueueOut)
        assert (created.id, created.ack_deadline_seconds) == ("q_gen", 30)

        one = api.messages_send.sync(
            "q_gen",
            client=client,
            body=models.MessageInRequest(body={"order": 1}, label="first", priority=0),
        )
        assert isinstance(one, models.SentOut) and isinstance(one.id, int)
        batch = api.messages_send.sync(
            "q_gen",
            client=client,
            body=models.BatchInRequest(messages=[models.MessageInRequest(body=i) for i in (2, 3)]),
        )
        assert isinstance(batch, models.SentOut) and len(batch.ids) == 2

        consumed = api.messages_consume.sync("q_gen", client=client, limit=10)
        assert isinstance(consumed, models.ConsumeOut)
        assert sorted(str(m.body) for m in consumed.data) == ["2", "3", "{'order': 1}"]
        first = next(m for m in consumed.data if m.label == "first")
        assert first.id == one.id and first.delivery_attempts == 1
        assert first.receipt == f"{one.id}:1"

        single = api.messages_ack.sync_detailed("q_gen", first.receipt, client=client)
        assert single.status_code == HTTPStatus.NO_CONTENT
        rest = [m.receipt for m in consumed.data if m.id != one.id]
        acked = api.messages_ack_batch.sync(
            "q_gen", client=client, body=models.AckBatchInRequest(ids=rest)
        )
        assert isinstance(acked, models.AckedOut) and sorted(acked.acked) == sorted(batch.ids)

        stats = api.queues_stats.sync("q_gen", client=client)
        assert isinstance(stats, models.StatsOut) and stats.queue_length == 0

        missing = api.messages_consume.sync_detailed("q_nope", client=client)
        assert missing.status_code == HTTPStatus.NOT_FOUND
        assert isinstance(missing.parsed, models.ErrorOut)
        assert missing.parsed.error.code == "queue_not_found"
    after = pgq.metrics("q_gen")
    assert (after.queue_length, after.in_flight, after.total_messages) == (0, 0, 3)
