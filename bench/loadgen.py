"""Load for the long-running benches (``bench.pressure``, ``bench.chaos``): a producer and
consumers per contender, in forked processes, that keep going through faults.

Two clients do the same work on one queue each:

- :class:`PgqClient`: pgq_django's public API (``send_batch``, ``read_with_poll``,
  ``delete`` by receipt), with its own recovery from lost connections;
- :class:`PgmqClient`: PGMQ's SQL functions (``pgmq.send_batch``, ``pgmq.read_with_poll``,
  ``pgmq.delete``) over one plain psycopg connection, made again after an error, as a
  careful PGMQ user's loop would.

Every message body carries its sequence number and the time it was sent on a clock all
processes share, so a consumer knows each message's pickup latency and which messages it
saw. A failed call is retried after a short pause by the loop, never inside the client, for
both contenders alike; a failed send is recorded as *unknown* (it may have committed), not as
sent, so "lost" counts only sends that returned.
"""

from __future__ import annotations

import json
import math
import os
import signal
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import psycopg
from psycopg.types.json import Jsonb

from .common import clock

PAD = "x" * 64
#: How long a loop waits after a failed call before the next one.
PAUSE_AFTER_ERROR = 0.2
#: How often a fixed-rate producer sends a batch (seconds between batches).
TICK = 0.025


class NotSent(Exception):
    """A send that certainly did not happen (no connection could be made for it)."""


class Client(Protocol):
    def send(self, bodies: list[dict[str, Any]]) -> int: ...
    def read(self, qty: int, wait: int) -> list[tuple[Any, dict[str, Any]]]: ...
    def delete(self, refs: list[Any]) -> None: ...
    def close(self) -> None: ...


class PgqClient:
    """pgq_django's Python API, as an application calls it."""

    def __init__(self, queue: str, vt: int) -> None:
        self.queue, self.vt = queue, vt

    def send(self, bodies: list[dict[str, Any]]) -> int:
        import pgq_django as pgq
        from pgq_django.exceptions import DatabaseUnavailable

        try:
            return len(pgq.send_batch(self.queue, bodies))
        except DatabaseUnavailable as exc:  # documented: nothing was sent
            raise NotSent from exc

    def read(self, qty: int, wait: int) -> list[tuple[Any, dict[str, Any]]]:
        import pgq_django as pgq

        found = pgq.read_with_poll(self.queue, vt=self.vt, qty=qty, max_poll_seconds=wait)
        return [(m.receipt, m.message) for m in found]  # type: ignore[misc]

    def delete(self, refs: list[Any]) -> None:
        import pgq_django as pgq

        pgq.delete(self.queue, refs)

    def close(self) -> None:
        from django.db import connections

        connections.close_all()


class PgmqClient:
    """PGMQ's SQL functions over one autocommit psycopg connection, made again after an
    error (a lost connection cannot be reused)."""

    def __init__(self, params: dict[str, Any], queue: str, vt: int) -> None:
        self.params, self.queue, self.vt = params, queue, vt
        self.conn: psycopg.Connection[Any] | None = None

    def _execute(self, statement: str, args: list[Any]) -> list[Any]:
        if self.conn is None or self.conn.closed:
            try:
                self.conn = psycopg.connect(**self.params, autocommit=True)
            except psycopg.OperationalError as exc:
                raise NotSent from exc
        try:
            return self.conn.execute(statement, args).fetchall()
        except psycopg.OperationalError:
            self.close()
            raise

    def send(self, bodies: list[dict[str, Any]]) -> int:
        sql = "SELECT * FROM pgmq.send_batch(%s, %s::jsonb[])"
        return len(self._execute(sql, [self.queue, [Jsonb(b) for b in bodies]]))

    def read(self, qty: int, wait: int) -> list[tuple[Any, dict[str, Any]]]:
        sql = "SELECT msg_id, message FROM pgmq.read_with_poll(%s, %s, %s, %s, 10)"
        return [(r[0], r[1]) for r in self._execute(sql, [self.queue, self.vt, qty, wait])]

    def delete(self, refs: list[Any]) -> None:
        self._execute("SELECT * FROM pgmq.delete(%s, %s::bigint[])", [self.queue, refs])

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.conn = None


# -- latency histograms ------------------------------------------------------------------------

_BASE_MS = 0.05
_STEP = math.log(1.04)  # buckets 4 % apart: a percentile is exact to within 2 %


def bucket_of(seconds: float) -> int:
    return max(0, int(math.log(max(seconds * 1000, _BASE_MS) / _BASE_MS) / _STEP))


def bucket_ms(bucket: int) -> float:
    return _BASE_MS * math.exp((bucket + 0.5) * _STEP)


def percentile_ms(counts: dict[int, int], pct: float) -> float | None:
    """The ``pct``-th percentile of a histogram of buckets, in milliseconds."""
    total = sum(counts.values())
    if not total:
        return None
    goal = total * pct / 100
    seen = 0
    for bucket in sorted(counts):
        seen += counts[bucket]
        if seen >= goal:
            return bucket_ms(bucket)
    return bucket_ms(max(counts))


def merge(histograms: list[dict[int, int]]) -> dict[int, int]:
    merged: dict[int, int] = defaultdict(int)
    for hist in histograms:
        for bucket, n in hist.items():
            merged[bucket] += n
    return dict(merged)


# -- the processes -----------------------------------------------------------------------------


@dataclass
class Plan:
    """What one contender's load does."""

    name: str
    make_client: Callable[[], Client]
    rate: float | None  # messages per second; None: as fast as the consumers keep up
    consumers: int
    qty: int
    batch: int = 100  # the most messages one send carries
    backlog: int = 20_000  # unpaced producers wait while this many are queued
    logs: Path | None = None  # where consumers and the producer write what they saw


def quiet_signals() -> None:
    """Children leave Ctrl+C to the parent, which stops them through a shared event."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _record(fd: int | None, line: str) -> None:
    # One write per call: it reaches the kernel at once, so a SIGKILL loses nothing of it.
    if fd is not None:
        os.write(fd, line.encode())


def produce(plan: Plan, started: float, stop: Any, sent: Any, consumed: Any) -> None:
    """Send at ``plan.rate`` (or as fast as the backlog allows) until ``stop`` is set.

    Each send's sequence numbers go to the log as ``ok first last at`` once the call
    returned, or ``unknown first last at`` when it raised (it may or may not have committed),
    ``at`` being the seconds since the start when it was sent."""
    quiet_signals()
    client = plan.make_client()
    fd = (
        os.open(plan.logs / "producer", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        if plan.logs
        else None
    )
    seq = 0
    while not stop.is_set():
        now = clock()
        if plan.rate is not None:
            due = min(int(plan.rate * (now - started)) - seq, plan.batch)
            if due <= 0:
                time.sleep(TICK)
                continue
        else:
            due = plan.batch if seq - consumed.value < plan.backlog else 0
            if due <= 0:
                time.sleep(0.002)
                continue
        bodies = [{"seq": seq + k, "t": now, "pad": PAD} for k in range(due)]
        try:
            client.send(bodies)
        except NotSent:
            _record(fd, f"refused {seq} {seq + due - 1} {now - started:.3f}\n")
            seq += due
            stop.wait(PAUSE_AFTER_ERROR)
            continue
        except Exception:
            _record(fd, f"unknown {seq} {seq + due - 1} {now - started:.3f}\n")
            seq += due
            stop.wait(PAUSE_AFTER_ERROR)
            continue
        _record(fd, f"ok {seq} {seq + due - 1} {now - started:.3f}\n")
        seq += due
        with sent.get_lock():
            sent.value += due
    client.close()


def consume(plan: Plan, index: int, started: float, stop: Any, consumed: Any) -> None:
    """Read, note each message's pickup latency (and, with logs, its sequence number and
    when it was seen), delete; until ``stop`` is set. Writes its latency histograms, one per
    second of the run, to ``latency-<index>.json`` in the logs directory."""
    quiet_signals()
    client = plan.make_client()
    seen = None
    if plan.logs is not None:
        name = plan.logs / f"consumer-{index}-{os.getpid()}"
        seen = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    per_second: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    while not stop.is_set():
        try:
            found = client.read(plan.qty, 1)
        except Exception:
            stop.wait(PAUSE_AFTER_ERROR)
            continue
        if not found:
            continue
        now = clock()
        second = per_second[int(now - started)]
        for _, body in found:
            second[bucket_of(now - body["t"])] += 1
        at = now - started
        _record(seen, "".join(f"{body['seq']} {at:.3f}\n" for _, body in found))
        try:
            client.delete([ref for ref, _ in found])
        except Exception:
            stop.wait(PAUSE_AFTER_ERROR)
            continue
        with consumed.get_lock():
            consumed.value += len(found)
    client.close()
    if plan.logs is not None:
        out = {s: dict(h) for s, h in per_second.items()}
        (plan.logs / f"latency-{index}-{os.getpid()}.json").write_text(json.dumps(out))


def latency_by_second(logs: Path) -> dict[int, dict[int, int]]:
    """Every consumer's histograms of ``logs``, merged second by second."""
    merged: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for path in logs.glob("latency-*.json"):
        for second, hist in json.loads(path.read_text()).items():
            into = merged[int(second)]
            for bucket, n in hist.items():
                into[int(bucket)] += n
    return {s: dict(h) for s, h in merged.items()}


class Load:
    """One contender's producer and consumers, as forked processes sharing counters."""

    def __init__(self, ctx: Any, plan: Plan, started: float) -> None:
        self.ctx, self.plan, self.started = ctx, plan, started
        self.stop = ctx.Event()
        self.stop_sending = ctx.Event()  # the producer's own: consumers may drain after it
        self.sent = ctx.Value("q", 0)
        self.consumed = ctx.Value("q", 0)
        self.producer: Any = None
        self.consumers: list[Any] = []

    def _consumer(self, index: int) -> Any:
        args = (self.plan, index, self.started, self.stop, self.consumed)
        proc = self.ctx.Process(target=consume, args=args, name=f"{self.plan.name}-c{index}")
        proc.start()
        return proc

    def start(self) -> None:
        """Start the consumers, then the producer (Django's connections closed first)."""
        from .common import close_django_connections

        close_django_connections()
        self.consumers = [self._consumer(i) for i in range(self.plan.consumers)]
        args = (self.plan, self.started, self.stop_sending, self.sent, self.consumed)
        self.producer = self.ctx.Process(target=produce, args=args, name=f"{self.plan.name}-p")
        self.producer.start()

    def kill_consumer(self, index: int) -> int:
        """SIGKILL consumer ``index`` and start another in its place, as a supervisor would;
        the pid killed."""
        proc = self.consumers[index]
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(timeout=10)
        self.consumers[index] = self._consumer(index)
        return int(proc.pid)

    def processes(self) -> list[Any]:
        return [p for p in [self.producer, *self.consumers] if p is not None]

    def stop_producer(self, timeout: float = 30) -> None:
        """Stop sending only (the consumers drain what is left)."""
        self.stop_sending.set()
        self.producer.join(timeout=timeout)

    def finish(self, timeout: float = 30) -> None:
        self.stop_sending.set()
        self.stop.set()
        for proc in self.processes():
            proc.join(timeout=timeout)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=5)


class StopFlag:
    """Ctrl+C / SIGTERM for a bench's parent process: a plain flag the handler sets and the
    run's waits poll. Not a multiprocessing or threading Event: their ``set`` takes a lock
    that the interrupted ``wait`` may be holding, and the handler would wait for it forever."""

    def __init__(self) -> None:
        self.stopped = False

    def install(self) -> None:
        def stop(signum: int, frame: Any) -> None:
            print("\nstopping…", flush=True)
            self.stopped = True

        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, stop)

    def is_set(self) -> bool:
        return self.stopped

    def wait(self, seconds: float) -> bool:
        """Sleep ``seconds`` or until stopped; whether stopped."""
        end = clock() + seconds
        while not self.stopped and clock() < end:
            time.sleep(min(0.1, max(0.0, end - clock())))
        return self.stopped
