"""Running a Spark job from a command: progress lines and a clean stop on SIGINT/SIGTERM.

:class:`JobRunner` wraps the actions of one job. While an action runs, a thread prints the
progress of Spark's active stages (tasks done out of total) whenever it changes. The first
SIGINT or SIGTERM cancels the running Spark jobs, restores the previous handlers (so a
second signal stops the process the hard way) and makes the action raise
:class:`Interrupted` once Spark has cancelled it; nothing after it (recording an export)
happens.
"""

from __future__ import annotations

import contextlib
import re
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, TypeVar

from ..exceptions import PgqError

T = TypeVar("T")


class Interrupted(PgqError):
    """The job was stopped by SIGINT or SIGTERM before it finished."""

    code = "interrupted"
    default_message = "The Spark job was interrupted."

    def __init__(self, signum: int) -> None:
        super().__init__(
            f"Stopped by {signal.Signals(signum).name}; the running Spark job was cancelled.",
            signal=signum,
        )
        self.signum = signum


class JobRunner:
    """Progress and signal handling around the Spark actions of one job."""

    def __init__(self, spark: Any, out: Any, *, interval: float = 2.0) -> None:
        self.spark = spark
        self.out = out
        self.interval = interval
        self.signum: int | None = None

    def say(self, text: str) -> None:
        self.out.write(f"{text}\n")
        self.out.flush()

    @contextmanager
    def signals(self) -> Iterator[None]:
        """Turn the first SIGINT/SIGTERM into a cancel of the running Spark jobs."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous: dict[signal.Signals, Any] = {}

        def stop(signum: int, frame: FrameType | None) -> None:
            self.signum = signum
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.say(f"{signal.Signals(signum).name}: cancelling the Spark job ...")
            # Not from here: the main thread is inside a Py4J call on its own (pinned)
            # connection, and a nested call on it would break that call (Py4J then resends
            # it, starting the job again).
            threading.Thread(target=self._cancel, name="pgq-spark-cancel", daemon=True).start()

        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, stop)
        try:
            yield
        finally:
            if self.signum is None:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

    def _cancel(self) -> None:
        try:
            self.spark.sparkContext.cancelAllJobs()
        except Exception:  # Spark Connect: no SparkContext on the client
            with contextlib.suppress(Exception):
                self.spark.interruptAll()

    def run(self, what: str, action: Callable[[], T]) -> T:
        """Run one Spark action, printing progress; raises Interrupted after a signal."""
        if self.signum is not None:
            raise Interrupted(self.signum)
        self.say(f"{what} ...")
        done = threading.Event()
        watcher = threading.Thread(target=self._watch, args=(done,), daemon=True)
        watcher.start()
        try:
            result = action()
        except Exception:
            if self.signum is not None:
                raise Interrupted(self.signum) from None
            raise
        finally:
            done.set()
            watcher.join()
        if self.signum is not None:
            raise Interrupted(self.signum)
        return result

    def _watch(self, done: threading.Event) -> None:
        try:
            tracker = self.spark.sparkContext.statusTracker()
        except Exception:  # Spark Connect: no status tracker on the client
            return
        last = ""
        while not done.wait(self.interval):
            try:
                stages = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
            except Exception:
                return
            line = ", ".join(
                f"stage {s.stageId}: {s.numCompletedTasks}/{s.numTasks} tasks"
                for s in sorted((s for s in stages if s), key=lambda s: s.stageId)
            )
            if line and line != last:
                self.say(f"  {line}")
                last = line


_PGQ_ERROR = re.compile(r"pgq_django\.(?:exceptions|spark\.runtime)\.(\w+): (.+)")


def pgq_error_in(exc: BaseException) -> str | None:
    """The PgqError message inside a Spark error raised by our code in a Python worker.

    Options are checked and rows written in Python workers, whose exceptions reach the
    driver as text inside Spark's own exception; this finds ours so a command can print it
    alone instead of a JVM stack trace.
    """
    found = _PGQ_ERROR.findall(str(exc))
    return f"{found[-1][1].strip()}" if found else None
