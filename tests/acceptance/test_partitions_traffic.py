"""Upkeep under real traffic: ranges are made and dropped while messages flow, nothing is lost.

Senders, consumers and two upkeep loops run at once in threads, each on its own database
connection, with committed transactions and ranges of 200 ids, so partitions are premade,
filled, drained and dropped many times during the test while the second upkeep loop keeps
colliding with the first.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection, connections
from django.test import override_settings

import pgq_django as pgq
from pgq_django import partitions
from pgq_django.models import ArchivedMessage, Message
from tests.conftest import wait_until

SIZE = 200
SENDERS, PER_SENDER, BATCH = 2, 2000, 20
CONSUMERS = 3


@pytest.fixture
def saved_layout(transactional_db: Any) -> Iterator[None]:
    """Whatever ranges a test makes or drops, the layout and sequence are restored after."""
    saved = {t: partitions.list_partitions(t) for t in partitions.TABLES}
    with connection.cursor() as cursor:
        cursor.execute("SELECT last_value, is_called FROM pgq_message_msg_id_seq")
        position = cursor.fetchone()
    try:
        yield
    finally:
        Message.objects.all().delete()
        ArchivedMessage.objects.all().delete()
        with connection.cursor() as cursor:
            for table, before in saved.items():
                for part in partitions.list_partitions(table):
                    if part not in before:
                        cursor.execute(f'DROP TABLE "{part.name}"')
                now = set(partitions.list_partitions(table))
                # Empty unlogged ranges that earlier tests' non-durable queues left behind
                # are upkeep's to drop (no such queue is left); they are not recreated.
                for part in before:
                    if part not in now and partitions.space_of(part.lower) is partitions.DURABLE:
                        cursor.execute(
                            f'CREATE TABLE "{part.name}" PARTITION OF "{table}" '
                            f"FOR VALUES FROM ({part.lower}) TO ({part.upper})"
                        )
            cursor.execute("SELECT setval('pgq_message_msg_id_seq', %s, %s)", list(position))


@pytest.fixture
def tiny_ranges(saved_layout: None) -> Iterator[int]:
    """Ranges of SIZE ids past every existing one."""
    top = max(
        p.upper
        for t in partitions.TABLES
        for p in partitions.list_partitions(t, partitions.DURABLE)
    )
    with connection.cursor() as cursor:
        cursor.execute("SELECT setval('pgq_message_msg_id_seq', %s)", [top - 1])
    with override_settings(PGQ={"PARTITION_SIZE": SIZE, "PARTITION_PREMAKE": 2}):
        yield top


def _thread(target: Callable[[], None], errors: list[BaseException]) -> threading.Thread:
    def run() -> None:
        try:
            target()
        except BaseException as exc:  # reported by the test, never swallowed
            errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_messages_flow_while_two_upkeep_loops_make_and_drop_ranges(tiny_ranges, make_queue):
    top = tiny_ranges
    queue = make_queue(archive_on_ack=True).name
    total = SENDERS * PER_SENDER
    sent: list[int] = []
    acked: list[int] = []
    actions: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    senders_done = threading.Event()
    stop = threading.Event()

    def send() -> None:
        for start in range(0, PER_SENDER, BATCH):
            ids = pgq.send_batch(queue, [{"n": start + k} for k in range(BATCH)])
            with lock:
                sent.extend(ids)

    def consume() -> None:
        while not (senders_done.is_set() and len(acked) >= total) and not stop.is_set():
            messages = pgq.read(queue, qty=10, vt=60)
            if messages:
                done = pgq.delete(queue, [m.msg_id for m in messages])
                assert isinstance(done, list) and len(done) == len(messages)
                with lock:
                    acked.extend(done)

    def upkeep() -> None:
        while not stop.is_set():
            done = partitions.run_maintenance()
            with lock:
                actions.extend(done)

    workers = [_thread(upkeep, errors) for _ in range(2)]
    workers += [_thread(consume, errors) for _ in range(CONSUMERS)]
    senders = [_thread(send, errors) for _ in range(SENDERS)]
    try:
        for thread in senders:
            thread.join(timeout=300)
        senders_done.set()
        wait_until(lambda: len(acked) >= total or errors, timeout=300, what="every ack")
        # Upkeep runs on after the queue drains, until the last filled range is gone.
        wait_until(
            lambda: (
                errors
                or partitions.sequence_position() < top + 2 * SIZE
                or all(
                    p.lower >= partitions.sequence_position() - SIZE
                    for p in partitions.list_partitions("pgq_message")
                    if p.lower >= top
                )
            ),
            timeout=120,
            what="drained ranges dropped",
        )
    finally:
        stop.set()
        for thread in workers:
            thread.join(timeout=120)
    assert not errors, errors
    # Senders may outrun premaking (rows then land in the default partition); one more run
    # after the traffic moves any such rows into a range of their own.
    partitions.run_maintenance()
    assert len(sent) == len(set(sent)) == total
    assert sorted(acked) == sorted(sent)
    assert not Message.objects.filter(queue__name=queue).exists()
    assert ArchivedMessage.objects.filter(queue__name=queue).count() == total
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pgq_message_default")
        assert cursor.fetchone()[0] == 0
        cursor.execute("SELECT count(*) FROM pgq_archived_message_default")
        assert cursor.fetchone()[0] == 0
    made = [
        a.split(" into ")[-1] if a.startswith("repair") else a.split(" ", 1)[1]
        for a in actions
        if a.startswith(("create pgq_message_r", "repair pgq_message_default"))
    ]
    # (Upkeep also drops the empty ranges earlier tests left below this test's window,
    # durable or not: only the ranges from ``top`` on are this traffic's.)
    dropped = [
        a.split(" ", 1)[1]
        for a in actions
        if a.startswith("drop pgq_message_r")
        and partitions.space_of(int(a.split("[")[1].split(",")[0])) is partitions.DURABLE
        and int(a.split("[")[1].split(",")[0]) >= top
    ]
    # Ranges were made (ahead of the sequence, or around rows that outran it) and drained
    # ones dropped while the traffic ran; each once, though two loops raced for every one.
    assert len(made) >= 2 and len(dropped) >= 1, actions
    assert len(made) == len(set(made)) and len(dropped) == len(set(dropped)), actions
    assert set(dropped) <= set(made)


RECLAIM_SIZE = 100_000  # one range takes every message: the sequence never passes it
ROUNDS, PER_ROUND, BODY = 4, 1500, "x" * 1000  # each round: ~2 MiB of rows, then deleted


def test_a_range_truncated_between_bursts_loses_and_duplicates_nothing(
    saved_layout: None, make_queue: Any
) -> None:
    """Bursts of traffic fill one range, drain it, and fill it again while an upkeep loop
    truncates it whenever it finds it empty: the sequence never passes the range, so every
    page given back is given back by TRUNCATE, with sends, leases and acks in flight."""
    top = max(
        p.upper
        for t in partitions.TABLES
        for p in partitions.list_partitions(t, partitions.DURABLE)
    )
    with connection.cursor() as cursor:
        cursor.execute("SELECT setval('pgq_message_msg_id_seq', %s)", [top - 1])
    queue = make_queue().name
    name = f"pgq_message_r{top}"
    total = ROUNDS * PER_ROUND
    sent: list[int] = []
    acked: list[int] = []
    actions: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    stop = threading.Event()

    def send() -> None:
        for _ in range(ROUNDS):
            for _ in range(0, PER_ROUND, BATCH):
                ids = pgq.send_batch(queue, [BODY] * BATCH)
                with lock:
                    sent.extend(ids)
            # The consumers drain the range and one upkeep loop truncates it; the next burst
            # then starts at once, while the other loop is somewhere in its own run.
            wait_until(lambda: len(acked) >= len(sent) or stop.is_set(), timeout=300)
            wait_until(lambda: _bytes(name) <= partitions.RECLAIM_MIN_BYTES or stop.is_set())

    def consume() -> None:
        while len(acked) < total and not stop.is_set():
            messages = pgq.read(queue, qty=10, vt=60)
            if messages:
                done = pgq.delete(queue, [m.msg_id for m in messages])
                # A leased message that vanished would come back missing here.
                assert sorted(done) == sorted(m.msg_id for m in messages)
                with lock:
                    acked.extend(done)

    def upkeep() -> None:
        while not stop.is_set():
            done = partitions.run_maintenance()
            with lock:
                actions.extend(done)

    with override_settings(PGQ={"PARTITION_SIZE": RECLAIM_SIZE, "PARTITION_PREMAKE": 1}):
        partitions.run_maintenance()
        workers = [_thread(upkeep, errors) for _ in range(2)]
        workers += [_thread(consume, errors) for _ in range(CONSUMERS)]
        sender = _thread(send, errors)
        try:
            sender.join(timeout=600)
            wait_until(lambda: len(acked) >= total or errors, timeout=300, what="every ack")
            # After the last burst the range is drained for good: upkeep gives it back.
            wait_until(
                lambda: errors or _bytes(name) <= partitions.RECLAIM_MIN_BYTES,
                timeout=120,
                what="the drained range truncated",
            )
        finally:
            stop.set()
            for thread in [*workers, sender]:
                thread.join(timeout=120)
    assert not errors, errors
    assert partitions.sequence_position() < top + RECLAIM_SIZE  # never passed: no drop
    assert len(sent) == len(set(sent)) == total
    assert sorted(acked) == sorted(sent)
    assert not Message.objects.filter(queue__name=queue).exists()
    truncated = [a for a in actions if a.startswith(f"truncate pgq_message_r{top} ")]
    assert len(truncated) >= ROUNDS, actions  # once after each burst at least
    assert not any(a.startswith(f"drop pgq_message_r{top} ") for a in actions)


@pytest.mark.slow
def test_the_command_stops_between_two_actions_on_sigint(saved_layout: None, spawn: Any) -> None:
    before = {t: len(partitions.list_partitions(t)) for t in partitions.TABLES}
    child = spawn("-m", "django", "pgq_partitions", "--premake", "100")
    _wait_for_output(child, "create ")
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    lines = out.splitlines()
    made = [line for line in lines if line.startswith("create ")]
    assert lines[-1].startswith(f"stopped by signal after {len(made)} actions (")
    assert 1 <= len(made) < 200  # 100 ranges for each table were due
    # Every action printed was done and committed; nothing else was.
    for table in partitions.TABLES:
        printed = sum(line.startswith(f"create {table}_r") for line in made)
        assert len(partitions.list_partitions(table)) == before[table] + printed


def _bytes(name: str) -> int:
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT pg_total_relation_size(%s::regclass)", [name])
        return int(cursor.fetchone()[0])


def _wait_for_output(child: Any, text: str) -> None:
    wait_until(lambda: text in child.out_path.read_text(), timeout=120, what=repr(text))
