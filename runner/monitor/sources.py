"""Where the dashboard's snapshots come from: a live Collector (polling in its own thread) or a recording."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from runner.metrics.collector import LOG_TAIL_LINES, Collector
from runner.metrics.history import DEFAULT_CAPACITY, Downsampler, iter_metrics
from runner.metrics.parse import parse_line
from runner.metrics.snapshot import Snapshot


class SnapshotSource(Protocol):
    interval: float

    def start(self) -> object: ...

    def latest(self) -> Snapshot | None: ...

    def stop(self) -> object: ...


class CollectorSource:
    """A Collector: it polls in its own thread; the UI only reads ``latest()``. ``owned=False`` (the collector
    belongs to `dswiz launch`, which keeps recording after the dashboard closes): start/stop leave it alone."""

    def __init__(self, collector: Collector, *, owned: bool = True) -> None:
        self.collector = collector
        self.interval = collector.interval
        self.owned = owned

    def start(self) -> CollectorSource:
        if self.owned:
            self.collector.start()
        return self

    def latest(self) -> Snapshot | None:
        return self.collector.latest()

    def stop(self) -> Snapshot | None:
        return self.collector.stop() if self.owned else self.collector.latest()


class ReplaySource:
    """A recorded metrics.jsonl shown as it ended (tests, screenshots, and a finished run's last picture)."""

    def __init__(
        self,
        metrics_jsonl: Path,
        *,
        log_lines: Sequence[str] = (),
        upto: int | None = None,
        capacity: int = DEFAULT_CAPACITY,
    ) -> None:
        """``log_lines``: the job's log (the panel shows its last lines up to the shown step); ``upto``: show the
        recording as it was after its first ``upto`` snapshots (mid-run), not at its end."""
        history = Downsampler(capacity)
        last = None
        for i, snap in enumerate(iter_metrics(metrics_jsonl)):
            if upto is not None and i >= upto:
                break
            history.add(snap.history_point())
            last = snap
        tail = log_tail_at_step(log_lines, last.step if last else None, finished=upto is None)
        self._snapshot = replace(last, history=history.points(), log_tail=tail) if last else None
        self.interval = 1.0

    def start(self) -> ReplaySource:
        return self

    def latest(self) -> Snapshot | None:
        return self._snapshot

    def stop(self) -> Snapshot | None:
        return self._snapshot


def log_tail_at_step(
    lines: Sequence[str], step: int | None, *, finished: bool, n: int = LOG_TAIL_LINES
) -> tuple[str, ...]:
    """The last ``n`` log lines as they stood when the job reached ``step`` (the end of the log when finished)."""
    if finished or step is None:
        return tuple(lines[-n:])
    end = 0
    for i, line in enumerate(lines):
        event = parse_line(line)
        seen = None if event is None else event.values.get("step", event.values.get("global_step"))
        if isinstance(seen, int) and seen > step:
            break
        end = i + 1
    return tuple(lines[max(0, end - n) : end])
