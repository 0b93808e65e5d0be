"""Where the dashboard's snapshots come from: a live Collector (polling in its own thread) or a recording."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from runner.metrics.collector import Collector
from runner.metrics.history import DEFAULT_CAPACITY, Downsampler, iter_metrics
from runner.metrics.snapshot import Snapshot


class SnapshotSource(Protocol):
    interval: float

    def start(self) -> object: ...

    def latest(self) -> Snapshot | None: ...

    def stop(self) -> object: ...


class CollectorSource:
    """A Collector: it polls in its own thread; the UI only reads ``latest()``."""

    def __init__(self, collector: Collector) -> None:
        self.collector = collector
        self.interval = collector.interval

    def start(self) -> CollectorSource:
        self.collector.start()
        return self

    def latest(self) -> Snapshot | None:
        return self.collector.latest()

    def stop(self) -> Snapshot | None:
        return self.collector.stop()


class ReplaySource:
    """A recorded metrics.jsonl shown as it ended (tests, screenshots, and a finished run's last picture)."""

    def __init__(
        self,
        metrics_jsonl: Path,
        *,
        log_tail: Sequence[str] = (),
        upto: int | None = None,
        capacity: int = DEFAULT_CAPACITY,
    ) -> None:
        """``upto``: show the recording as it was after its first ``upto`` snapshots (mid-run), not at its end."""
        history = Downsampler(capacity)
        last = None
        for i, snap in enumerate(iter_metrics(metrics_jsonl)):
            if upto is not None and i >= upto:
                break
            history.add(snap.history_point())
            last = snap
        self._snapshot = replace(last, history=history.points(), log_tail=tuple(log_tail)) if last else None
        self.interval = 1.0

    def start(self) -> ReplaySource:
        return self

    def latest(self) -> Snapshot | None:
        return self._snapshot

    def stop(self) -> Snapshot | None:
        return self._snapshot
