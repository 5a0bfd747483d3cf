"""Batch commit (``pgq_worker --batch-size N``, ``@pgq.handler(..., batch_commit=True)``).

A leased batch runs in one transaction, each handler in a savepoint of its own, and the
successes are acknowledged by one statement. In-process tests drive a real Worker on the
real test database (transactional, so the worker's transactions are real ones); the crash
and signal tests run real ``manage.py pgq_worker`` processes.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connection, connections, transaction
from django.test import override_settings
from django.utils import timezone

import pgq_django as pgq
from pgq_django.store.sql import messages as message_sql
from pgq_django.worker import registry
from pgq_django.worker.loop import Worker
from tests.conftest import statements_run, wait_for_workers, wait_until
from tests.worker_handlers import EFFECTS_DDL

pytestmark = pytest.mark.django_db(transaction=True)

WORKER = ("-m", "django", "pgq_worker", "--import", "tests.worker_handlers", "-v", "2")
# Acks inside a transaction count themselves (DELETE); autocommit ones leave the count to the
# process's tallies (DELETE_UNCOUNTED); a single message has its own shapes (DELETE_ONE*),
# and its autocommit ack is ACK_ONE. Any of them is one ack statement.
ACK_STATEMENTS = {
    message_sql.ACK_ONE,
    *(
        text
        for shapes in (
            message_sql.DELETE,
            message_sql.DELETE_UNCOUNTED,
            message_sql.DELETE_ONE,
            message_sql.DELETE_ONE_UNCOUNTED,
        )
        for text in shapes.values()
    ),
}


@pytest.fixture
def effects_queue(make_queue, transactional_db):
    """A queue whose messages ``tests.worker_handlers.record`` handles (as its callback)."""
    with connection.cursor() as cur:
        cur.execute(EFFECTS_DDL)

    def make(**options: Any) -> Any:
        q = make_queue(**options)
        pgq.register_callback(q, "tests.worker_handlers.record")
        return q

    return make


def effects(queue: Any) -> list[tuple[int, int]]:
    """(msg_id, attempt) of every committed handler write, by msg_id."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT msg_id, attempt FROM test_effects WHERE queue = %s ORDER BY msg_id, attempt",
            [queue.name],
        )
        return cur.fetchall()


def _write_effect(message: Any) -> None:
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO test_effects VALUES (%s, %s, %s, 0)",
            [message.queue_name, message.msg_id, message.read_ct],
        )


def batch_worker(queue: Any, func: Callable[[Any], Any], size: int = 10) -> Worker:
    """A worker serving ``queue`` with ``func`` in batch commit, driven by work_once."""
    return Worker(
        handlers={queue.name: registry.Handler(queue.name, func)},
        once=True,
        lead=False,
        batch_size=size,
    )


# -- one transaction, one ack -----------------------------------------------------------------


def test_a_batch_acks_every_success_in_one_statement_and_nacks_the_failure(effects_queue):
    q = effects_queue(max_retries=3, retry_delay=3600, backoff="none")
    ids = pgq.send_batch(q, [{"n": i} for i in range(8)])
    bad = ids[3]

    def handler(message: Any) -> None:
        _write_effect(message)
        if message.msg_id == bad:
            raise ValueError("this one fails")

    worker = batch_worker(q, handler)
    with statements_run() as seen:
        assert worker.work_once()
    assert sum(s in ACK_STATEMENTS for s in seen) == 1
    assert sum(s.startswith("SAVEPOINT") for s in seen) == 8  # one per handler
    # The failing handler's write rolled back with its savepoint, and only its own.
    assert [m for m, _a in effects(q)] == [i for i in ids if i != bad]
    left = pgq.read_by_id(q, bad)
    assert left.read_ct == 1 and left.vt > timezone.now()  # nacked: back after retry_delay
    assert pgq.metrics(q).queue_length == 1


@pytest.mark.parametrize("fast_paths", [True, False])
def test_a_handler_that_touches_no_database_costs_no_savepoint(
    make_queue, transactional_db, fast_paths
):
    """With the seams' shortcuts, a handler that runs no statement gets no savepoint; on
    the public path (shortcuts off) each handler gets one, and the batch still acks once."""
    q = make_queue()
    pgq.send_batch(q, [{} for _ in range(5)])
    with (
        override_settings(PGQ={**settings.PGQ, "FAST_PATHS": fast_paths}),
        statements_run() as seen,
    ):
        assert batch_worker(q, lambda m: None).work_once()
    savepoints = [s for s in seen if s.startswith("SAVEPOINT")]
    assert len(savepoints) == (0 if fast_paths else 5)
    assert sum(s in ACK_STATEMENTS for s in seen) == 1
    assert pgq.metrics(q).queue_length == 0


def test_a_database_error_in_one_handler_leaves_the_batch_usable(effects_queue):
    """An error that aborts the transaction is rolled back to that handler's savepoint."""
    q = effects_queue(retry_delay=3600, backoff="none")
    ids = pgq.send_batch(q, [{"n": i} for i in range(3)])

    def handler(message: Any) -> None:
        _write_effect(message)
        if message.msg_id == ids[1]:
            with connection.cursor() as cur:
                cur.execute("SELECT 1 / 0")

    assert batch_worker(q, handler).work_once()
    assert [m for m, _a in effects(q)] == [ids[0], ids[2]]
    assert pgq.read_by_id(q, ids[1]).read_ct == 1  # nacked, the others acked
    assert pgq.metrics(q).queue_length == 1


def test_a_handler_may_catch_a_failure_of_its_own_nested_atomic_block(effects_queue):
    q = effects_queue()
    ids = pgq.send_batch(q, [{"n": 1}, {"n": 2}])

    def handler(message: Any) -> None:
        _write_effect(message)
        try:
            with transaction.atomic():
                _write_effect(message)  # a second row, rolled back by the inner block
                raise ValueError("inner")
        except ValueError:
            pass

    assert batch_worker(q, handler).work_once()
    assert effects(q) == [(i, 1) for i in ids]
    assert pgq.metrics(q).queue_length == 0


def test_a_handler_whose_first_statement_opens_its_own_atomic_block_is_still_isolated(
    effects_queue,
):
    """The handler's savepoint opens inside its own block's SAVEPOINT: they nest in order."""
    q = effects_queue(retry_delay=3600, backoff="none")
    ids = pgq.send_batch(q, [{"n": i} for i in range(3)])

    def handler(message: Any) -> None:
        with transaction.atomic():
            _write_effect(message)
        if message.msg_id == ids[1]:
            raise ValueError("fails after its block committed to the batch")

    assert batch_worker(q, handler).work_once()
    assert [m for m, _a in effects(q)] == [ids[0], ids[2]]
    assert pgq.read_by_id(q, ids[1]).read_ct == 1


def test_a_handler_that_marks_its_transaction_for_rollback_fails_like_in_the_default_mode(
    effects_queue,
):
    q = effects_queue(retry_delay=3600, backoff="none")
    ids = pgq.send_batch(q, [{"n": 1}, {"n": 2}])

    def handler(message: Any) -> None:
        _write_effect(message)
        if message.msg_id == ids[0]:
            transaction.set_rollback(True)

    assert batch_worker(q, handler).work_once()
    assert [m for m, _a in effects(q)] == [ids[1]]
    assert pgq.read_by_id(q, ids[0]).read_ct == 1  # nacked, back after retry_delay


def test_on_commit_callbacks_run_after_the_batch_commits_and_only_for_successes(
    effects_queue,
):
    q = effects_queue(retry_delay=3600, backoff="none")
    ids = pgq.send_batch(q, [{"n": i} for i in range(4)])
    ran: list[int] = []

    def handler(message: Any) -> None:
        # Registered before the handler's first statement, so before its savepoint exists.
        transaction.on_commit(lambda: ran.append(message.msg_id))
        if message.msg_id == ids[1]:
            raise ValueError("fails before touching the database")
        _write_effect(message)
        assert ran == []  # nothing runs before the whole batch commits
        if message.msg_id == ids[2]:
            raise ValueError("fails after writing")

    assert batch_worker(q, handler).work_once()
    assert ran == [ids[0], ids[3]]
    assert [m for m, _a in effects(q)] == [ids[0], ids[3]]


SUBXACT_STATE = """
SELECT s.subxact_count, s.subxact_overflowed
FROM pg_stat_get_backend_idset() AS b, pg_stat_get_backend_subxact(b) AS s
WHERE pg_stat_get_backend_pid(b) = pg_backend_pid()
"""


def test_a_batch_of_writing_handlers_never_overflows_the_subtransaction_cache(effects_queue):
    """Each writing handler's savepoint takes a subtransaction id; PostgreSQL caches 64.

    The backend's own cache state is readable from PostgreSQL 16 (pg_stat_get_backend_subxact);
    on older servers the commit every 56 savepoints is checked by its acks alone."""
    q = effects_queue()
    ids = pgq.send_batch(q, [{"n": i} for i in range(150)])
    states: list[tuple[int, bool]] = []
    observable = connection.pg_version >= 160000

    def handler(message: Any) -> None:
        _write_effect(message)
        if not observable:
            return
        with connection.cursor() as cur:
            cur.execute("SELECT pg_stat_clear_snapshot()")  # see this moment's state
            cur.execute(SUBXACT_STATE)
            states.append(cur.fetchone())

    with statements_run() as seen:
        assert batch_worker(q, handler, size=150).work_once()
    if observable:
        assert len(states) == 150
        assert max(count for count, _overflowed in states) <= 64
        assert not any(overflowed for _count, overflowed in states)
    # The batch committed after every 56 savepoints: three transactions, three acks.
    assert sum(s in ACK_STATEMENTS for s in seen) == 3
    assert effects(q) == [(i, 1) for i in ids]


def test_a_failing_handler_of_a_batch_is_dead_lettered_per_its_queue_settings(
    effects_queue, make_queue
):
    dlq = make_queue()
    q = effects_queue(max_retries=0, dead_letter_queue=dlq)
    ids = pgq.send_batch(q, [{"n": 1}, {"fail": True}, {"n": 3}])
    worker = batch_worker(q, registry.resolve([q.name])[q.name].func)
    assert worker.work_once()
    assert [m for m, _a in effects(q)] == [ids[0], ids[2]]
    (dead,) = pgq.read(dlq)
    assert dead.msg_id == ids[1]
    assert "ValueError: poison message" in dead.headers["pgq_dead_letter"]["last_error"]
    assert pgq.metrics(q).queue_length == 0


def test_a_rejected_message_in_a_batch_is_archived_dead_and_the_rest_commit(effects_queue):
    q = effects_queue(max_retries=5)
    ids = pgq.send_batch(q, [{"n": i} for i in range(3)])

    def handler(message: Any) -> None:
        _write_effect(message)
        if message.msg_id == ids[1]:
            raise pgq.RejectMessage("never valid")

    assert batch_worker(q, handler).work_once()
    assert [m for m, _a in effects(q)] == [ids[0], ids[2]]
    gone = pgq.result(ids[1])
    assert gone.outcome == "dead" and "never valid" in gone.error
    assert pgq.metrics(q).queue_length == 0


def test_results_are_archived_per_message_one_ack_per_distinct_result(make_queue, transactional_db):
    q = make_queue(archive_on_ack=True)
    # The process learns the queue's shape on its first ack (one extra statement, once).
    pgq.send(q, {})
    pgq.complete(q, pgq.read(q)[0].receipt)
    ids = pgq.send_batch(q, [{"n": i} for i in range(6)])

    def parity(message: Any) -> Any:
        n = message.message["n"]
        return float("nan") if n == 5 else {"odd": n % 2}

    with statements_run() as seen:
        assert batch_worker(q, parity).work_once()
    # {"odd": 0}, {"odd": 1} and the note for the NaN no jsonb can hold: three acks.
    assert sum(s in ACK_STATEMENTS for s in seen) == 3
    assert [pgq.result(i).result for i in ids[:5]] == [{"odd": n % 2} for n in range(5)]
    note = pgq.result(ids[5]).result
    assert note["type"] == "float" and "cannot be stored" in note["unstorable_result"]


def test_nothing_a_batch_writes_is_visible_before_the_whole_batch_commits(effects_queue):
    """The handlers' writes and the acks commit together, once, at the end of the batch."""
    q = effects_queue()
    ids = pgq.send_batch(q, [{"n": i} for i in range(4)])
    seen_from_outside: list[tuple[int, int]] = []

    def handler(message: Any) -> None:
        _write_effect(message)
        if message.msg_id == ids[-1]:
            # Another connection (another thread) sees neither the earlier effects nor acks.
            def look() -> None:
                try:
                    seen_from_outside.append((len(effects(q)), pgq.metrics(q).queue_length))
                finally:
                    connections.close_all()

            t = threading.Thread(target=look)
            t.start()
            t.join()

    assert batch_worker(q, handler).work_once()
    assert seen_from_outside == [(0, 4)]
    assert [m for m, _a in effects(q)] == ids
    assert pgq.metrics(q).queue_length == 0


def test_an_async_handler_runs_in_batch_commit_too(make_queue, transactional_db):
    q = make_queue(archive_on_ack=True)
    ids = pgq.send_batch(q, [{"n": 1}, {"n": 2}])

    async def double(message: Any) -> int:
        return 2 * message.message["n"]

    assert batch_worker(q, double).work_once()
    assert [pgq.result(i).result for i in ids] == [2, 4]


def test_a_cancelled_message_in_a_batch_is_archived_as_cancelled_unrun(
    make_queue, transactional_db
):
    q = make_queue(retry_delay=0, backoff="none")
    first, flagged = pgq.send_batch(q, [{"n": 1}, {"n": 2}])
    (leased,) = pgq.read(q, qty=1, vt=300)  # leased, so a cancel only flags it
    assert leased.msg_id == first
    ran: list[int] = []
    pgq.cancel(q, first)
    pgq.set_vt(q, first, 0)  # its consumer gave up: the next lease sees the flag
    assert batch_worker(q, lambda m: ran.append(m.msg_id)).work_once()
    assert ran == [flagged]
    assert pgq.result(first).outcome == "cancelled"


# -- a lease lost mid-batch -------------------------------------------------------------------


def test_a_lease_lost_mid_batch_rolls_the_batch_back_and_runs_the_rest_one_by_one(
    effects_queue, caplog
):
    q = effects_queue(visibility_timeout=300)
    ids = pgq.send_batch(q, [{"n": i} for i in range(4)])
    stolen = ids[1]
    thief: list[Any] = []

    def handler(message: Any) -> None:
        _write_effect(message)
        if message.msg_id == stolen and not thief:
            # Another consumer takes the lease over meanwhile (its lease expired, say).
            def steal() -> None:
                try:
                    pgq.set_vt(q, stolen, 0)
                    thief.extend(pgq.read(q, qty=1))
                finally:
                    connections.close_all()

            t = threading.Thread(target=steal)
            t.start()
            t.join()

    with caplog.at_level("WARNING", logger="pgq_django.worker"):
        assert batch_worker(q, handler).work_once()
    assert [m.msg_id for m in thief] == [stolen]
    assert "event=batch_lease_lost" in caplog.text
    # The stolen message's write never committed (its ack missed); the others' committed
    # once each, by the one-by-one rerun after the batch rolled back.
    assert effects(q) == [(i, 1) for i in ids if i != stolen]
    assert pgq.metrics(q).queue_length == 1  # the thief's, still leased by the thief
    assert pgq.read_by_id(q, stolen).read_ct == 2


# -- options and their validation -------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("0", "argument --batch-size: must be at least 1"),
        ("1001", "argument --batch-size: must be at most 1000"),
        ("ten", "argument --batch-size: 'ten' is not a whole number"),
        ("-5", "argument --batch-size: must be at least 1"),
    ],
)
def test_batch_size_must_be_a_whole_number_from_1_to_1000(value, error, transactional_db):
    with pytest.raises(CommandError) as caught:
        call_command("pgq_worker", "--batch-size", value, "--once")
    assert str(caught.value) == f"Error: {error}"


@pytest.mark.parametrize("bad", [0, 1001, "10", 2.5, True])
def test_a_worker_refuses_a_bad_batch_size_with_a_clear_error(bad, queue):
    with pytest.raises(pgq.InvalidArgument, match="batch_size"):
        Worker(handlers={queue.name: registry.Handler(queue.name, print)}, batch_size=bad)


def test_batch_commit_needs_an_atomic_handler():
    with pytest.raises(pgq.InvalidArgument, match="batch_commit=True needs atomic=True"):
        pgq.handler("q_batch_not_atomic", atomic=False, batch_commit=True)
    with pytest.raises(pgq.InvalidArgument, match="batch_commit must be True or False"):
        pgq.handler("q_batch_not_atomic", batch_commit="yes")
    assert "q_batch_not_atomic" not in registry.registered()


def test_batch_size_turns_batch_commit_on_for_atomic_handlers_only(queue):
    handlers = {
        "a": registry.Handler("a", print),
        "b": registry.Handler("b", print, batch=3, atomic=False),
    }
    worker = Worker(handlers=handlers, batch_size=50, once=True, lead=False)
    assert (worker.handlers["a"].batch, worker.handlers["a"].batch_commit) == (50, True)
    assert (worker.handlers["b"].batch, worker.handlers["b"].batch_commit) == (3, False)


def test_a_decorated_handler_can_ask_for_batch_commit(effects_queue):
    q = effects_queue()
    pgq.handler(q.name, batch=5, batch_commit=True)(_write_effect)
    try:
        entry = registry.resolve([q.name])[q.name]
        assert (entry.batch, entry.batch_commit) == (5, True)
        ids = pgq.send_batch(q, [{} for _ in range(7)])
        worker = Worker(handlers={q.name: entry}, once=True, lead=False)
        with statements_run() as seen:
            while worker.work_once():
                pass
        assert sum(s in ACK_STATEMENTS for s in seen) == 2  # batches of 5 and 2
        assert [m for m, _a in effects(q)] == ids
    finally:
        registry.unregister(q.name)


# -- real worker processes: crashes and signals ------------------------------------------------


def finish(proc: Any, timeout: float = 120.0) -> tuple[int, str]:
    _out, err = proc.communicate(timeout=timeout)
    return proc.returncode, err


@pytest.mark.slow
def test_a_batch_worker_process_retries_then_dead_letters_a_poison_message_alone(
    effects_queue, make_queue, spawn, tmp_path
):
    dlq = make_queue()
    q = effects_queue(max_retries=1, retry_delay=0, backoff="none", dead_letter_queue=dlq)
    attempts = tmp_path / "attempts"
    bodies: list[dict[str, Any]] = [{"n": i} for i in range(30)]
    bodies[7] = {"fail": True, "attempts_file": str(attempts)}
    ids = pgq.send_batch(q, bodies)
    proc = spawn(*WORKER, "--queue", q.name, "--once", "--batch-size", "50")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err  # a handler failed: --once says so
    assert out.strip() == "processed=29 failed=2"  # the poison one, twice
    assert attempts.read_text().split() == ["1", "2"]
    assert effects(q) == [(i, 1) for i in ids if i != ids[7]]
    (dead,) = pgq.read(dlq)
    assert dead.msg_id == ids[7] and dead.headers["pgq_dead_letter"]["attempts"] == 2
    assert pgq.metrics(q).queue_length == 0
    assert "event=batch_committed" in err and "acked=29 failed=1" in err


@pytest.mark.slow
def test_kill_9_mid_batch_loses_nothing_and_acks_nothing_twice(effects_queue, spawn, tmp_path):
    q = effects_queue(visibility_timeout=2)
    marker = tmp_path / "started"
    bodies: list[dict[str, Any]] = [{"n": i} for i in range(6)]
    bodies[3] = {"marker": str(marker), "sleep_first": 120}
    ids = pgq.send_batch(q, bodies)
    first = spawn(*WORKER, "--queue", q.name, "--batch-size", "10")
    wait_until(marker.exists, what="the fourth handler of the batch to start")
    os.kill(first.pid, signal.SIGKILL)
    first.wait(timeout=10)
    # Three handlers had finished and written; none of it committed, nothing was acked.
    assert effects(q) == []
    assert pgq.metrics(q).queue_length == 6
    assert [pgq.read_by_id(q, i).read_ct for i in ids] == [1] * 6
    wait_until(
        lambda: all(pgq.read_by_id(q, i).vt <= timezone.now() for i in ids),
        what="the leases to expire",
    )
    code, err = finish(spawn(*WORKER, "--queue", q.name, "--once", "--batch-size", "10"))
    assert code == 0, err
    assert effects(q) == [(i, 2) for i in ids]  # each once, on its second delivery
    assert pgq.metrics(q).queue_length == 0
    assert "event=batch_committed" in err


@pytest.mark.slow
def test_sigterm_mid_batch_commits_the_finished_handlers_and_releases_the_rest(
    effects_queue, spawn, tmp_path
):
    q = effects_queue(visibility_timeout=30)
    marker = tmp_path / "started"
    ids = pgq.send_batch(q, [{"n": 0}, {"marker": str(marker), "sleep": 2}, {"n": 2}, {"n": 3}])
    proc = spawn(*WORKER, "--queue", q.name, "--batch-size", "10", "--grace", "60")
    wait_until(marker.exists, what="the second handler of the batch to start")
    proc.send_signal(signal.SIGTERM)
    code, err = finish(proc)
    assert code == 0, err
    assert effects(q) == [(ids[0], 1), (ids[1], 1)]
    for unstarted in ids[2:]:
        released = pgq.read_by_id(q, unstarted)
        assert released.read_ct == 0 and released.vt <= timezone.now()
    assert pgq.metrics(q).in_flight == 0


@pytest.mark.slow
def test_a_batch_cut_by_the_grace_period_rolls_back_and_only_the_cut_attempt_counts(
    effects_queue, spawn, tmp_path
):
    q = effects_queue(visibility_timeout=60, retry_delay=0, backoff="none", max_retries=5)
    marker = tmp_path / "started"
    ids = pgq.send_batch(q, [{"n": 0}, {"marker": str(marker), "sleep": 120}, {"n": 2}])
    proc = spawn(*WORKER, "--queue", q.name, "--batch-size", "10", "--grace", "1")
    wait_until(marker.exists, what="the second handler of the batch to start")
    proc.send_signal(signal.SIGTERM)
    code, err = finish(proc)
    assert code == 1, err
    assert "event=grace_expired" in err
    assert effects(q) == []  # the whole batch rolled back, the finished handler's write too
    finished, cut, unstarted = (pgq.read_by_id(q, i) for i in ids)
    assert cut.read_ct == 1 and cut.vt <= timezone.now()  # nacked: the cut attempt counts
    assert finished.read_ct == 0 and unstarted.read_ct == 0  # released uncounted
    assert pgq.metrics(q).in_flight == 0


@pytest.mark.slow
def test_a_batch_that_outlasts_its_leases_keeps_them_extended(effects_queue, spawn, tmp_path):
    """Three 1.5-second handlers in a batch on a 2-second lease: no second delivery."""
    q = effects_queue(visibility_timeout=2)
    marker = tmp_path / "started"
    ids = pgq.send_batch(q, [{"marker": str(marker), "sleep": 1.5} for _ in range(3)])
    first = spawn(*WORKER, "--queue", q.name, "--batch-size", "10")
    wait_until(marker.exists, what="the batch to start")
    second = spawn(*WORKER, "--queue", q.name, "--batch-size", "10", "--poll-interval", "0.2")
    wait_until(lambda: len(effects(q)) == 3, what="the batch to commit")
    wait_for_workers(first, second)
    for proc in (first, second):
        proc.send_signal(signal.SIGTERM)
    for proc in (first, second):
        code, err = finish(proc)
        assert code == 0, err
        assert "event=batch_lease_lost" not in err
    assert effects(q) == [(i, 1) for i in ids]  # each once, on its first delivery
    assert pgq.metrics(q).queue_length == 0


@pytest.mark.slow
def test_four_batch_workers_process_2000_messages_each_exactly_once(effects_queue, spawn):
    q = effects_queue(visibility_timeout=30)
    ids = pgq.send_batch(q, [{"n": i} for i in range(2000)])
    procs = [
        spawn(*WORKER, "--queue", q.name, "--batch-size", "100", "--concurrency", "2")
        for _ in range(4)
    ]
    wait_until(lambda: len(effects(q)) >= 2000, timeout=150, what="2000 effects")
    wait_for_workers(*procs)  # one slow to start may have had nothing left to do
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        code, err = finish(proc)
        assert code == 0, err
    assert effects(q) == [(i, 1) for i in ids]
    assert pgq.metrics(q).queue_length == 0


def test_a_batch_runs_inside_a_callers_transaction_as_savepoints(make_queue, transactional_db):
    """Driven from inside an atomic block (a test, an embedding app), the batch nests."""
    q = make_queue()
    pgq.send_batch(q, [{}, {}])
    with transaction.atomic():
        assert batch_worker(q, lambda m: None).work_once()
        assert pgq.metrics(q).queue_length == 0
    assert pgq.metrics(q).queue_length == 0


# -- the API batch commit acknowledges with ----------------------------------------------------


def test_complete_acknowledges_a_list_of_receipts_in_one_statement(make_queue, transactional_db):
    q = make_queue(archive_on_ack=True)
    ids = pgq.send_batch(q, [{"n": i} for i in range(3)])
    leased = pgq.read(q, qty=3, vt=0)
    pgq.read(q, qty=1, vt=300)  # the first one is leased again: its old receipt is stale
    with pytest.raises(pgq.InvalidArgument, match="result cannot be stored"):
        pgq.complete(q, [m.receipt for m in leased], result=float("inf"))
    assert pgq.metrics(q).queue_length == 3  # the refusal changed nothing
    assert pgq.complete(q, 2**40) is False  # (the process learns the queue's shape, once)
    with statements_run() as seen:
        acked = pgq.complete(q, [m.receipt for m in leased], result={"ok": True})
    assert sorted(acked) == ids[1:]
    assert sum(s in ACK_STATEMENTS for s in seen) == 1
    assert [pgq.result(i).result for i in ids[1:]] == [{"ok": True}] * 2
    assert pgq.result(ids[0]).outcome == "leased"
    assert pgq.complete(q, leased[0].receipt) is False  # one reference still answers a bool
