"""Chart history in constant memory, and the run's metrics.jsonl (one snapshot per interval, appended; rotated
and thinned so it stays bounded, with the whole timeline still read back: runner.metrics.rotation).

``Downsampler`` keeps at most ``capacity`` points however long the job runs: when full, neighbouring points are
merged pairwise (averages; the later time and step), and from then on each kept point stands for twice as many
samples. 10^6 samples cost the same memory as 512.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any, TextIO

from runner.metrics import rotation
from runner.metrics.snapshot import HistoryPoint, Snapshot

DEFAULT_CAPACITY = 512
_AVERAGED = tuple(f.name for f in fields(HistoryPoint) if f.name not in ("time", "step", "gpu_utils"))


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def merge_points(points: list[HistoryPoint]) -> HistoryPoint:
    """Average each metric over the points that know it; keep the last time and step."""
    last = points[-1]
    values: dict[str, Any] = {"time": last.time, "step": last.step}
    for name in _AVERAGED:
        values[name] = _mean([getattr(p, name) for p in points])
    width = max(len(p.gpu_utils) for p in points)
    values["gpu_utils"] = tuple(
        _mean([p.gpu_utils[i] if i < len(p.gpu_utils) else None for p in points]) for i in range(width)
    )
    return HistoryPoint(**values)


class Downsampler:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 4 or capacity % 2:
            raise ValueError("capacity must be an even number >= 4")
        self.capacity = capacity
        self.stride = 1  # raw samples per kept point
        self.count = 0  # raw samples seen
        self._points: list[HistoryPoint] = []
        self._pending: list[HistoryPoint] = []

    def add(self, point: HistoryPoint) -> None:
        self.count += 1
        self._pending.append(point)
        if len(self._pending) < self.stride:
            return
        self._points.append(merge_points(self._pending) if len(self._pending) > 1 else self._pending[0])
        self._pending = []
        if len(self._points) >= self.capacity:
            self._points = [merge_points(self._points[i : i + 2]) for i in range(0, len(self._points), 2)]
            self.stride *= 2

    def points(self) -> tuple[HistoryPoint, ...]:
        """Kept points plus the partial bucket (so the newest sample is always visible)."""
        if self._pending:
            return (*self._points, merge_points(self._pending))
        return tuple(self._points)


class MetricsLog:
    """Appends snapshots to ``metrics.jsonl`` (one JSON object per line, flushed each time: readers see whole
    lines; a torn last line from a crash is skipped when read). Past ``rotate_bytes`` the file is archived and
    the archive thinned to stay under ``archive_bytes`` (runner.metrics.rotation)."""

    def __init__(
        self,
        path: Path,
        *,
        rotate_bytes: int = rotation.ROTATE_BYTES,
        archive_bytes: int = rotation.ARCHIVE_BYTES,
    ) -> None:
        self.path = path
        self.rotate_bytes = rotate_bytes
        self.archive_bytes = archive_bytes
        self._fh: TextIO | None = None

    def append(self, snapshot: Snapshot) -> None:
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            rotation.tidy(self.path)  # what a writer killed mid-merge left
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            self._fh = os.fdopen(fd, "a", encoding="utf-8")
        self._fh.write(json.dumps(snapshot.to_json(), sort_keys=True, separators=(",", ":")) + "\n")
        self._fh.flush()
        if os.fstat(self._fh.fileno()).st_size >= self.rotate_bytes:
            self.close()
            rotation.rotate(self.path, archive_bytes=self.archive_bytes)

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def iter_metrics(path: Path) -> Iterator[Snapshot]:
    """Stream a metrics.jsonl with its archived parts, oldest first, evenly thinned where older history is
    (constant memory); malformed lines are skipped."""
    for raw in rotation.history_lines(path):
        line = raw.decode("utf-8", errors="replace")
        try:
            data = json.loads(line)
        except (ValueError, RecursionError):  # torn, a 4,300+-digit number, nested too deep
            continue
        if isinstance(data, dict):
            yield Snapshot.from_json(data)


SAMPLE_ABOVE_BYTES = 8 * 1024 * 1024
SAMPLED_LINES = 4096


def load_history(path: Path, downsampler: Downsampler) -> Snapshot | None:
    """Feed a metrics.jsonl (and its archived parts) into ``downsampler``; return its last snapshot (None when
    there is none).

    Archived parts and the live file are read through rotation.history_lines, at most SAMPLED_LINES of them
    (evenly thinned; the chart has a few hundred columns). A single file above SAMPLE_ABOVE_BYTES (days of
    history, written before rotation) is not parsed line by line: SAMPLED_LINES lines at evenly spaced offsets
    stand for it. So attaching costs about the same at any age."""
    last: Snapshot | None = None
    if rotation.parts(path):
        for raw in rotation.history_lines(path, max_lines=SAMPLED_LINES):
            snap = _parse_snapshot(raw)
            if snap is not None:
                downsampler.add(snap.history_point())
                last = snap
        return last
    try:
        size = path.stat().st_size
    except OSError:
        return None
    if size <= SAMPLE_ABOVE_BYTES:
        for snap in iter_metrics(path):
            downsampler.add(snap.history_point())
            last = snap
        return last
    with path.open("rb") as fh:
        for k in range(SAMPLED_LINES):
            fh.seek(k * size // SAMPLED_LINES)
            if k:
                fh.readline()  # land on the next line start
            sampled = _parse_snapshot(fh.readline())
            if sampled is not None:
                downsampler.add(sampled.history_point())
        fh.seek(max(0, size - 64 * 1024))
        for raw in fh.read().split(b"\n")[1:]:  # the true last snapshot
            last = _parse_snapshot(raw) or last
    if last is not None:
        downsampler.add(last.history_point())
    return last


def _parse_snapshot(raw: bytes) -> Snapshot | None:
    try:
        data = json.loads(raw.decode("utf-8", errors="replace"))
    except (ValueError, RecursionError):
        return None
    return Snapshot.from_json(data) if isinstance(data, dict) else None
