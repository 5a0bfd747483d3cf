"""The worker's background services: the start/stop base, then each service on its own.

Each service (lease extender, notifier listener, leader) is started and stopped alone, with
real threads and a real PostgreSQL, as River tests its services one by one.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import pytest

import pgq_django as pgq
from pgq_django.services import ProcessService, Service, ServiceConfig
from pgq_django.worker import maintenance
from pgq_django.worker.leader import Leader, LeaderConfig
from pgq_django.worker.leases import LeaseExtender, LeaseExtenderConfig
from pgq_django.worker.notifier import Notifier, NotifierConfig, Wakeup
from tests.conftest import wait_until

# -- the base ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class CounterConfig(ServiceConfig):
    interval: float = 0.01
    stop_timeout: float = 30.0


class Counter(Service[CounterConfig]):
    """Counts its turns; fails on purpose when told to."""

    thread_name = "pgq-test-counter"

    def __init__(self, config: CounterConfig | None = None, *, fail: bool = False) -> None:
        super().__init__(config or CounterConfig())
        self.turns = 0
        self.fail = fail

    def run(self) -> None:
        while not self.sleep(self.config.interval):
            if self.fail:
                raise RuntimeError("the service broke")
            self.turns += 1


def _thread_names() -> set[str]:
    return {t.name for t in threading.enumerate()}


def test_a_service_runs_on_a_named_thread_until_stopped_and_can_start_again():
    counter = Counter()
    assert not counter.is_running and counter.stop()  # stopping before a start is harmless
    counter.start()
    wait_until(lambda: counter.turns > 2, what="the service's turns")
    assert counter.is_running and "pgq-test-counter" in _thread_names()
    counter.start()  # already running: no second thread
    assert sum(t.name == "pgq-test-counter" for t in threading.enumerate()) == 1
    assert counter.stop() is True
    assert not counter.is_running and counter.stopping
    stopped_at = counter.turns
    counter.start()
    assert not counter.stopping
    wait_until(lambda: counter.turns > stopped_at, what="turns after a restart")
    assert counter.stop() and counter.stop()  # a second stop is harmless too


def test_stop_wakes_a_service_sleeping_a_long_interval():
    """stop() returns once the thread ended; with an hour's interval that needs a wake-up."""
    counter = Counter(CounterConfig(interval=3600))
    counter.start()
    wait_until(lambda: counter.is_running, what="the thread")
    assert counter.stop() is True
    assert counter.turns == 0


def test_a_service_that_fails_ends_its_thread_and_logs_why(caplog):
    counter = Counter(fail=True)
    counter.start()
    assert counter.wait(30) is True
    assert not counter.is_running
    assert "event=service_failed service=pgq-test-counter" in caplog.text


def test_wait_answers_false_while_the_thread_is_still_running():
    counter = Counter(CounterConfig(interval=3600))
    counter.start()
    try:
        assert counter.wait(0) is False
    finally:
        counter.stop()


class Sleeper(ProcessService[CounterConfig]):
    """A process service that runs until stopped (as the counter flusher does while busy)."""

    thread_name = "pgq-test-sleeper"

    def run(self) -> None:
        while not self.sleep(self.config.interval):
            pass


def test_many_first_calls_at_once_start_a_process_service_once_and_none_waits_for_it():
    """Senders racing to start an idle service: one starts it, the others find it running.
    None joins a thread not started yet (an error), or the new thread (it runs until
    stopped, so such a caller would never return)."""
    sleeper = Sleeper(CounterConfig(interval=3600))
    callers, errors, gate = [], [], threading.Barrier(16)

    def first_send() -> None:
        gate.wait()
        try:
            sleeper.ensure_started()
        except BaseException as exc:  # reported below
            errors.append(exc)

    try:
        for _ in range(16):
            callers.append(threading.Thread(target=first_send))
            callers[-1].start()
        for caller in callers:
            caller.join(30)
        assert not [c for c in callers if c.is_alive()], "a caller waits for the new thread"
        assert errors == []
        assert sleeper.is_running
        assert [t.name for t in threading.enumerate()].count("pgq-test-sleeper") == 1
    finally:
        sleeper.stop()
        sleeper.retire()


def test_each_service_has_its_own_defaults():
    assert LeaseExtenderConfig().interval == 0.5
    assert NotifierConfig().retry_interval == 1.0
    assert LeaderConfig().stop_timeout == 10.0
    assert LeaseExtender().thread_name != Leader([]).thread_name


# -- each service alone ---------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_lease_extender_alone_keeps_a_lease_alive_while_it_runs(queue_name):
    queue = pgq.create_queue(queue_name)
    pgq.send(queue, {})
    (message,) = pgq.read(queue, vt=2)
    first_vt = message.vt
    leases = LeaseExtender(LeaseExtenderConfig(interval=0.05))
    leases.track(queue.name, message, 2)
    leases.start()
    try:
        assert "pgq-leases" in _thread_names()
        # Half of the 2 s lease passes, then the thread pushes vt a further 2 s ahead.
        wait_until(
            lambda: pgq.read_by_id(queue, message.msg_id).vt > first_vt,
            what="the lease to be extended",
        )
    finally:
        assert leases.stop() is True
    assert not leases.is_running
    assert pgq.delete(queue, message.receipt) is True  # still our lease: not re-delivered


@pytest.mark.django_db(transaction=True)
def test_the_notifier_alone_wakes_waiters_and_stops(queue_name):
    queue = pgq.create_queue(queue_name)
    wakeup = Wakeup()
    notifier = Notifier([queue.name], wakeup, config=NotifierConfig(interval=0.05))
    notifier.start()
    try:
        assert notifier.ready.wait(30)
        assert notifier.is_running and "pgq-notifier" in _thread_names()
        seen = wakeup.generation
        pgq.send(queue, {})
        assert wakeup.wait(seen, timeout=30)
    finally:
        assert notifier.stop() is True
    assert not notifier.is_running


@pytest.mark.django_db(transaction=True)
def test_the_leader_alone_runs_its_duties_and_hands_the_lock_back_when_stopped():
    ran = threading.Event()
    leader = Leader([maintenance.Duty("mark", ran.set, 3600)], config=LeaderConfig(interval=0.05))
    follower = Leader([])
    leader.start()
    try:
        assert leader.elected.wait(30) and ran.wait(30)
        assert leader.is_running and "pgq-leader" in _thread_names()
        assert follower.try_elect() is False
    finally:
        assert leader.stop() is True
    try:
        assert not leader.is_running and not leader.is_leader
        assert follower.try_elect() is True  # the stopped leader released the lock
    finally:
        follower.resign()
