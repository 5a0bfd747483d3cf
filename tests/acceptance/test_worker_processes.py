"""The worker's guarantees, proved with real worker processes against real PostgreSQL.

Each test starts ``manage.py pgq_worker`` children (the ``spawn`` fixture) on the test
database and checks side effects in ``test_effects``, which handlers write inside the same
transaction as their ack.
"""

from __future__ import annotations

import os
import signal

import pytest
from django.db import connection
from django.utils import timezone

import pgq_django as pgq
from tests.conftest import wait_for_workers, wait_until
from tests.worker_handlers import EFFECTS_DDL

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

WORKER = ("-m", "django", "pgq_worker", "--import", "tests.worker_handlers", "-v", "2")


@pytest.fixture
def effects_queue(make_queue):
    """A queue whose messages the ``record`` callback handles."""
    with connection.cursor() as cur:
        cur.execute(EFFECTS_DDL)

    def make(**options):
        q = make_queue(**options)
        pgq.register_callback(q, "tests.worker_handlers.record")
        return q

    return make


def effects(queue) -> list[tuple[int, int, int]]:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT msg_id, attempt, pid FROM test_effects WHERE queue = %s ORDER BY msg_id",
            [queue.name],
        )
        return cur.fetchall()


def finish(proc, timeout: float = 120.0) -> tuple[int, str]:
    _out, err = proc.communicate(timeout=timeout)
    return proc.returncode, err


def test_kill_9_mid_handler_redelivers_and_side_effects_happen_once(effects_queue, spawn, tmp_path):
    q = effects_queue(visibility_timeout=2)
    marker = tmp_path / "started"
    msg_id = pgq.send(q, {"marker": str(marker), "sleep_first": 120})
    first = spawn(*WORKER, "--queue", q.name)
    wait_until(marker.exists, what="the handler to start")
    os.kill(first.pid, signal.SIGKILL)
    first.wait(timeout=10)
    # The handler had written its row; the kill rolled it back with the lease.
    assert effects(q) == []
    wait_until(lambda: pgq.read_by_id(q, msg_id).vt <= timezone.now(), what="lease expiry")
    code, err = finish(spawn(*WORKER, "--queue", q.name, "--once"))
    assert code == 0, err
    assert [(m, attempt) for m, attempt, _pid in effects(q)] == [(msg_id, 2)]
    assert pgq.read_by_id(q, msg_id) is None


def test_sigterm_lets_a_long_handler_finish_exits_0_and_leaves_nothing_leased(
    effects_queue, spawn, tmp_path
):
    q = effects_queue(visibility_timeout=30)
    marker = tmp_path / "started"
    long_id = pgq.send(q, {"marker": str(marker), "sleep": 2})
    waiting_id = pgq.send(q, {"n": 2})  # leased in the same batch, never started
    proc = spawn(*WORKER, "--queue", q.name, "--grace", "60")
    wait_until(marker.exists, what="the handler to start")
    proc.send_signal(signal.SIGTERM)
    code, err = finish(proc)
    assert code == 0, err
    assert [m for m, _a, _p in effects(q)] == [long_id]
    assert pgq.read_by_id(q, long_id) is None
    released = pgq.read_by_id(q, waiting_id)
    assert released.vt <= timezone.now()
    assert released.read_ct == 0
    assert pgq.metrics(q).in_flight == 0


def test_a_poison_message_reaches_the_dlq_after_max_retries_plus_one_attempts(
    effects_queue, make_queue, spawn, tmp_path
):
    dlq = make_queue()
    q = effects_queue(max_retries=2, retry_delay=0, backoff="none", dead_letter_queue=dlq)
    attempts = tmp_path / "attempts"
    poison = pgq.send(q, {"fail": True, "attempts_file": str(attempts)})
    others = pgq.send_batch(q, [{"n": i} for i in range(30)])
    code, err = finish(spawn(*WORKER, "--queue", q.name, "--once"))
    assert code == 1, err  # handlers failed: --once says so
    assert attempts.read_text().split() == ["1", "2", "3"]
    assert sorted(m for m, _a, _p in effects(q)) == others
    (dead,) = pgq.read(dlq)
    assert dead.msg_id == poison
    history = dead.headers["pgq_dead_letter"]
    assert history["attempts"] == 3 and history["original_queue"] == q.name
    assert "ValueError: poison message" in history["last_error"]
    assert pgq.metrics(q).queue_length == 0


def test_four_workers_process_2000_messages_each_exactly_once(effects_queue, spawn):
    q = effects_queue(visibility_timeout=30)
    ids = pgq.send_batch(q, [{"n": i} for i in range(2000)])
    procs = [spawn(*WORKER, "--queue", q.name, "--concurrency", "2") for _ in range(4)]
    wait_until(lambda: len(effects(q)) >= 2000, timeout=150, what="2000 effects")
    wait_for_workers(*procs)  # one slow to start may have had nothing left to do
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        code, err = finish(proc)
        assert code == 0, err
    done = effects(q)
    assert sorted(m for m, _a, _p in done) == ids  # every message once, none twice
    # Nobody crashed and every handler is quick, so no lease ran out: each message was
    # delivered exactly once, on its first attempt, and the work was shared out.
    assert {attempt for _m, attempt, _p in done} == {1}
    assert len({pid for _m, _a, pid in done}) > 1
    assert pgq.metrics(q).queue_length == 0


def test_an_async_decorated_handler_runs_in_a_worker_process(db_queue_named, spawn):
    q = db_queue_named("worker_decorated_async", archive_on_ack=True)
    msg_id = pgq.send(q, {"n": 1})
    code, err = finish(spawn(*WORKER, "--queue", q.name, "--once"))
    assert code == 0, err
    assert [m for m, _a, _p in effects(q)] == [msg_id]
    assert pgq.result(msg_id).result == "async-ok"


@pytest.fixture
def db_queue_named(transactional_db):
    with connection.cursor() as cur:
        cur.execute(EFFECTS_DDL)

    def make(name, **options):
        return pgq.create_queue(name, **options)

    return make


def test_a_worker_for_a_queue_without_handler_refuses_to_start(spawn, transactional_db):
    pgq.create_queue("no_handler_here")
    code, err = finish(spawn(*WORKER, "--queue", "no_handler_here", "--once"))
    assert code != 0
    assert "No handler for queue(s) no_handler_here" in err


def test_once_exits_1_and_counts_failures_apart_when_a_handler_failed(effects_queue, spawn):
    q = effects_queue(max_retries=0)
    pgq.send_batch(q, [{"n": 1}, {"fail": True}, {"n": 3}])
    proc = spawn(*WORKER, "--queue", q.name, "--once")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    assert out.strip() == "processed=2 failed=1"
    assert "event=worker_stopped" in err and "processed=2 failed=1" in err
    assert pgq.metrics(q).dead_letters == 1

    # Nothing failed: status 0, and the summary says so.
    pgq.send(q, {"n": 4})
    proc = spawn(*WORKER, "--queue", q.name, "--once")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert out.strip() == "processed=1 failed=0"


@pytest.mark.parametrize("kind", ["exit", "interrupt"])
def test_a_handler_raising_systemexit_or_keyboardinterrupt_is_nacked_and_the_worker_goes_on(
    effects_queue, spawn, kind
):
    q = effects_queue(retry_delay=3600, backoff="none")
    bad = pgq.send(q, {kind: True})
    after = pgq.send_batch(q, [{"n": 1}, {"n": 2}])
    # One thread: had the exception killed it, the messages after the bad one would wait.
    _code, err = finish(spawn(*WORKER, "--queue", q.name, "--once", "--concurrency", "1"))
    assert sorted(m for m, _a, _p in effects(q)) == after  # the bad one's write rolled back
    left = pgq.read_by_id(q, bad)
    assert left.read_ct == 1 and left.vt > timezone.now()  # nacked: back after retry_delay
    assert "event=message_failed" in err and ("SystemExit" in err or "KeyboardInterrupt" in err)


def test_an_attempt_cut_by_the_grace_period_counts_and_is_nacked(effects_queue, spawn, tmp_path):
    q = effects_queue(visibility_timeout=60, retry_delay=0, backoff="none", max_retries=5)
    marker = tmp_path / "started"
    cut = pgq.send(q, {"marker": str(marker), "sleep": 120})
    waiting = pgq.send(q, {"n": 2})  # leased in the same batch, never started
    proc = spawn(*WORKER, "--queue", q.name, "--grace", "1")
    wait_until(marker.exists, what="the handler to start")
    proc.send_signal(signal.SIGTERM)
    code, err = finish(proc)
    assert code == 1, err  # the grace period ran out
    assert "event=grace_expired" in err
    assert effects(q) == []  # the cut handler's transaction rolled back
    counted = pgq.read_by_id(q, cut)
    assert counted.read_ct == 1  # the cut attempt counts…
    assert counted.vt <= timezone.now()  # …and the message is back (retry_delay 0)
    assert pgq.read_by_id(q, waiting).read_ct == 0  # the unstarted one does not count


def test_a_hung_handler_times_out_its_lease_is_not_extended_and_it_is_dead_lettered(
    effects_queue, make_queue, spawn, tmp_path
):
    dlq = make_queue()
    q = effects_queue(visibility_timeout=2, max_retries=0, dead_letter_queue=dlq)
    marker = tmp_path / "started"
    hung = pgq.send(q, {"marker": str(marker), "sleep": 600})
    proc = spawn(*WORKER, "--queue", q.name, "--handler-timeout", "1", "--grace", "0")
    wait_until(marker.exists, what="the handler to start")
    wait_until(lambda: pgq.read_by_id(dlq, hung) is not None, what="the timed-out message")
    dead = pgq.read_by_id(dlq, hung)
    assert "past its timeout of 1 s" in dead.headers["pgq_dead_letter"]["last_error"]
    assert dead.headers["pgq_dead_letter"]["attempts"] == 1
    proc.send_signal(signal.SIGTERM)
    _code, err = finish(proc)
    assert "event=handler_timeout" in err
    assert effects(q) == []  # the hung attempt never committed


def test_a_worker_with_queue_imports_only_the_served_queues_callbacks(
    effects_queue, make_queue, spawn, tmp_path
):
    """A broken callback module of one queue does not stop workers serving other queues."""
    served = effects_queue()
    pgq.send(served, {})
    canary = make_queue()
    pgq.register_callback(canary, "tests.import_canary.handle")  # imported here, in the test
    pgq.send(canary, {})
    imports = tmp_path / "imports"
    env = {"PGQ_IMPORT_CANARY": str(imports), "PGQ_IMPORT_CANARY_FAILS": "1"}
    proc = spawn(*WORKER, "--queue", served.name, "--once", **env)
    code, err = finish(proc)
    assert code == 0, err
    assert len(effects(served)) == 1
    assert not imports.exists(), "the worker imported another queue's callback"
    assert pgq.metrics(canary).queue_length == 1  # left for a worker that serves it
    # Serving every queue, the broken callback is logged and its queue skipped.
    pgq.send(served, {})
    code, err = finish(spawn(*WORKER, "--once", **env))
    assert code == 0, err
    assert "event=callback_import_failed" in err and "cannot be imported" in err
    assert len(effects(served)) == 2
    assert pgq.metrics(canary).queue_length == 1
    imports.unlink()
    # The control: serving the canary's queue does import it (and here the import fails).
    proc = spawn(*WORKER, "--queue", canary.name, "--once", PGQ_IMPORT_CANARY=str(imports))
    code, err = finish(proc)
    assert code == 0, err
    assert imports.read_text().split() == [str(proc.pid)]
    assert pgq.metrics(canary).queue_length == 0
