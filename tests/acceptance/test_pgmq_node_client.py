"""A PGMQ client in another language on the PGMQ SQL interface: pgmq-js (Node.js, from npm).

pgmq-js calls PGMQ's functions with untyped parameters (``pgmq.read($1, $2, $3)``), so it
also checks that no extra overload makes one of its calls ambiguous. It is installed from
the npm registry into a temporary directory; the test skips, saying so, where Node.js or npm
is not installed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

import pgq_django as pgq
from pgq_django.store import tallies
from tests.pgmq_support import pgmq_sql, unique_queue

__all__ = ["pgmq_sql"]  # the fixture, imported for the test below

PGMQ_JS = "pgmq-js@1.3.1"

pytestmark = pytest.mark.skipif(
    not (shutil.which("node") and shutil.which("npm")),
    reason="Node.js and npm are needed to run pgmq-js",
)

# Sends three messages, reads one, deletes it, archives another, and prints what it saw; then
# reads the message the Python side sent before it started.
SCRIPT = """
const { Pgmq } = require("pgmq-js");
const [queue, settings] = [process.argv[2], JSON.parse(process.argv[3])];
(async () => {
  const pgmq = await Pgmq.new(settings, { skipExtensionCreation: true });
  const out = {};
  out.fromPython = await pgmq.msg.read(queue, 30);
  out.sent = await pgmq.msg.sendBatch(queue, [{ n: 1 }, { n: 2 }]);
  out.one = await pgmq.msg.send(queue, { n: 3 }, 0);
  const read = await pgmq.msg.readBatch(queue, 30, 1);
  out.read = read.map((m) => [m.msgId, m.readCount, m.message]);
  out.deleted = await pgmq.msg.delete(queue, read[0].msgId);
  out.archived = await pgmq.msg.archive(queue, out.sent[1]);
  out.metrics = await pgmq.queue.getMetrics(queue);
  out.queues = (await pgmq.queue.list()).map((q) => q.name).filter((n) => n === queue);
  console.log(JSON.stringify(out));
  await pgmq.close();
})().catch((e) => { console.error(e); process.exit(1); });
"""


@pytest.fixture(scope="module")
def pgmq_js(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory where ``require("pgmq-js")`` works."""
    where = tmp_path_factory.mktemp("pgmq-js")
    subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--silent", PGMQ_JS],
        cwd=where,
        check=True,
        timeout=300,
    )
    (where / "client.js").write_text(SCRIPT)
    return where


def _node_settings() -> dict[str, Any]:
    params = connection.settings_dict
    return {
        "host": params.get("HOST") or "localhost",
        "port": int(params.get("PORT") or 5432),
        "database": params["NAME"],
        "user": params.get("USER") or "postgres",
        "password": params.get("PASSWORD") or "",
        "ssl": False,
    }


def test_pgmq_js_works_on_our_queues_both_ways(pgmq_sql: str, pgmq_js: Path) -> None:
    name = unique_queue("js")
    pgq.create_queue(name)
    from_python = pgq.send(name, {"from": "python"})
    tallies.flush()  # the count of that autocommit send, which the process writes later
    run = subprocess.run(
        ["node", "client.js", name, json.dumps(_node_settings())],
        cwd=pgmq_js,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["fromPython"]["msgId"] == from_python
    assert out["fromPython"]["message"] == {"from": "python"}
    first, _archived = out["sent"]
    assert out["read"] == [[first, 1, {"n": 1}]]
    assert out["deleted"] is True and out["archived"] is True
    assert out["metrics"]["queueName"] == name and out["metrics"]["totalMessages"] == 4
    assert out["queues"] == [name]
    # What pgmq-js left is what pgq sees: the message it sent last, and the one from Python
    # (leased by pgmq-js, still invisible).
    assert [m.message for m in pgq.read(name, qty=10)] == [{"n": 3}]
    assert pgq.metrics(name).queue_length == 2
