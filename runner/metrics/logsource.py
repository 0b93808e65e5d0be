"""The job's log files as a stream of ``LogEvent``s: the combined log plus per-rank logs that appear over time.

Per-rank files (``--enable_each_rank_log DIR`` writes ``DIR/<timestamp>_rank<N>.log``) give their rank to lines that
do not say it. The last ``keep_lines`` raw lines are kept for the dashboard's log panel (constant memory).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from runner.metrics.parse import LogEvent, parse_line
from runner.metrics.tail import FileTail, rank_of_log_file

RESCAN_SECONDS = 2.0
DEFAULT_BACKFILL = 2 * 1024 * 1024
HEAD_BYTES = 1024 * 1024
HEAD_KINDS = frozenset({"ds_config", "world", "spawn"})


def read_head_events(path: Path, rank: int | None, limit: int = HEAD_BYTES) -> list[LogEvent]:
    """The setup events (HEAD_KINDS) from the first ``limit`` bytes of a file larger than the backfill: on attach
    to a long log they tell the global batch, world size and rank pids that the tail no longer shows."""
    try:
        size = path.stat().st_size
        if size <= DEFAULT_BACKFILL:
            return []
        with path.open("rb") as fh:
            head = fh.read(limit)
    except OSError:
        return []
    out = []
    for raw in head.split(b"\n")[:-1]:
        event = parse_line(raw.decode("utf-8", errors="replace"), default_rank=rank)
        if event is not None and event.kind in HEAD_KINDS:
            out.append(event)
    return out


class LogSource:
    """Follows ``files`` (fixed) and every ``*.log`` under ``rank_dirs`` (rescanned every few seconds)."""

    def __init__(
        self,
        files: list[Path],
        rank_dirs: list[Path] | None = None,
        *,
        ranked_files: dict[Path, int] | None = None,
        attach: bool = False,
        keep_lines: int = 200,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # attach=True: the job was already running; read only the last few MiB of each file (history comes from
        # metrics.jsonl), not a possibly huge log from its start.
        self._attach = attach
        self._tails: dict[Path, tuple[FileTail, int | None]] = {}
        self._rank_dirs = list(rank_dirs or [])
        self._clock = clock
        self._last_scan = -1e9
        self.recent_lines: deque[str] = deque(maxlen=keep_lines)
        self._pending_head: list[LogEvent] = []
        for f in files:
            self._add(f, None)
        for f, rank in sorted((ranked_files or {}).items()):
            self._add(f, rank)

    @property
    def bytes_read(self) -> int:
        """Log bytes read so far, all files (attaching to a 1 GB log reads the backfill, not the gigabyte)."""
        return sum(tail.bytes_read for tail, _ in self._tails.values())

    @property
    def paths(self) -> list[Path]:
        return sorted(self._tails)

    def _add(self, path: Path, rank: int | None) -> None:
        if path in self._tails:
            return
        tail = FileTail(path, start_at_end=self._attach, backfill_bytes=DEFAULT_BACKFILL)
        self._tails[path] = (tail, rank)
        if self._attach:
            self._pending_head.extend(read_head_events(path, rank))

    def take_head_events(self) -> list[LogEvent]:
        """Events from the head of files only partly read on attach (config dump, spawn lines); once."""
        out, self._pending_head = self._pending_head, []
        return out

    def _scan(self) -> None:
        now = self._clock()
        if now - self._last_scan < RESCAN_SECONDS:
            return
        self._last_scan = now
        for d in self._rank_dirs:
            try:
                found = sorted(d.glob("*.log"))
            except OSError:
                continue
            for path in found:
                self._add(path, rank_of_log_file(path))

    def poll(self) -> list[LogEvent]:
        self._scan()
        events: list[LogEvent] = self.take_head_events()
        for path in sorted(self._tails):
            tail, rank = self._tails[path]
            for line in tail.poll():
                if line.strip():
                    self.recent_lines.append(line if rank is None else f"[r{rank}] {line}")
                event = parse_line(line, default_rank=rank)
                if event is not None:
                    events.append(event)
        return events

    def close(self) -> None:
        for tail, _ in self._tails.values():
            tail.close()
