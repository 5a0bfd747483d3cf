"""The worker's small parts, each on its own: registry, executor, leases, notifier, leader."""

from __future__ import annotations

import time

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

import pgq_django as pgq
from pgq_django.worker import maintenance, registry
from pgq_django.worker.executor import Outcome, execute
from pgq_django.worker.leader import Leader, LeaderConfig
from pgq_django.worker.leases import LeaseExtender
from pgq_django.worker.loop import Worker
from pgq_django.worker.notifier import Notifier, Wakeup
from tests.conftest import time_passes
from tests.worker_handlers import EFFECTS_DDL


@pytest.fixture
def effects_table(db):
    with connection.cursor() as cur:
        cur.execute(EFFECTS_DDL)


def effect_count(queue) -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM test_effects WHERE queue = %s", [queue.name])
        return cur.fetchone()[0]


def _writer(message):
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO test_effects VALUES (%s, %s, %s, 0)",
            [message.queue_name, message.msg_id, message.read_ct],
        )
    if message.message.get("fail"):
        raise RuntimeError("handler failed")
    return {"ok": message.msg_id}


def test_the_handler_decorator_registers_sync_and_async_functions(db):
    @pgq.handler("reg_sync", vt=5, batch=3)
    def sync_handler(message):
        return 1

    @pgq.handler("reg_async")
    async def async_handler(message):
        return 2

    found = registry.registered()
    assert found["reg_sync"].func is sync_handler and not found["reg_sync"].is_async
    assert (found["reg_sync"].vt, found["reg_sync"].batch) == (5.0, 3)
    assert found["reg_async"].is_async
    registry.unregister("reg_sync")
    registry.unregister("reg_async")
    with pytest.raises(pgq.InvalidName):
        pgq.handler("bad name!")


def test_resolve_prefers_decorated_handlers_over_callbacks_and_rejects_unknown_queues(queue):
    pgq.register_callback(queue, "json.dumps")
    assert registry.resolve([queue.name])[queue.name].func.__name__ == "dumps"
    pgq.handler(queue.name)(_writer)
    try:
        assert registry.resolve([queue.name])[queue.name].func is _writer
    finally:
        registry.unregister(queue.name)
    with pytest.raises(pgq.InvalidArgument, match="No handler"):
        registry.resolve(["nobody_handles_this"])


def test_execute_commits_the_handlers_writes_with_the_ack(make_queue, effects_table):
    q = make_queue(archive_on_ack=True)
    msg_id = pgq.send(q, {})
    (m,) = pgq.read(q)
    assert execute(registry.Handler(q.name, _writer), m) is Outcome.ACKED
    assert effect_count(q) == 1
    assert pgq.result(msg_id).result == {"ok": msg_id}


def test_a_failing_handler_rolls_back_its_writes_and_nacks_with_the_error(
    make_queue, effects_table
):
    q = make_queue(max_retries=0)
    msg_id = pgq.send(q, {"fail": True})
    (m,) = pgq.read(q)
    assert execute(registry.Handler(q.name, _writer), m) is Outcome.FAILED
    assert effect_count(q) == 0
    dead = pgq.result(msg_id)
    assert dead.outcome == "dead"
    assert "RuntimeError: handler failed" in dead.error


def test_a_handler_whose_lease_was_taken_over_rolls_back(make_queue, effects_table):
    q = make_queue()
    pgq.send(q, {})
    (stale,) = pgq.read(q, vt=0)
    (current,) = pgq.read(q, vt=30)  # someone else leased it again
    assert execute(registry.Handler(q.name, _writer), stale) is Outcome.LEASE_LOST
    assert effect_count(q) == 0
    assert pgq.read_by_id(q, current.msg_id).read_ct == 2


def test_a_cancelled_message_is_archived_without_running_its_handler(queue, effects_table):
    msg_id = pgq.send(queue, {})
    (m,) = pgq.read(queue, vt=30)
    assert pgq.cancel(queue, msg_id)  # leased, so it is only flagged
    pgq.set_vt(queue, m.receipt, 0)  # the consumer gave it back without finishing
    (again,) = pgq.read(queue)
    assert execute(registry.Handler(queue.name, _writer), again) is Outcome.CANCELLED
    assert effect_count(queue) == 0
    assert pgq.result(msg_id).outcome == "cancelled"


def test_async_handlers_write_in_the_same_transaction_as_the_ack(make_queue, effects_table):
    from asgiref.sync import sync_to_async

    async def handler(message):
        await sync_to_async(_writer)(message)
        raise ValueError("after the write")

    q = make_queue(max_retries=0)
    pgq.send(q, {})
    (m,) = pgq.read(q)
    assert execute(registry.Handler(q.name, handler), m) is Outcome.FAILED
    assert effect_count(q) == 0


def test_the_lease_extender_extends_leases_that_are_half_used(queue):
    pgq.send(queue, {})
    (m,) = pgq.read(queue, vt=2)
    leases = LeaseExtender()
    leases.track(queue.name, m, 120)
    assert leases.extend_due() == 0  # a fresh lease is left alone
    before = pgq.read_by_id(queue, m.msg_id).vt
    assert leases.extend_due(now=time.monotonic() + 61) == 1  # past half of its 120 s
    assert (pgq.read_by_id(queue, m.msg_id).vt - before).total_seconds() > 100
    pgq.delete(queue, m.receipt)
    assert leases.extend_due(now=time.monotonic() + 61) == 0 and leases.held() == {}  # acked


def test_release_all_hands_back_every_tracked_lease(queue):
    pgq.send_batch(queue, [1, 2])
    leases = LeaseExtender()
    for m in pgq.read(queue, qty=2, vt=60):
        leases.track(queue.name, m, 60)
    assert leases.release_all() == 2
    assert len(pgq.read(queue, qty=2)) == 2


@pytest.mark.django_db(transaction=True)
def test_the_notifier_wakes_idle_threads_when_a_served_queue_gets_a_message():
    q = pgq.create_queue("notified_q")
    wakeup = Wakeup()
    notifier = Notifier([q.name], wakeup)
    notifier.start()
    try:
        assert notifier.ready.wait(10)
        seen = wakeup.generation
        pgq.send(q, {})
        assert wakeup.wait(seen, timeout=10)
    finally:
        notifier.stop()


@pytest.mark.django_db(transaction=True)
def test_only_one_leader_at_a_time_and_another_takes_over_when_it_stops():
    ran: list[str] = []
    fast = LeaderConfig(interval=0.05)
    first = Leader([maintenance.Duty("a", lambda: ran.append("a"), 3600)], config=fast)
    second = Leader([maintenance.Duty("b", lambda: ran.append("b"), 3600)], config=fast)
    assert first.try_elect() is True
    assert second.try_elect() is False
    first.resign()
    assert second.try_elect() is True
    second.resign()
    first.start()
    try:
        assert first.elected.wait(10)
    finally:
        first.stop()
    assert "a" in ran


def test_a_failing_duty_does_not_stop_the_others(db):
    def broken():
        raise RuntimeError("duty failed")

    done = maintenance.run_due(
        [maintenance.Duty("broken", broken, 1), maintenance.Duty("ok", lambda: 7, 1)]
    )
    assert done == {"ok": 7}


def test_default_duties_run_expiry_retention_and_rescue(queue):
    pgq.send(queue, {}, expires_in=1)
    time_passes(queue, 2)
    done = maintenance.run_due(maintenance.default_duties(60), force=True)
    assert done["expire"] == 1
    assert set(done) >= {"rescue", "expire", "retention", "counters", "partitions"}


@pytest.mark.django_db(transaction=True)
def test_a_worker_with_once_drains_every_served_queue_and_returns(effects_table):
    a, b = pgq.create_queue("drain_a"), pgq.create_queue("drain_b")
    pgq.send_batch(a, [{} for _ in range(25)])
    pgq.send_batch(b, [{} for _ in range(5)])
    handlers = {q.name: registry.Handler(q.name, _writer, batch=4) for q in (a, b)}
    assert Worker(handlers=handlers, concurrency=2, once=True).run() == 0
    assert (effect_count(a), effect_count(b)) == (25, 5)


@pytest.mark.django_db(transaction=True)
def test_a_worker_grows_threads_under_backlog_up_to_max_workers(effects_table):
    import threading

    q = pgq.create_queue("scaling_q")
    gate = threading.Event()

    def slow(message):
        gate.wait(30)

    pgq.send_batch(q, [{} for _ in range(6)])
    worker = Worker(
        handlers={q.name: registry.Handler(q.name, slow, batch=1)},
        min_workers=1,
        max_workers=3,
        idle_timeout=0.1,
        poll_interval=0.1,
        lead=False,
    )
    worker.start()
    try:
        deadline = time.monotonic() + 30
        while worker.threads < 3 and time.monotonic() < deadline:
            worker.scale()
            time.sleep(0.05)
        assert worker.threads == 3
        worker.scale()
        assert worker.threads == 3  # never above max_workers
    finally:
        gate.set()
    deadline = time.monotonic() + 30
    while worker.threads > 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert worker.threads == 1  # idle threads above min retire
    assert worker.shutdown() == 0


def test_the_command_rejects_contradictory_or_unknown_arguments(db):
    with pytest.raises(CommandError, match="not both"):
        call_command("pgq_worker", "--concurrency", "2", "--max-workers", "3")
    with pytest.raises(CommandError, match="No handler"):
        call_command("pgq_worker", "--queue", "nobody_serves_it", "--once")
    with pytest.raises(CommandError):
        call_command("pgq_worker", "--min-workers", "4", "--max-workers", "2")


def test_the_handler_decorator_takes_a_timeout(db):
    try:
        pgq.handler("timed_q", timeout=2.5)(_writer)
        assert registry.registered()["timed_q"].timeout == 2.5
        with pytest.raises(pgq.InvalidArgument):
            pgq.handler("timed_q", timeout=0)(_writer)
        with pytest.raises(pgq.InvalidArgument):
            pgq.handler("timed_q", timeout="soon")(_writer)
    finally:
        registry.unregister("timed_q")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("batch_commit", [False, True], ids=["per-message", "batch-commit"])
def test_a_worker_runs_a_fifo_group_one_message_at_a_time(effects_table, batch_commit):
    # A FIFO read may lease a group's run; the worker must still retry a failed message
    # before the next of its group runs.
    q = pgq.create_queue(f"worker_group_{int(batch_commit)}.fifo", retry_delay=300)
    first, second = pgq.send_batch(q, [{"fail": True}, {}], group="g")
    other = pgq.send(q, {}, group="h")
    handler = registry.Handler(q.name, _writer, batch=10, batch_commit=batch_commit)
    worker = Worker(handlers={q.name: handler}, listen=False, lead=False)
    assert worker.work_once()
    assert effect_count(q) == 1  # "h" ran; the failed first of "g" rolled back
    assert pgq.read_by_id(q, other) is None
    assert pgq.read_by_id(q, first).read_ct == 1  # failed, waiting for its retry
    assert pgq.read_by_id(q, second).read_ct == 0  # given back unstarted, behind it
    assert pgq.read(q, qty=10) == []  # the group waits for its first message's retry
