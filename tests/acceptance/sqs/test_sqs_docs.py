"""The boto3 samples of README.md and docs/sqs.md work as written, against the live endpoint,
with keys made the documented way (``pgq_credentials create``, exported to the environment)."""

from __future__ import annotations

import io
import re

import boto3
import pytest
from django.core.management import call_command

import pgq_django as pgq
from tests.conftest import ROOT, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.docs]

_SAMPLE = re.compile(r"^```python\n(# sqs_example\.py.*?)^```", re.MULTILINE | re.DOTALL)
DOCUMENTED_ENDPOINT = "http://127.0.0.1:8000/sqs/"


@pytest.mark.parametrize("page", ["README.md", "docs/sqs.md"])
def test_the_boto3_sample_runs_as_written(page, sqs_endpoint, user, monkeypatch, capsys):
    [sample] = _SAMPLE.findall((ROOT / page).read_text())
    assert DOCUMENTED_ENDPOINT in sample
    out = io.StringIO()
    call_command("pgq_credentials", "create", user.get_username(), stdout=out, stderr=io.StringIO())
    for line in out.getvalue().splitlines():  # what `export $(… create ada)` does
        name, value = line.split("=", 1)
        monkeypatch.setenv(name, value)
    # boto3's default session keeps the first credentials it found; start each run afresh.
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    exec(compile(sample.replace(DOCUMENTED_ENDPOINT, sqs_endpoint), page, "exec"), {})
    assert capsys.readouterr().out == "Hello from boto3\n"
    assert pgq.metrics("greetings").queue_length == 0
    # The endpoint's process writes its counts of autocommit sends within a second
    # (pgq_django.store.tallies); once written, the total is exactly the one message sent.
    wait_until(lambda: pgq.metrics("greetings").total_messages >= 1, what="the send's count")
    assert pgq.metrics("greetings").total_messages == 1
