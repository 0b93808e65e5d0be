"""Follow a growing text file like ``tail -F``, in constant memory, never re-reading what was read.

Handles the file not existing yet, truncation (size below our offset: start again at 0), rotation (a new inode at
the path: finish the old file, then read the new one from its start), torn last lines (kept until the newline
arrives) and overlong lines (cut at ``max_line_bytes``). Each ``poll`` reads at most ``max_read_bytes``, so a
burst of output cannot stall the caller; the rest comes on the next poll.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

DEFAULT_MAX_LINE = 64 * 1024
DEFAULT_MAX_READ = 4 * 1024 * 1024


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

    def poll(self) -> list[str]:
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
