"""Follow a growing text file like ``tail -F``, in constant memory, never re-reading what was read; and a folder of
DeepSpeed's per-rank logs the same way (``RankLogTail``: the one rank-log tail, used by the launch and the monitor).

Handles the file not existing yet, truncation (size below our offset: start again at 0), rotation (a new inode at
the path: finish the old file, then read the new one from its start), torn last lines (kept until the newline
arrives) and overlong lines (cut at ``max_line_bytes``). Each ``poll`` reads at most ``max_read_bytes``, so a
burst of output cannot stall the caller; the rest comes on the next poll.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from runner.tracebacks import rank_number

DEFAULT_MAX_LINE = 64 * 1024
DEFAULT_MAX_READ = 4 * 1024 * 1024

# DeepSpeed's --enable_each_rank_log names each rank's file <timestamp>_rank<N>.log (deepspeed/launcher/launch.py,
# main, DeepSpeed 0.19.8).
RANK_LOG_FILE_RE = re.compile(r"_rank(?P<rank>\d+)\.log$")


def rank_of_log_file(path: Path | str) -> int | None:
    """The global rank a per-rank log file belongs to (``…_rank<N>.log``), None for any other name."""
    m = RANK_LOG_FILE_RE.search(str(path))
    return rank_number(m.group("rank"), None) if m else None


class FileTail:
    """``poll()`` returns the complete lines appended since the last poll (decoded, without the newline).

    ``start_at_end=True`` skips what the file holds when first opened except its last ``backfill_bytes`` (starting
    at a line boundary): attaching to a 1 GB log reads a few MiB, not the gigabyte.
    """

    def __init__(
        self,
        path: Path | str,
        *,
        start_at_end: bool = False,
        backfill_bytes: int = 0,
        max_line_bytes: int = DEFAULT_MAX_LINE,
        max_read_bytes: int = DEFAULT_MAX_READ,
    ) -> None:
        self.path = Path(path)
        self._start_at_end = start_at_end
        self._backfill = max(0, backfill_bytes)
        self._max_line = max_line_bytes
        self._max_read = max_read_bytes
        self._fh: BinaryIO | None = None
        self._ino: int | None = None
        self._pos = 0
        self._partial = bytearray()
        self._overlong = False  # dropping the rest of a line that passed max_line_bytes
        self._skip_to_newline = False  # backfill began mid-line
        self._opened_once = False
        self._last_read_full = False
        self.bytes_read = 0
        self.rotations = 0
        self.truncations = 0

    @property
    def offset(self) -> int:
        return self._pos

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def poll(self, *, final: bool = False) -> list[str]:
        """``final=True`` (the writer is gone): everything left, the unterminated last line included."""
        if final:
            return self._poll_final()
        lines: list[str] = []
        try:
            st = os.stat(self.path)
        except OSError:
            st = None
        if self._fh is not None and st is not None and st.st_ino != self._ino:
            lines += self._drain_all()  # rotated: the old file may have a last chunk we have not read
            self.close()
            self.rotations += 1
            self._reset_position()
        if st is None:
            if self._fh is not None:
                lines += self._read_available()
            return lines
        if self._fh is None and not self._open(st):
            return lines
        if st.st_size < self._pos:  # truncated in place (e.g. `> log`): start over
            self.truncations += 1
            self._reset_position()
            assert self._fh is not None
            self._fh.seek(0)
        lines += self._read_available()
        return lines

    def _poll_final(self) -> list[str]:
        lines = self.poll()
        if self._fh is not None:
            lines += self._drain_all()
        if self._partial and not self._skip_to_newline:
            lines.append(self._partial.decode("utf-8", errors="replace"))
        self._partial.clear()
        self._overlong = False
        return lines

    def _reset_position(self) -> None:
        self._pos = 0
        self._partial.clear()
        self._overlong = False
        self._skip_to_newline = False

    def _open(self, st: os.stat_result) -> bool:
        try:
            self._fh = open(self.path, "rb")  # noqa: SIM115 - held open across polls on purpose
        except OSError:
            return False
        self._ino = os.fstat(self._fh.fileno()).st_ino
        if self._start_at_end and not self._opened_once:
            start = max(0, st.st_size - self._backfill)
            self._fh.seek(start)
            self._pos = start
            self._skip_to_newline = start > 0
        self._opened_once = True
        return True

    def _drain_all(self) -> list[str]:
        out: list[str] = []
        while True:
            out += self._read_available()
            if not self._last_read_full:
                return out

    def _read_available(self) -> list[str]:
        assert self._fh is not None
        try:
            chunk = self._fh.read(self._max_read)
        except OSError:
            chunk = b""
        self._last_read_full = len(chunk) == self._max_read
        if not chunk:
            return []
        self._pos += len(chunk)
        self.bytes_read += len(chunk)
        return self._split(chunk)

    def _split(self, chunk: bytes) -> list[str]:
        out: list[str] = []
        start = 0
        while True:
            nl = chunk.find(b"\n", start)
            piece = chunk[start:] if nl < 0 else chunk[start:nl]
            skipping = self._skip_to_newline
            if not skipping and not self._overlong:
                room = self._max_line - len(self._partial)
                self._partial += piece[:room]
                self._overlong = len(piece) > room
            if nl < 0:
                break
            if skipping:
                self._skip_to_newline = False  # the torn first line of a backfill is dropped
            else:
                out.append(self._partial.decode("utf-8", errors="replace"))
            self._partial.clear()
            self._overlong = False
            start = nl + 1
        return out


def rank_log_files(directory: Path) -> list[Path]:
    """Every ``*.log`` in a folder of per-rank logs, in name order ([] while the folder cannot be read)."""
    try:
        return sorted(directory.glob("*.log"))
    except OSError:
        return []


@dataclass(frozen=True)
class FileLines:
    """The lines one file of a ``RankLogTail`` gave in one read."""

    path: Path
    rank: int | None  # from the file's name; None for a file not named ``…_rank<N>.log``
    lines: tuple[str, ...]


class RankLogTail:
    """Every ``*.log`` in a folder of per-rank logs, followed as files appear: ``poll()`` returns ``(rank, line)``
    pairs, files in name order.

    The launch follows each file from its start and looks for new files at every poll (the defaults). The monitor
    attaches to a job already running: ``start_at_end=True`` reads only the last ``backfill_bytes`` of each file
    (history comes from metrics.jsonl), and ``rescan_seconds`` spaces out the folder scans. ``skip``: files the
    caller follows itself (a rank log named by PID, with its rank known another way).
    """

    def __init__(
        self,
        directory: Path | str,
        *,
        start_at_end: bool = False,
        backfill_bytes: int = 0,
        rescan_seconds: float = 0.0,
        skip: Collection[Path] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.directory = Path(directory)
        self._start_at_end = start_at_end
        self._backfill = backfill_bytes
        self._rescan = rescan_seconds
        self._skip = frozenset(skip)
        self._clock = clock
        self._last_scan: float | None = None
        self._tails: dict[Path, FileTail] = {}

    @property
    def paths(self) -> list[Path]:
        return sorted(self._tails)

    @property
    def bytes_read(self) -> int:
        return sum(tail.bytes_read for tail in self._tails.values())

    def scan(self) -> list[Path]:
        """Start following the files that appeared since the last scan (none when the last one was less than
        ``rescan_seconds`` ago); returns them, in name order."""
        now = self._clock()
        if self._last_scan is not None and now - self._last_scan < self._rescan:
            return []
        self._last_scan = now
        new = [p for p in rank_log_files(self.directory) if p not in self._tails and p not in self._skip]
        for path in new:
            self._tails[path] = FileTail(path, start_at_end=self._start_at_end, backfill_bytes=self._backfill)
        return new

    def read(self, *, final: bool = False) -> list[FileLines]:
        """What each followed file gave since the last read, files in name order (no scan: see ``poll``)."""
        return [
            FileLines(path, rank_of_log_file(path), tuple(self._tails[path].poll(final=final)))
            for path in sorted(self._tails)
        ]

    def poll(self, *, final: bool = False) -> list[tuple[int | None, str]]:
        """Scan, then read: ``(rank, line)`` pairs. ``final=True``: the unterminated last lines too."""
        self.scan()
        return [(f.rank, line) for f in self.read(final=final) for line in f.lines]

    def close(self) -> None:
        for tail in self._tails.values():
            tail.close()
