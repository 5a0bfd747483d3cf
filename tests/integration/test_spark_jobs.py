"""Writing DataFrames into queues and exchanges; export, report and replay of the archive."""

from __future__ import annotations

import io
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction

import pgq_django as pgq
from tests.spark_support import spark_session, sql_rows

pytestmark = [pytest.mark.spark, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def spark(django_db_setup: Any, django_db_blocker: Any) -> Iterator[Any]:
    with django_db_blocker.unblock():
        yield from spark_session()


@pytest.fixture
def runner(spark: Any) -> Any:
    from pgq_django.spark.runtime import JobRunner

    return JobRunner(spark, io.StringIO(), interval=0.2)


def _rows(queue: str) -> list[tuple[Any, ...]]:
    return sql_rows(
        "SELECT m.message::text, m.headers::text, m.attributes::text, m.label, m.priority, "
        "m.group_id, m.dedup_id, extract(epoch FROM m.vt - m.enqueued_at)::int, "
        "extract(epoch FROM m.expires_at - m.enqueued_at)::int "
        "FROM pgq_message m JOIN pgq_queue q ON q.id = m.queue_id WHERE q.name = %s "
        "ORDER BY m.msg_id",
        [queue],
    )


def _sent(queue: str) -> int:
    return int(
        sql_rows(
            "SELECT coalesce(sum(n), 0) FROM pgq_queue_counter c JOIN pgq_queue q "
            "ON q.id = c.queue_id WHERE q.name = %s AND c.kind = 'sent'",
            [queue],
        )[0][0]
    )


def test_a_dataframe_written_to_a_queue_is_the_rows_send_writes(
    spark: Any, make_queue: Any
) -> None:
    by_api, by_spark = make_queue(), make_queue()
    rows = [
        ({"n": i, "s": "é"}, {"h": i % 2}, {"a": "x"}, "lbl" if i % 3 else None, i % 4, i * 10)
        for i in range(25)
    ]
    for body, headers, attributes, label, priority, delay in rows:
        pgq.send(
            by_api.name,
            body,
            headers=headers,
            attributes=attributes,
            label=label,
            priority=priority,
            delay=delay,
        )
    frame = spark.createDataFrame(
        [
            (json.dumps(b), json.dumps(h), json.dumps(a), lb, p, float(d))
            for b, h, a, lb, p, d in rows
        ],
        "body string, headers string, attributes string, label string, priority int, delay double",
    ).coalesce(1)
    frame.write.format("pgq").mode("append").option("queue", by_spark.name).save()
    assert _rows(by_spark.name) == _rows(by_api.name)
    assert _sent(by_spark.name) == _sent(by_api.name) == 25


def test_text_bodies_groups_and_a_map_of_headers(spark: Any, make_queue: Any) -> None:
    q = make_queue()
    frame = spark.createDataFrame(
        [("<a>1</a>", {"content_type": "application/xml"}, "g1")],
        "body string, headers map<string,string>, group string",
    )
    frame.write.format("pgq").mode("append").option("queue", q.name).option(
        "bodyFormat", "text"
    ).save()
    (message,) = pgq.read(q.name)
    assert message.message == "<a>1</a>"
    assert message.headers == {"content_type": "application/xml"}
    assert message.group_id == "g1"


def test_a_dataframe_written_to_an_exchange_is_routed_like_publish(
    spark: Any, make_queue: Any
) -> None:
    orders, audit = make_queue(), make_queue()
    pgq.create_exchange("x_spark", "topic")
    pgq.bind_queue(orders, "x_spark", "order.*")
    pgq.bind_queue(audit, "x_spark", "#")
    frame = spark.createDataFrame(
        [('{"id": 1}', "order.created"), ('{"id": 2}', "user.created")],
        "body string, routing_key string",
    )
    frame.write.format("pgq").mode("append").option("exchange", "x_spark").save()
    assert [r[0] for r in _rows(orders.name)] == ['{"id": 1}']
    assert sorted(r[0] for r in _rows(audit.name)) == ['{"id": 1}', '{"id": 2}']


def test_writing_to_an_exchange_again_with_a_dedup_column_adds_no_copies(
    spark: Any, make_queue: Any
) -> None:
    """A retried write through an exchange deduplicates each queue's copy, as publish() does."""
    first, second = make_queue(), make_queue()
    pgq.create_exchange("x_spark_dedup", "fanout")
    pgq.bind_queue(first, "x_spark_dedup")
    pgq.bind_queue(second, "x_spark_dedup")
    frame = spark.createDataFrame(
        [(json.dumps({"n": i}), f"event-{i}") for i in range(10)], "body string, dedup_id string"
    ).repartition(3)
    for _ in range(2):  # a retried job (or task) after the first one committed
        frame.write.format("pgq").mode("append").option("exchange", "x_spark_dedup").save()
    for q in (first, second):
        assert sorted(json.loads(r[0])["n"] for r in _rows(q.name)) == list(range(10))
        assert _sent(q.name) == 10
    # The claims are publish()'s own: the API's repeat within the window adds nothing either.
    ids = pgq.publish("x_spark_dedup", {"n": 0}, dedup_id="event-0")
    assert len(ids) == 2 and len(_rows(first.name)) == len(_rows(second.name)) == 10


def test_writing_again_with_a_dedup_column_sends_nothing_twice(spark: Any, make_queue: Any) -> None:
    q = make_queue()
    frame = spark.createDataFrame(
        [(json.dumps({"n": i}), f"job-{i}") for i in range(20)], "body string, dedup_id string"
    ).repartition(3)
    for _ in range(2):  # a retried job (or task) after the first one committed
        frame.write.format("pgq").mode("append").option("queue", q.name).save()
    assert sorted(json.loads(r[0])["n"] for r in _rows(q.name)) == list(range(20))


def test_a_bad_row_fails_its_task_and_the_task_writes_nothing(spark: Any, make_queue: Any) -> None:
    q = make_queue(max_message_size=100)
    frame = spark.createDataFrame(
        [('{"ok": 1}',), ('{"ok": 2}',), (json.dumps({"big": "x" * 200}),), ('{"ok": 3}',)],
        "body string",
    ).coalesce(1)
    with pytest.raises(Exception, match="accepts at most 100") as failed:
        frame.write.format("pgq").mode("append").option("queue", q.name).save()
    from pgq_django.spark.runtime import pgq_error_in

    assert "Row 2 of the task" in (pgq_error_in(failed.value) or "")
    assert _rows(q.name) == [] and _sent(q.name) == 0


def _write_into_a_full_queue(spark: Any, make_queue: Any, how: str) -> tuple[Any, str, str]:
    """A queue with max_length 2 holding one message, and a three-row write into it that
    fails: the queue, the PgqError's message and the whole error's text."""
    from pgq_django.spark.runtime import pgq_error_in

    q = make_queue(max_length=2)
    with transaction.atomic():  # counted by its own statement, not by the process's sums
        pgq.send(q.name, {"before": True})
    rows = [(json.dumps({"n": i}), f"full-{how}-{i}") for i in range(3)]
    frame = spark.createDataFrame(rows, "body string, dedup_id string").coalesce(1)
    if "dedup" not in how:
        frame = frame.drop("dedup_id")
    writer = frame.write.format("pgq").mode("append")
    if how.startswith("exchange"):
        exchange = f"x_full_{q.name}"
        pgq.create_exchange(exchange, "fanout")
        pgq.bind_queue(q, exchange)
        writer = writer.option("exchange", exchange)
    else:
        writer = writer.option("queue", q.name)
    with pytest.raises(Exception, match="max_length") as failed:
        writer.save()
    return q, pgq_error_in(failed.value) or "", str(failed.value)


@pytest.mark.parametrize("how", ["send", "dedup", "exchange", "exchange-dedup"])
def test_a_full_queue_fails_the_task_and_the_task_writes_nothing(
    spark: Any, make_queue: Any, how: str
) -> None:
    """Rows that find no room under max_length fail their task with QueueFull, as send()
    raises it: nothing is dropped silently, and the task's transaction rolls back."""
    q, error, text = _write_into_a_full_queue(spark, make_queue, how)
    assert "pgq_django.exceptions.QueueFull" in text
    assert repr(q.name) in error and "max_length" in error
    assert [r[0] for r in _rows(q.name)] == ['{"before": true}'] and _sent(q.name) == 1
    if how == "dedup":
        # The failed task's dedup claims rolled back with its rows: once there is room,
        # the same ids send (a claim that survived would suppress them).
        pgq.purge_queue(q.name)
        spark.createDataFrame(
            [(json.dumps({"n": i}), f"full-dedup-{i}") for i in range(2)],
            "body string, dedup_id string",
        ).coalesce(1).write.format("pgq").mode("append").option("queue", q.name).save()
        assert [json.loads(r[0])["n"] for r in _rows(q.name)] == [0, 1]


def test_a_row_cannot_forge_the_server_headers(spark: Any, make_queue: Any) -> None:
    """A DataFrame is as hostile as a request: pgq_* headers are refused as send() refuses them."""
    q = make_queue()
    forged = json.dumps({"pgq_dead_letter": {"original_queue": "someone_elses_queue"}})
    frame = spark.createDataFrame([('{"n": 1}', forged)], "body string, headers string")
    with pytest.raises(Exception, match="reserved"):
        frame.write.format("pgq").mode("append").option("queue", q.name).save()
    assert _rows(q.name) == [] and _sent(q.name) == 0


@pytest.mark.parametrize(
    ("headers", "schema"),
    [
        (
            json.dumps({"trace": "t-1", "pgq_dead_letter": {"original_queue": "elsewhere"}}),
            "headers string",
        ),
        (
            {"trace": "t-1", "PGQ_sender": "someone else"},
            "headers map<string,string>",
        ),
        (
            {"trace": "t-1", "pgq_sender": "someone else"},
            "headers struct<trace: string, pgq_sender: string>",
        ),
    ],
    ids=["json-text", "map", "struct"],
)
def test_dropping_reserved_headers_writes_the_filtered_headers_in_every_column_form(
    spark: Any, make_queue: Any, headers: Any, schema: str
) -> None:
    """dropReservedHeaders=true writes what it checked: no pgq_* key survives, whatever the form."""
    q = make_queue()
    frame = spark.createDataFrame([('{"n": 1}', headers)], f"body string, {schema}")
    frame.write.format("pgq").mode("append").option("queue", q.name).option(
        "dropReservedHeaders", "true"
    ).save()
    ((stored,),) = sql_rows(
        "SELECT m.headers::text FROM pgq_message m JOIN pgq_queue q ON q.id = m.queue_id "
        "WHERE q.name = %s",
        [q.name],
    )
    assert json.loads(stored) == {"trace": "t-1"}
    (message,) = pgq.read(q.name)
    assert message.headers == {"trace": "t-1"}


@pytest.mark.parametrize(
    ("options", "columns", "says"),
    [
        ({"queue": "nope_missing"}, "body string", "does not exist"),
        ({}, "body string", "exactly one of the options queue and exchange"),
        ({"queue": "q"}, "payload string", "needs a 'body' column"),
        ({"queue": "q"}, "body string, colour string", "colour is not one of them"),
    ],
)
def test_bad_writes_say_what_is_wrong(
    spark: Any, options: dict[str, str], columns: str, says: str
) -> None:
    frame = spark.createDataFrame([("{}",) * len(columns.split(","))], columns)
    writer = frame.write.format("pgq").mode("append")
    for key, value in options.items():
        writer = writer.option(key, value)
    with pytest.raises(Exception, match=says):
        writer.save()


@pytest.fixture
def archived(make_queue: Any) -> dict[str, str]:
    """Archived messages of three kinds: acked first time, acked after a retry, dead."""
    a = make_queue(archive_on_ack=True)
    b = make_queue(max_retries=1, archive_on_ack=True)
    bodies = [
        {"n": 1, "nested": {"list": [1, 2.5, None, True]}, "text": "日本語 \\ \" '"},
        "just a string",
        [1, 2, 3],
        {"n": 4},
    ]
    pgq.send_batch(a.name, bodies, headers={"trace": "t-1", "content_type": "application/json"})
    pgq.send_batch(b.name, [{"b": i} for i in range(6)], headers={"k": [1, {"x": "y"}]})
    # A body whose number keeps its digits in jsonb (Python would print 1.1).
    sql_rows(
        'UPDATE pgq_message SET message = \'{"price": 1.10, "big": 123456789012345678901.5}\''
        " WHERE msg_id = (SELECT max(msg_id) FROM pgq_message m JOIN pgq_queue q "
        "ON q.id = m.queue_id WHERE q.name = %s)",
        [a.name],
    )
    for m in pgq.read(a.name, qty=10, vt=60):
        pgq.delete(a.name, m.receipt)
    first = pgq.read(b.name, qty=6, vt=60)
    for m in first[:2]:
        pgq.delete(b.name, m.receipt)
    for m in first[2:]:
        pgq.set_vt(b.name, m.receipt, 0)
    again = pgq.read(b.name, qty=6, vt=60)
    for m in again[:2]:
        pgq.delete(b.name, m.receipt)
    for m in again[2:]:
        pgq.nack(b.name, m.receipt, error="still failing")
    return {"a": a.name, "b": b.name}


def _archive_bodies(where: str = "true") -> list[tuple[str, str]]:
    return sorted(
        sql_rows(f"SELECT message::text, headers::text FROM pgq_archived_message WHERE {where}")
    )


def test_export_then_replay_round_trips_bodies_and_headers_byte_for_byte(
    spark: Any, runner: Any, archived: dict[str, str], tmp_path: Path, make_queue: Any
) -> None:
    from datetime import UTC, datetime, timedelta

    from pgq_django.api.exports import exports_cover, list_exports
    from pgq_django.spark import jobs

    until = datetime.now(UTC) + timedelta(seconds=1)
    since = until - timedelta(days=1)
    target = str(tmp_path / "export")
    result = jobs.export(spark, runner, since=since, until=until, to=target)
    total = sql_rows("SELECT count(*), min(msg_id), max(msg_id) FROM pgq_archived_message")[0]
    assert (result.rows, result.min_msg_id, result.max_msg_id) == total
    (record,) = list_exports()
    assert (record.rows, record.path, record.since, record.until) == (
        total[0],
        target,
        since,
        until,
    )
    assert exports_cover(since, until) and not exports_cover(since - timedelta(days=1), until)
    day = until.date().isoformat()
    assert (tmp_path / "export" / f"queue={archived['a']}" / f"day={day}").is_dir()

    replayed = make_queue()
    assert jobs.replay(spark, runner, source=target, queue=replayed.name) == total[0]
    got = sorted(
        sql_rows(
            "SELECT message::text, headers::text FROM pgq_message m JOIN pgq_queue q "
            "ON q.id = m.queue_id WHERE q.name = %s",
            [replayed.name],
        )
    )
    assert got == _archive_bodies()
    assert any('"price": 1.10' in body for body, _ in got)

    dead = make_queue()
    sent = jobs.replay(spark, runner, source="archive", queue=dead.name, filter="outcome = 'dead'")
    assert sent == 2
    assert sorted(r[:2] for r in _rows(dead.name)) == _archive_bodies("outcome = 'dead'")


def test_replay_refuses_filters_that_are_not_spark_sql_conditions(
    spark: Any, runner: Any, make_queue: Any
) -> None:
    from pgq_django.exceptions import InvalidArgument
    from pgq_django.spark import jobs

    q = make_queue()
    for expression in ("java_method('java.lang.System', 'exit', 0) = 1", "outcome = = 'x'", " "):
        with pytest.raises(InvalidArgument):
            jobs.replay(spark, runner, source="archive", queue=q.name, filter=expression)
    assert _rows(q.name) == []


def test_report_numbers_equal_the_same_computation_in_sql(
    spark: Any, runner: Any, archived: dict[str, str], tmp_path: Path
) -> None:
    from pgq_django.spark import jobs

    queues = jobs.report(spark, runner, since=None, until=None, to=str(tmp_path))
    expected = sql_rows("""
        SELECT q.name, count(*),
               extract(epoch FROM max(m.archived_at) - min(m.archived_at))::float8,
               percentile_cont(ARRAY[0.5, 0.9, 0.99]) WITHIN GROUP (
                   ORDER BY extract(epoch FROM m.archived_at - m.enqueued_at)::float8),
               max(extract(epoch FROM m.archived_at - m.enqueued_at))::float8,
               avg((m.read_ct > 1)::int)::float8,
               avg((m.outcome = 'dead' OR m.headers ? 'pgq_dead_letter')::int)::float8
        FROM pgq_archived_message m JOIN pgq_queue q ON q.id = m.queue_id
        GROUP BY q.name ORDER BY q.name
    """)
    assert [q.queue for q in queues] == [r[0] for r in expected]
    for got, (_name, count, window, quantiles, worst, retry, dead) in zip(
        queues, expected, strict=True
    ):
        assert got.messages == count
        assert math.isclose(got.window_seconds, window, abs_tol=1e-6)
        assert math.isclose(got.throughput_per_second, count / window, rel_tol=1e-9)
        for value, want in zip(
            (got.latency_p50, got.latency_p90, got.latency_p99), quantiles, strict=True
        ):
            assert math.isclose(value, want, abs_tol=1e-6)
        assert math.isclose(got.latency_max, worst, abs_tol=1e-6)
        assert math.isclose(got.retry_rate, retry) and math.isclose(got.dead_letter_rate, dead)
    b = next(q for q in queues if q.queue == archived["b"])
    assert (b.retry_rate, b.dead_letter_rate) == (4 / 6, 2 / 6)
    document = json.loads((tmp_path / "report.json").read_text())
    assert [q["queue"] for q in document["queues"]] == [q.queue for q in queues]
    assert (tmp_path / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_replay_command_sends_the_dead_letters(
    spark: Any, archived: dict[str, str], make_queue: Any
) -> None:
    from django.core.management import CommandError, call_command

    q = make_queue()
    out = io.StringIO()
    call_command(
        "pgq_spark", "replay", "--from", "archive", "--queue", q.name,
        "--filter", "outcome = 'dead'", stdout=out,
    )  # fmt: skip
    assert "Replayed 2 messages" in out.getvalue()
    assert len(_rows(q.name)) == 2
    with pytest.raises(CommandError, match="does not exist"):
        call_command("pgq_spark", "replay", "--from", "archive", "--queue", "nope_missing")
    with pytest.raises(CommandError, match="Spark SQL condition"):
        call_command("pgq_spark", "replay", "--from", "archive", "--queue", q.name, "--filter", "")
    assert spark.range(1).count() == 1  # the command left the caller's session running


def test_sigterm_cancels_a_running_export_and_records_nothing(
    spark: Any, archived: dict[str, str], tmp_path: Path
) -> None:
    """The export's executors block on a lock the test holds; SIGTERM arrives mid-job."""
    import os
    import signal
    import threading
    import time

    import psycopg
    from django.core.management import call_command

    from pgq_django.models import SparkExport
    from pgq_django.spark import default_dsn

    dsn = default_dsn()
    assert dsn is not None
    blocker = psycopg.connect(dsn)
    blocker.execute("LOCK TABLE pgq_queue IN ACCESS EXCLUSIVE MODE")  # reads join pgq_queue

    def signal_when_blocked() -> None:
        with psycopg.connect(dsn, autocommit=True) as watcher:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                waiting = watcher.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                    "'pgq_django.spark' AND wait_event_type = 'Lock'"
                    " AND datname = current_database()"
                ).fetchone()
                if waiting and waiting[0]:
                    os.kill(os.getpid(), signal.SIGTERM)
                    return
                time.sleep(0.1)

    before = signal.getsignal(signal.SIGTERM)  # the embedded server may have chained its own
    thread = threading.Thread(target=signal_when_blocked)
    thread.start()
    out = io.StringIO()
    try:
        with pytest.raises(SystemExit) as stopped:
            call_command("pgq_spark", "export", "--to", str(tmp_path / "x"), stdout=out)
    finally:
        thread.join()
        blocker.rollback()
        blocker.close()
    assert stopped.value.code == 128 + signal.SIGTERM
    assert "SIGTERM: cancelling the Spark job" in out.getvalue()
    assert not SparkExport.objects.exists()
    assert signal.getsignal(signal.SIGTERM) is before  # handlers restored
