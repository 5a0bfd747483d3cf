"""CPU seconds a contender spends, in every process it keeps busy (Linux ``/proc``).

On a machine shared with other work, wall-clock ratios swing with the load (two runs of
bench/sqs.py minutes apart can differ by half): time spent waiting for a CPU lands on
whichever contender was running. CPU time is what each contender itself consumed — in this
process, in a server process, in the PostgreSQL backends serving them — so its ratios hold
still under load, and they say where the cost is. Where ``/proc`` is missing, only this
process's own CPU time is counted.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` (all its threads) so far, or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime (fields 14 and 15)


class Meter:
    """Counts the CPU seconds of this process and of the processes ``others()`` names
    (looked up when a measurement starts and when it ends: a process that appears meanwhile
    counts from its start)."""

    def __init__(self, others: Callable[[], Iterable[int]]) -> None:
        self.others = others

    def measure(self, work: Callable[[], float]) -> tuple[float, float]:
        """Run ``work`` (which answers its wall-clock seconds): (wall seconds, CPU seconds)."""
        before = {pid: process_seconds(pid) for pid in self.others()}
        own = time.process_time()
        wall = work()
        cpu = time.process_time() - own
        for pid in self.others():
            now = process_seconds(pid)
            if now is not None:
                cpu += now - (before.get(pid) or 0.0)
        return wall, cpu
