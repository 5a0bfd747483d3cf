"""What OpenTelemetry costs a send and a processed message: pgq_django against itself.

Two contenders in one process, rounds interleaved:

- ``off``: no tracer provider configured, as in a project without OpenTelemetry (the hooks
  check and return);
- ``sdk``: the real SDK, a ``BatchSpanProcessor`` whose exporter discards what it is given
  (so the spans are built, queued and handed over, and nothing waits for a network), and a
  meter provider whose reader aggregates every measurement.

Cases: ``send`` (one message per call), ``send_batch(100)``, and ``process`` (the worker's
own handling, ``pgq_django.testing.drain``: lease, ``process`` span, handler, ack). Each
row gives both rates and their ratio, and this process's CPU time per message (all its
threads: the batch processor's included) without and with the SDK, and the difference:
what tracing adds. Tracing is client work, so its CPU time is its cost, and it stays
readable on a loaded machine where the rates wait on a busy database. Each figure is a
median of per-round values over many short rounds. A last row measures the hook's check
alone without an SDK, per call.

Run: ``python -m bench.otel`` (``--quick`` for a smoke run, ``--rounds N``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from . import common

BODY = {"event": "user.signed_up", "to": "ada@example.com", "template": "welcome"}
QUEUE = "bench_otel"
# (title, messages, messages with --quick)
CASES = (("send", 500, 100), ("send_batch(100)", 10_000, 1000), ("process", 500, 100))


class _Discard(SpanExporter):
    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def handle(message: Any) -> None:
    """The handler of the ``process`` case: nothing, so the row measures the worker's part."""


def _sdk() -> Any:
    from pgq_django import telemetry

    traces = TracerProvider()
    traces.add_span_processor(BatchSpanProcessor(_Discard()))
    meters = MeterProvider(metric_readers=[InMemoryMetricReader()])
    # The pgq_django tracer and meter of a configured SDK, without setting the process-wide
    # provider, so the same process can measure both contenders turn by turn.
    return telemetry._Live(traces.get_tracer("pgq_django"), meters.get_meter("pgq_django"))


def _check_ns(calls: int) -> float:
    """Nanoseconds the send hook adds per call without an SDK (its wrapper and check)."""
    from pgq_django import telemetry

    def bare(*_args: Any) -> list[int]:
        return [1]

    wrapped = telemetry.traced_send(bare)
    opts = {"headers": "{}"}
    timings = []
    for fn in (bare, wrapped) * 5:
        start = time.perf_counter_ns()
        for _ in range(calls):
            fn("q", ["1"], 1, opts, None)
        timings.append((time.perf_counter_ns() - start) / calls)
    return common.median(timings[1::2]) - common.median(timings[::2])


def main(argv: Sequence[str] | None = None) -> int:
    args = common.arguments(__doc__.splitlines()[0], argv)
    rounds = args.rounds or (3 if args.quick else 15)
    common.setup()
    import pgq_django as pgq  # after setup(): the package's models need Django configured
    from pgq_django import telemetry
    from pgq_django.testing import drain

    live = {"off": None, "sdk": _sdk()}
    pgq.drop_queue(QUEUE)
    pgq.create_queue(QUEUE)
    pgq.register_callback(QUEUE, "bench.otel.handle")
    print(f"bench.otel: {rounds} rounds per case", flush=True)
    rows, summary = [], {}
    try:
        for title, messages, quick in CASES:
            n = quick if args.quick else messages
            work = _work(title, n, pgq, drain)

            cpu: dict[str, list[float]] = {c: [] for c in live}

            def measure(
                _round: int,
                contender: str,
                work: Callable[[], None] = work,
                n: int = n,
                cpu: dict[str, list[float]] = cpu,
            ) -> float:
                telemetry._live = live[contender]
                try:
                    started = time.process_time()
                    rate = n / common.timed(work)
                    cpu[contender].append((time.process_time() - started) / n * 1e6)
                    return rate
                finally:
                    telemetry._live = None

            def before(contender: str, _round: int, title: str = title, n: int = n) -> None:
                pgq.purge_queue(QUEUE)
                if title == "process":
                    for start in range(0, n, 1000):
                        pgq.send_batch(QUEUE, [BODY] * min(1000, n - start))

            print(f"  {title}: {rounds} rounds of {n} messages …", flush=True)
            values = common.interleave(
                rounds, {c: partial(measure, contender=c) for c in live}, before_each=before
            )
            off, sdk = common.median(values["off"]), common.median(values["sdk"])
            ratio = common.median(a / b for a, b in zip(values["sdk"], values["off"], strict=True))
            cpu_off, cpu_sdk = common.median(cpu["off"]), common.median(cpu["sdk"])
            added = common.median(b - a for a, b in zip(cpu["off"], cpu["sdk"], strict=True))
            summary[title] = {
                "off_msgs_per_s": off,
                "sdk_msgs_per_s": sdk,
                "sdk_over_off": ratio,
                "cpu_us_off": cpu_off,
                "cpu_us_sdk": cpu_sdk,
                "cpu_us_added": added,
            }
            rows.append(
                [
                    title,
                    common.fmt(off, 0),
                    common.fmt(sdk, 0),
                    common.fmt(ratio),
                    common.fmt(cpu_off, 1),
                    common.fmt(cpu_sdk, 1),
                    common.fmt(added, 1),
                ]
            )
    finally:
        telemetry._live = None
        pgq.drop_queue(QUEUE)
    check = _check_ns(2000 if args.quick else 200_000)
    summary["hook check without an SDK (ns per call)"] = {"ns": check}
    rows.append(["hook check without an SDK", "-", "-", "-", "-", "-", f"{check / 1000:.3f}"])
    common.print_table(
        "OpenTelemetry: without (off) and with the SDK (BatchSpanProcessor); medians of "
        "rounds, ratios and differences per round; CPU is this process's, µs per message",
        ["case", "off msg/s", "sdk msg/s", "sdk / off", "off CPU µs", "sdk CPU µs", "CPU µs added"],
        rows,
    )
    path = common.write_results(
        "otel-quick" if args.quick else "otel",
        {"rounds": rounds, "quick": args.quick, "summary": summary},
    )
    print(f"\nresults: {path}")
    return 0


def _work(title: str, n: int, pgq: Any, drain: Callable[..., Any]) -> Callable[[], None]:
    """One round's work of a case: ``n`` messages sent, or handled."""

    def send() -> None:
        for _ in range(n):
            pgq.send(QUEUE, BODY)

    def send_batch() -> None:
        for _ in range(n // 100):
            pgq.send_batch(QUEUE, [BODY] * 100)

    def process() -> None:
        handled = drain(QUEUE).processed
        assert handled == n, f"drained {handled} of {n}"

    return {"send": send, "send_batch(100)": send_batch}.get(title, process)


if __name__ == "__main__":
    sys.exit(main())
