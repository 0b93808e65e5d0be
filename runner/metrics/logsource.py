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
from runner.metrics.tail import FileLines, FileTail, RankLogTail, rank_of_log_file

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
    """Follows ``files`` (fixed) and every ``*.log`` under ``rank_dirs`` (``RankLogTail``, rescanned every few
    seconds)."""

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
        self.recent_lines: deque[str] = deque(maxlen=keep_lines)
        self._pending_head: list[LogEvent] = []
        for f in files:
            self._add(f, None)
        for f, rank in sorted((ranked_files or {}).items()):
            self._add(f, rank)
        self._rank_logs = [
            RankLogTail(
                d,
                start_at_end=attach,
                backfill_bytes=DEFAULT_BACKFILL,
                rescan_seconds=RESCAN_SECONDS,
                skip=self._tails,  # a file named one by one keeps the rank it was given
                clock=clock,
            )
            for d in dict.fromkeys(rank_dirs or [])
        ]

    @property
    def bytes_read(self) -> int:
        """Log bytes read so far, all files (attaching to a 1 GB log reads the backfill, not the gigabyte)."""
        fixed = sum(tail.bytes_read for tail, _ in self._tails.values())
        return fixed + sum(r.bytes_read for r in self._rank_logs)

    @property
    def paths(self) -> list[Path]:
        return sorted([*self._tails, *(p for r in self._rank_logs for p in r.paths)])

    def _add(self, path: Path, rank: int | None) -> None:
        if path in self._tails:
            return
        self._tails[path] = (FileTail(path, start_at_end=self._attach, backfill_bytes=DEFAULT_BACKFILL), rank)
        self._read_head(path, rank)

    def _read_head(self, path: Path, rank: int | None) -> None:
        if self._attach:
            self._pending_head.extend(read_head_events(path, rank))

    def take_head_events(self) -> list[LogEvent]:
        """Events from the head of files only partly read on attach (config dump, spawn lines); once."""
        out, self._pending_head = self._pending_head, []
        return out

    def _read_all(self) -> list[FileLines]:
        """What every file gave since the last poll, files in name order (fixed and per-rank files mixed)."""
        for rank_logs in self._rank_logs:
            for path in rank_logs.scan():
                self._read_head(path, rank_of_log_file(path))
        read = [FileLines(path, rank, tuple(tail.poll())) for path, (tail, rank) in self._tails.items()]
        read += [f for rank_logs in self._rank_logs for f in rank_logs.read()]
        return sorted(read, key=lambda f: f.path)

    def poll(self) -> list[LogEvent]:
        read = self._read_all()
        events: list[LogEvent] = self.take_head_events()
        for f in read:
            for line in f.lines:
                if line.strip():
                    self.recent_lines.append(line if f.rank is None else f"[r{f.rank}] {line}")
                event = parse_line(line, default_rank=f.rank)
                if event is not None:
                    events.append(event)
        return events

    def close(self) -> None:
        for tail, _ in self._tails.values():
            tail.close()
        for rank_logs in self._rank_logs:
            rank_logs.close()
