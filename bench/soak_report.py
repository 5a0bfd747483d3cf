"""The soak's measurements and its report: latency histograms, the figures, the table, the plot.

:mod:`bench.soak` runs the processes; this module turns what they wrote into the report
(a dict, also written as JSON), prints it and draws it with matplotlib.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
from pathlib import Path
from typing import Any

import psycopg

TENTHS = 10


class Tenth:
    """Reads of one tenth of the run: a log-bucket latency histogram (2 % wide buckets from
    10 µs), the messages they returned and when the first and last of them ended."""

    RATIO = 1.02
    FLOOR = 1e-5

    def __init__(self) -> None:
        self.buckets = [0] * 1000
        self.got = 0
        self.first = float("inf")
        self.last = float("-inf")

    def add(self, ended: float, took: float, got: int) -> None:
        index = int(math.log(max(took, self.FLOOR) / self.FLOOR, self.RATIO))
        self.buckets[min(index, len(self.buckets) - 1)] += 1
        self.got += got
        self.first = min(self.first, ended)
        self.last = max(self.last, ended)

    def as_dict(self) -> dict[str, Any]:
        return {"buckets": self.buckets, "got": self.got, "first": self.first, "last": self.last}


def _histogram_percentile(buckets: list[int], pct: float) -> float:
    """The ``pct``-th percentile of a Tenth histogram, in ms (bucket's geometric middle)."""
    rank = sum(buckets) * pct / 100
    seen = 0
    for index, count in enumerate(buckets):
        seen += count
        if count and seen >= rank:
            return Tenth.FLOOR * Tenth.RATIO ** (index + 0.5) * 1000
    return float("nan")


def _load(path: Path, default: Any) -> Any:
    return json.loads(path.read_text()) if path.exists() else default


def report_of(
    args: argparse.Namespace,
    work: Path,
    sampler: Any,
    conn: psycopg.Connection[Any],
    fresh_live: int,
    drained_tenth: int | None,
    drained_end: int | None,
    elapsed: float,
    completed: bool,
) -> dict[str, Any]:
    produced = _load(work / "producer.json", {"sent": 0, "id_sum": 0})
    consumed = [
        _load(work / f"c{i}.json", {"acked": 0, "id_sum": 0, "tenths": []})
        for i in range(args.consumers)
    ]
    runs = _load(work / "upkeep.json", [])
    latency: list[dict[str, Any] | None] = []
    throughput: list[float | None] = []
    for k in range(TENTHS):
        parts = [c["tenths"][k] for c in consumed if c.get("tenths")]
        buckets = [sum(b) for b in zip(*(p["buckets"] for p in parts), strict=True)] or [0]
        reads = sum(buckets)
        latency.append(
            {
                "p50_ms": _histogram_percentile(buckets, 50),
                "p99_ms": _histogram_percentile(buckets, 99),
                "reads": reads,
            }
            if reads
            else None
        )
        # Throughput of the tenth: its messages over the time from its first read's end to
        # its last's (the pause at 10 %, while the parent waits for the drain, falls between).
        first = min((p["first"] for p in parts if p["got"]), default=None)
        last = max((p["last"] for p in parts if p["got"]), default=None)
        got = sum(p["got"] for p in parts)
        span = (last - first) if first is not None and last is not None else 0.0
        throughput.append(got / span if span > 0 else None)
    rows = sampler.rows
    live_left = conn.execute("SELECT count(*) FROM pgq_message").fetchone()[0]  # type: ignore[index]
    archive_rows = conn.execute("SELECT count(*) FROM pgq_archived_message").fetchone()[0]  # type: ignore[index]
    pruned = sum(r["pruned"] for r in runs)
    dropped = sum(_rows_dropped(a) for r in runs for a in r["actions"])
    expired = sum(r["expired"] for r in runs)
    acked = sum(c["acked"] for c in consumed)
    upkeep_seconds = [r["seconds"].get("partitions", 0.0) for r in runs]
    rate = acked / elapsed if elapsed else 0.0
    first = latency[0]
    last = latency[-1]
    report = {
        "mode": ("no partitions (one 10^15-wide range)" if args.no_partitions else "partitioned")
        + (", default autovacuum" if args.default_autovacuum else ""),
        "messages": args.messages,
        "partition_size": None if args.no_partitions else args.partition_size,
        "consumers": args.consumers,
        "completed": completed,
        "elapsed_s": elapsed,
        "throughput_per_s": rate,
        "throughput_per_tenth": throughput,
        "latency_per_tenth": latency,
        "latency_p50_last_over_first": (last["p50_ms"] / first["p50_ms"])
        if first and last
        else None,
        "latency_p99_last_over_first": (last["p99_ms"] / first["p99_ms"])
        if first and last
        else None,
        "live_bytes_fresh": fresh_live,
        "live_bytes_drained_at_tenth": drained_tenth,
        "live_bytes_drained_at_end": drained_end,
        "drained_end_over_tenth": (drained_end / drained_tenth)
        if drained_end and drained_tenth
        else None,
        "archive_rows_end": archive_rows,
        "archive_bytes_end": sampler.sizes()[1],
        "archive_rows_retention_would_keep": rate * args.retention,
        "retention_s": args.retention,
        "max_dead_live": max((r["dead_live"] for r in rows), default=0),
        "max_dead_archive": max((r["dead_archive"] for r in rows), default=0),
        "autovacuum_runs": sampler.rows[-1]["autovacuum_runs"] if rows else 0,
        "upkeep_runs": len(runs),
        "upkeep_partition_seconds_max": max(upkeep_seconds, default=0.0),
        "upkeep_partition_seconds_mean": (sum(upkeep_seconds) / len(upkeep_seconds))
        if upkeep_seconds
        else 0.0,
        "partitions_created": sum(
            a.startswith("create pgq_message_") for r in runs for a in r["actions"]
        ),
        "partitions_dropped": sum(
            a.startswith("drop pgq_message_") for r in runs for a in r["actions"]
        ),
        "archive_partitions_dropped": sum(
            a.startswith("drop pgq_archived_message_") for r in runs for a in r["actions"]
        ),
        "counts": {
            "sent": produced["sent"],
            "acked": acked,
            "expired": expired,
            "left_in_queue": live_left,
            "sent_id_sum_equals_acked_id_sum": produced["id_sum"]
            == sum(c["id_sum"] for c in consumed),
            "archive_rows": archive_rows,
            "archive_pruned": pruned,
            "archive_dropped_with_partitions": dropped,
            "archived_accounted": archive_rows + pruned + dropped == acked + expired,
        },
        "samples": rows,
    }
    return report


def _rows_dropped(action: str) -> int:
    """Rows a ``drop … (N rows past retention)`` action removed with its partition."""
    if "rows past retention" not in action:
        return 0
    return int(action.rsplit("(", 1)[1].split()[0])


# -- output ------------------------------------------------------------------------------------


def _fmt(value: Any, spec: str = ",.0f") -> str:
    return "-" if value is None else format(value, spec)


def print_report(report: dict[str, Any]) -> None:
    mib = 2**20
    print(
        f"\nsoak: {report['messages']:,} messages, {report['mode']}, "
        f"partition size {_fmt(report['partition_size'])}, {report['consumers']} consumers"
    )
    print(f"elapsed {report['elapsed_s']:.0f} s, {report['throughput_per_s']:,.0f} msg/s overall")
    print("| tenth | msg/s | read p50 ms | read p99 ms |")
    print("|---|---|---|---|")
    for k in range(TENTHS):
        lat = report["latency_per_tenth"][k] or {}
        print(
            f"| {k + 1} | {_fmt(report['throughput_per_tenth'][k])} | "
            f"{_fmt(lat.get('p50_ms'), '.2f')} | {_fmt(lat.get('p99_ms'), '.2f')} |"
        )
    print(
        f"read latency last/first tenth: p50 {_fmt(report['latency_p50_last_over_first'], '.2f')}, "
        f"p99 {_fmt(report['latency_p99_last_over_first'], '.2f')} (goal <= 1.5)"
    )

    def size(value: Any) -> str:
        return "-" if value is None else f"{value / mib:.2f} MiB"

    print(
        f"live tables+indexes: fresh {size(report['live_bytes_fresh'])}, drained at 10 % "
        f"{size(report['live_bytes_drained_at_tenth'])}, drained at the end "
        f"{size(report['live_bytes_drained_at_end'])} "
        f"(end/10 %: {_fmt(report['drained_end_over_tenth'], '.2f')}, goal <= 2)"
    )
    print(
        f"archive: {report['archive_rows_end']:,} rows, {size(report['archive_bytes_end'])}; "
        f"retention {report['retention_s']} s x throughput = "
        f"{report['archive_rows_retention_would_keep']:,.0f} rows"
    )
    print(
        f"dead tuples (max seen): live {report['max_dead_live']:,}, archive "
        f"{report['max_dead_archive']:,}; autovacuum runs {report['autovacuum_runs']}"
    )
    print(
        f"upkeep: {report['upkeep_runs']} runs, partitions step mean "
        f"{report['upkeep_partition_seconds_mean'] * 1000:.1f} ms, max "
        f"{report['upkeep_partition_seconds_max'] * 1000:.1f} ms; live partitions created "
        f"{report['partitions_created']}, dropped {report['partitions_dropped']}; archive "
        f"partitions dropped {report['archive_partitions_dropped']}"
    )
    rows = report["samples"]
    if rows:
        tenth = report["messages"] // TENTHS
        for name in rows[0]["rss_kib"]:
            head = [r["rss_kib"][name] for r in rows if r["acked"] < tenth and r["rss_kib"][name]]
            tail = [
                r["rss_kib"][name]
                for r in rows
                if r["acked"] >= report["messages"] - tenth and r["rss_kib"][name]
            ]
            seen = [r["rss_kib"][name] for r in rows if r["rss_kib"][name]]
            tail = tail or seen[-1:]  # a short run may have no sample in its last tenth
            if head and tail:
                print(
                    f"RSS {name}: first tenth {max(head) / 1024:.1f} MiB, "
                    f"last tenth {max(tail) / 1024:.1f} MiB"
                )
    print("counts: " + ", ".join(f"{k}={v}" for k, v in report["counts"].items()))


def plot(report: dict[str, Any], png: Path, compare: dict[str, Any] | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(4, 1, figsize=(9, 11), sharex=True)
    for rep, style in ((report, "-"), (compare, "--")):
        if rep is None:
            continue
        label = rep["mode"]
        rows = rep["samples"]
        xs = [r["acked"] / 1e6 for r in rows]
        rates = []
        for a, b in itertools.pairwise(rows):
            dt = b["t"] - a["t"]
            rates.append((b["acked"] - a["acked"]) / dt if dt > 0 else 0.0)
        axes[0].plot(xs[1:], rates, style, label=label, linewidth=0.8)
        axes[2].plot(xs, [r["live_bytes"] / 2**20 for r in rows], style, label=f"{label}: live")
        axes[2].plot(
            xs,
            [r["archive_bytes"] / 2**20 for r in rows],
            style,
            alpha=0.5,
            label=f"{label}: archive",
        )
        rss = [
            max(
                (v for k, v in r["rss_kib"].items() if k.startswith("consumer") and v), default=None
            )
            for r in rows
        ]
        axes[3].plot(
            xs, [v / 1024 if v else None for v in rss], style, label=f"{label}: largest consumer"
        )
        axes[3].plot(
            xs,
            [(r["rss_kib"].get("upkeep") or 0) / 1024 or None for r in rows],
            style,
            alpha=0.5,
            label=f"{label}: upkeep",
        )
        tenths = [(k + 0.5) * rep["messages"] / TENTHS / 1e6 for k in range(TENTHS)]
        lat = rep["latency_per_tenth"]
        axes[1].plot(
            tenths, [t["p50_ms"] if t else None for t in lat], style + "o", label=f"{label}: p50"
        )
        axes[1].plot(
            tenths, [t["p99_ms"] if t else None for t in lat], style + "s", label=f"{label}: p99"
        )
    axes[0].set_ylabel("acked msg/s")
    axes[1].set_ylabel("read latency, ms")
    axes[2].set_ylabel("size, MiB")
    axes[3].set_ylabel("RSS, MiB")
    axes[3].set_xlabel("messages acknowledged (millions)")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(
        f"pgq_django soak: {report['messages']:,} messages, {report['consumers']} consumers"
    )
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)
