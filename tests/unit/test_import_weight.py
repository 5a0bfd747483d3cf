"""What a process that never serves REST imports: the queue API, the models and the worker
bring in neither DRF nor the libraries DRF pulls in (YAML, Markdown, Pygments, requests),
nor the optional pieces' libraries: Prometheus's client (the /metrics view) and Spark's
(PySpark, Arrow, Matplotlib), which load only when those pieces are used."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT

SCRIPT = """
import json, sys
import django
from django.conf import settings
settings.configure(
    INSTALLED_APPS=["django.contrib.auth", "django.contrib.contenttypes", "pgq_django"],
    DATABASES={"default": {"ENGINE": "django.db.backends.postgresql", "NAME": "unused"}},
    USE_TZ=True,
)
django.setup()
import pgq_django as pgq
import pgq_django.models, pgq_django.api.messages, pgq_django.worker.loop
pgq.send, pgq.read, pgq.metrics
heavy = (
    "rest_framework", "drf_spectacular", "yaml", "markdown", "pygments", "requests",
    "prometheus_client", "pyspark", "pyarrow", "matplotlib",
)
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in heavy)))
"""


def test_the_queue_api_and_the_worker_import_no_rest_framework() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
