"""pgq_django.testing's helpers: DATABASE_URL over the embedded server, and drain().

The embedded server's own life (users, signals, the reaper, the stop command) is tested in
test_embedded.py.
"""

from __future__ import annotations

import pytest

from pgq_django.testing import dsn_to_django


def test_database_url_wins_over_the_embedded_server(monkeypatch, tmp_path):
    from pgq_django.testing import database_settings

    monkeypatch.setenv(
        "DATABASE_URL", "postgresql://app:s3cret@db.example:6543/shop?sslmode=require"
    )
    assert database_settings(tmp_path / "never-created") == {
        **dsn_to_django("host=db.example port=6543 user=app password=s3cret dbname=shop"),
        "OPTIONS": {"sslmode": "require"},
    }
    assert not (tmp_path / "never-created").exists()


@pytest.mark.django_db
def test_drain_runs_handlers_inside_the_callers_uncommitted_transaction(queue):
    """The case TestCase users have: nothing is committed, yet the handlers run."""
    import pgq_django as pgq
    from pgq_django.testing import drain
    from pgq_django.worker import registry

    seen = []

    @pgq.handler(queue.name)
    def handle(message):
        if message.message == "bad":
            raise ValueError("bad message")
        seen.append(message.message)

    try:
        pgq.send_batch(queue, [1, "bad", 2])
        assert drain(queue.name) == (2, 1)
    finally:
        registry.unregister(queue.name)
    assert seen == [1, 2]
    assert pgq.metrics(queue).queue_length == 1  # the failed one waits for its retry
