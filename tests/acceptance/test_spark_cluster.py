"""The pipeline on a real Spark cluster: a standalone master and worker from PySpark's own
distribution, on loopback, running the export and the batch read."""

from __future__ import annotations

import io
import json
import os
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Child
from tests.spark_support import sql_rows

pytestmark = [pytest.mark.spark, pytest.mark.django_db(transaction=True)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _master_state(port: int) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/", timeout=5) as answer:
            return dict(json.load(answer))
    except OSError:
        return {}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``spark://127.0.0.1:PORT`` of a master with one single-core worker."""
    import pyspark

    home = Path(pyspark.__file__).parent
    workdir = tmp_path_factory.mktemp("spark-cluster")
    env = dict(os.environ, SPARK_HOME=str(home), SPARK_LOCAL_IP="127.0.0.1")
    env.setdefault("SPARK_LOG_DIR", str(workdir))
    port, ui, worker_ui = _free_port(), _free_port(), _free_port()
    spark_class = str(home / "bin" / "spark-class")
    master = Child(
        [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
         "--port", str(port), "--webui-port", str(ui)],
        workdir=workdir, env=env, start_new_session=True,
    )  # fmt: skip
    url = f"spark://127.0.0.1:{port}"
    worker = Child(
        [spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
         "--cores", "1", "--memory", "1g", "--webui-port", str(worker_ui),
         "--work-dir", str(workdir / "work")],
        workdir=workdir, env=env, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while _master_state(ui).get("aliveworkers", 0) < 1:
            assert master.poll() is None and worker.poll() is None, "the cluster did not start"
            assert time.monotonic() < deadline, "no worker registered with the master"
            time.sleep(0.5)
        yield url
    finally:
        for proc in (worker, master):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except Exception:
                    proc.kill()


@pytest.fixture(scope="module")
def spark(cluster: str, django_db_setup: Any, django_db_blocker: Any) -> Iterator[Any]:
    from pgq_django import spark as pgq_spark

    with django_db_blocker.unblock():
        session = pgq_spark.session(
            cluster,
            app_name="pgq_django-cluster-test",
            conf={
                "spark.ui.enabled": "false",
                "spark.driver.host": "127.0.0.1",
                "spark.executor.memory": "512m",
                "spark.sql.shuffle.partitions": "2",
            },
            dsn=pgq_spark.default_dsn(),
        )
        session.sparkContext.setLogLevel("ERROR")
        try:
            yield session
        finally:
            session.stop()


def test_export_and_batch_read_run_on_a_standalone_cluster(
    spark: Any, make_queue: Any, tmp_path: Path
) -> None:
    from datetime import UTC, datetime, timedelta

    import pgq_django as pgq
    from pgq_django.spark import jobs
    from pgq_django.spark.runtime import JobRunner

    assert spark.sparkContext.master.startswith("spark://127.0.0.1:")
    q = make_queue(archive_on_ack=True)
    ids = pgq.send_batch(q.name, [{"n": i} for i in range(50)])
    pgq.delete(q.name, ids[:40])
    frame = spark.read.format("pgq").option("table", "archive").option("numPartitions", "3").load()
    assert sorted(r.msg_id for r in frame.select("msg_id").collect()) == ids[:40]
    live = spark.read.format("pgq").option("table", "messages").load()
    assert sorted(r.msg_id for r in live.select("msg_id").collect()) == ids[40:]
    # The tasks ran on the worker's executor, not in the driver.
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()
    assert executors >= 2  # the driver's block manager plus the worker's executor

    until = datetime.now(UTC) + timedelta(seconds=1)
    result = jobs.export(
        spark, JobRunner(spark, io.StringIO()), since=None, until=until, to=str(tmp_path / "x")
    )
    assert result.rows == 40 == sql_rows("SELECT count(*) FROM pgq_archived_message")[0][0]
    exported = spark.read.parquet(str(tmp_path / "x"))
    assert sorted(r.msg_id for r in exported.select("msg_id").collect()) == ids[:40]
