"""What ``bench.pressure`` measured, as tables and plots."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from . import loadgen
from .common import fmt, print_table

SIDES = {"pgq": "pgq_django", "pgmq": "PGMQ"}


def _in(span: dict[str, Any], t: float) -> bool:
    return bool(span["start"] <= t < span["end"])


def phase_rows(
    spans: list[dict[str, Any]],
    latency: dict[str, dict[int, dict[int, int]]],
    samples: list[dict[str, Any]],
    upkeep: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    """Per phase and side: throughput, p50/p99, dead tuples (most, last); upkeep's longest."""
    rows = []
    for span in spans:
        seconds = max(span["end"] - span["start"], 1e-9)
        row: dict[str, Any] = {"phase": span["phase"], "start": span["start"], "end": span["end"]}
        for side, by_second in latency.items():
            hists = [h for s, h in by_second.items() if _in(span, s)]
            merged = loadgen.merge(hists)
            dead = [r[side]["dead"] for r in samples if side in r and _in(span, r["t"])]
            row[side] = {
                "rate": sum(merged.values()) / seconds,
                "p50_ms": loadgen.percentile_ms(merged, 50),
                "p99_ms": loadgen.percentile_ms(merged, 99),
                "dead_max": max(dead) if dead else None,
                "dead_end": dead[-1] if dead else None,
            }
        runs = [u for u in upkeep if _in(span, u["t"])]
        row["upkeep_longest_s"] = max((u["seconds"] for u in runs), default=None)
        row["ranges_dropped"] = sum(
            1 for u in runs for a in u["actions"] if a.startswith("drop pgq_message_")
        )
        rows.append(row)
    return rows


def _ms(value: float | None) -> str:
    return "-" if value is None else fmt(value, 1)


def _int(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _back_to_baseline(
    rows: list[dict[str, Any]], samples: list[dict[str, Any]], side: str, fault: int
) -> str:
    """Seconds from the fault's end until the side's dead tuples are at most their baseline
    peak again (within the phase after it), or ``never`` in it."""
    limit = max(rows[0][side]["dead_max"] or 0, 1)
    end = rows[fault]["end"]
    after = rows[fault + 1] if fault + 1 < len(rows) else None
    if after is None:
        return "-"
    for sample in samples:
        if side in sample and end <= sample["t"] < after["end"] and sample[side]["dead"] <= limit:
            return fmt(sample["t"] - end, 0)
    return f"not in {after['end'] - after['start']:.0f}"


def print_pins(report: dict[str, Any], dead_every: float) -> None:
    rows = report["rows"]
    sides = [s for s in SIDES if rows and s in rows[0]]
    headers = ["phase", "seconds"]
    for side in sides:
        headers += [f"{SIDES[side]} msg/s", f"{SIDES[side]} p50 / p99 ms"]
    for side in sides:
        headers.append(f"{SIDES[side]} dead tuples (most)")
    headers += ["longest upkeep run, s", "ranges dropped"]
    table = []
    for row in rows:
        cells = [row["phase"], fmt(row["end"] - row["start"], 0)]
        for side in sides:
            r = row[side]
            cells += [fmt(r["rate"], 0), f"{_ms(r['p50_ms'])} / {_ms(r['p99_ms'])}"]
        cells += [_int(row[side]["dead_max"]) for side in sides]
        cells += [_ms(row["upkeep_longest_s"]), str(row["ranges_dropped"])]
        table.append(cells)
    print_table("Pins and readers: throughput, pickup latency, dead tuples", headers, table)

    samples = report["samples"]
    dead_rows = []
    next_t = 0.0
    for sample in samples:
        if sample["t"] >= next_t:
            next_t = sample["t"] + dead_every
            dead_rows.append(
                [fmt(sample["t"], 0), sample["phase"]]
                + [_int(sample[s]["dead"]) if s in sample else "-" for s in sides]
            )
    print_table(
        f"Dead tuples in the queue's tables, every {dead_every:.0f} s",
        ["t, s", "phase"] + [SIDES[s] for s in sides],
        dead_rows,
    )

    if len(rows) < 2:
        return
    base = rows[0]
    goals = []
    for fault in (i for i, r in enumerate(rows) if i % 2 == 1):
        for side in sides:
            r, b = rows[fault][side], base[side]
            goals.append(
                [
                    rows[fault]["phase"],
                    SIDES[side],
                    fmt(r["rate"] / b["rate"] if b["rate"] else None),
                    fmt(r["p99_ms"] / b["p99_ms"] if r["p99_ms"] and b["p99_ms"] else None),
                    _back_to_baseline(rows, samples, side, fault),
                ]
            )
    print_table(
        "Against the baseline (goal: throughput 1.00, p99 at most 2x, dead tuples back soon)",
        ["fault", "queue", "throughput / baseline", "p99 / baseline p99", "dead back after, s"],
        goals,
    )


def print_highest(report: dict[str, Any]) -> None:
    sides = [s for s in SIDES if report.get(s)]
    fifths = []
    for side in sides:
        rows = report[side]
        if len(rows) < 2:
            continue
        end = rows[-1]["t"]
        for k in range(5):
            lo, hi = end * k / 5, end * (k + 1) / 5
            part = [r for r in rows if lo <= r["t"] <= hi]
            if len(part) < 2:
                continue
            rate = (part[-1]["consumed"] - part[0]["consumed"]) / (part[-1]["t"] - part[0]["t"])
            fifths.append(
                [
                    SIDES[side],
                    f"{lo:.0f}-{hi:.0f}",
                    fmt(rate, 0),
                    fmt(max(r["bytes"] for r in part) / 2**20, 1),
                    _int(max(r["dead"] for r in part)),
                ]
            )
    print_table(
        "Highest rate: throughput and table size over time, each side alone",
        ["queue", "seconds", "msg/s", "table MiB (most)", "dead tuples (most)"],
        fifths,
    )


# -- plots -------------------------------------------------------------------------------------


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


COLORS = {"pgq": "tab:blue", "pgmq": "tab:orange"}


def plot_pins(report: dict[str, Any], png: Path, window: int) -> None:
    plt = _pyplot()
    fig, axes = plt.subplots(4, 1, figsize=(11, 12), sharex=True)
    counts = report["latency_seconds"]
    for side, data in counts.items():
        by_second = {int(s): n for s, n in data["count_by_second"].items()}
        windows: dict[int, int] = {}
        for s, n in by_second.items():
            windows[s // window * window] = windows.get(s // window * window, 0) + n
        xs = sorted(windows)
        axes[0].plot(xs, [windows[x] / window for x in xs], color=COLORS[side], label=SIDES[side])
        p99 = {int(w): v for w, v in report["p99_by_window"][side].items() if v is not None}
        axes[1].plot(sorted(p99), [p99[w] for w in sorted(p99)], color=COLORS[side])
        samples = [r for r in report["samples"] if side in r]
        ts = [r["t"] for r in samples]
        axes[2].plot(ts, [r[side]["dead"] for r in samples], color=COLORS[side])
        axes[3].plot(ts, [r[side]["bytes"] / 2**20 for r in samples], color=COLORS[side])
    axes[0].set_ylabel("messages read / s")
    axes[1].set_ylabel("pickup p99, ms")
    axes[1].set_yscale("log")
    axes[2].set_ylabel("dead tuples")
    axes[3].set_ylabel("queue table, MiB")
    axes[3].set_xlabel("seconds")
    for span in report["phases"]:
        for ax in axes:
            if span.get("fault"):
                ax.axvspan(span["start"], span["end"], color="0.9")
        axes[0].text(span["start"], 0, " " + span["phase"], fontsize=7, va="bottom")
    axes[0].legend(loc="upper right")
    fig.suptitle("pgq_django and PGMQ at a fixed rate through a pin and through readers")
    _save(plt, fig, png)


def _save(plt: Any, fig: Any, png: Path) -> None:
    """Write ``fig`` to ``png`` (making its folder) and free it."""
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=90)
    plt.close(fig)


def plot_highest(report: dict[str, Any], png: Path) -> None:
    plt = _pyplot()
    fig, axes = plt.subplots(3, 1, figsize=(11, 9), sharex=True)
    for side in SIDES:
        rows = report.get(side) or []
        if len(rows) < 2:
            continue
        ts = [r["t"] for r in rows[1:]]
        rates = [
            (b["consumed"] - a["consumed"]) / (b["t"] - a["t"]) for a, b in itertools.pairwise(rows)
        ]
        axes[0].plot(ts, rates, color=COLORS[side], label=SIDES[side])
        axes[1].plot(ts, [r["bytes"] / 2**20 for r in rows[1:]], color=COLORS[side])
        axes[2].plot(ts, [r["dead"] for r in rows[1:]], color=COLORS[side])
    axes[0].set_ylabel("messages read / s")
    axes[1].set_ylabel("queue table, MiB")
    axes[2].set_ylabel("dead tuples")
    axes[2].set_xlabel("seconds (each side alone)")
    axes[0].legend(loc="upper right")
    fig.suptitle("pgq_django and PGMQ at the highest rate each sustains")
    _save(plt, fig, png)
