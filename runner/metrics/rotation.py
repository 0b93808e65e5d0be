"""metrics.jsonl kept bounded for a run of any length, with the whole timeline still readable.

Files in a run directory (``LIVE`` is ``metrics.jsonl``; ``<stem>`` is ``metrics``):

    metrics.jsonl                      the live file, one snapshot per interval, appended
    metrics.<n>-<n>.x1.jsonl           an archived live file (rotation number n), every snapshot
    metrics.<a>-<b>.x<S>.n<N>.jsonl    rotations a..b merged: N snapshots, every S-th kept

When the live file reaches ``ROTATE_BYTES`` it is renamed to the next part (``metrics.<n>-<n>.x1.jsonl``: an atomic
rename, nothing lost) and a new live file is started. When the parts together pass ``ARCHIVE_BYTES`` they are
merged (all but the newest, which holds the latest snapshots whole) into one part at the finest power-of-two
stride that fits half the budget, written to a hidden temp file, fsynced and renamed into place before the parts
it covers are deleted. So the disk use stays under about
``ARCHIVE_BYTES + 2 * ROTATE_BYTES`` however long the job runs, and the stride grows in step with the run's
length, as the dashboard's own ``Downsampler`` coarsens in memory.

A kill at any point leaves either the part a merge was made from, or the merged part *and* some of its inputs:
readers skip a part whose range a wider part already covers, and the next writer (``tidy``) deletes it and any
temp file.

Readers (``history_lines``) read the parts oldest first, then the live file, thinning each to the coarsest stride
present, so every line they yield stands for the same number of snapshots and the charts' time axis stays even.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROTATE_BYTES = 4 * 1024 * 1024  # ~1.5 h of snapshots at 1 Hz on one host (~750 bytes each)
ARCHIVE_BYTES = 16 * 1024 * 1024
_MERGE_TEMP = ".{stem}.merge.tmp"


@dataclass(frozen=True)
class Part:
    path: Path
    first: int  # rotation numbers this part covers, first..last
    last: int
    stride: int  # snapshots per line kept (a power of two)
    count: int | None = None  # snapshots it stands for (None: one per line, an archived live file)


def parts(live: Path) -> list[Part]:
    """The archived parts beside ``live`` to read, oldest first; parts covered by a wider one are left out."""
    found = []
    with contextlib.suppress(OSError):
        for entry in os.listdir(live.parent):
            m = _part_pattern(live).fullmatch(entry)
            if m and (stride := int(m.group(3))) > 0 and stride & (stride - 1) == 0:
                count = int(m.group(4)) if m.group(4) else None
                found.append(Part(live.parent / entry, int(m.group(1)), int(m.group(2)), stride, count))
    found.sort(key=lambda p: (p.first, -p.last))
    kept: list[Part] = []
    for part in found:
        if kept and part.first <= kept[-1].last:
            continue  # inside a merged part (a merge killed before it removed its inputs)
        kept.append(part)
    return kept


def _part_pattern(live: Path) -> re.Pattern[str]:
    return re.compile(rf"{re.escape(live.stem)}\.(\d+)-(\d+)\.x(\d+)(?:\.n(\d+))?{re.escape(live.suffix)}")


def rotate(live: Path, *, archive_bytes: int = ARCHIVE_BYTES) -> None:
    """Archive the live file as the next part, then merge the parts if they pass ``archive_bytes``. The caller
    (the one writer of the run's metrics, ``MetricsLog``) has closed the live file and opens a new one next."""
    tidy(live)
    archived = parts(live)
    n = archived[-1].last + 1 if archived else 1
    with contextlib.suppress(FileNotFoundError):
        os.replace(live, live.with_name(f"{live.stem}.{n}-{n}.x1{live.suffix}"))
    archived = parts(live)
    if sum(_size(p.path) for p in archived) > archive_bytes and len(archived) > 2:
        # the newest part stays whole: it holds the run's latest snapshots (the last one may be the verdict)
        # when the job ends right after a rotation, and a merge would thin them away
        _merge(live, archived[:-1], archive_bytes)


def history_lines(live: Path, max_lines: int | None = None) -> Iterator[bytes]:
    """Every part's kept lines, oldest first, then the live file's, all thinned to one stride (the coarsest
    present, or coarser so that at most about ``max_lines`` lines come out); the very last line always comes
    out. Empty lines are skipped; a torn or bad line is the parser's business."""
    sources = [*parts(live), Part(live, 0, 0, 1)]
    stride = max(p.stride for p in sources)
    if max_lines is not None:
        represented = sum(_represented(p) for p in sources)
        while represented // stride > max_lines:
            stride *= 2
    held: bytes | None = None  # the latest line not yielded, so that the true last one can be
    for line, kept in _thinned(sources, stride):
        held = None if kept else line
        if kept:
            yield line
    if held is not None:
        yield held


def _thinned(sources: list[Part], stride: int) -> Iterator[tuple[bytes, bool]]:
    """Each line with whether it is kept at ``stride``: one line per ``stride`` snapshots, counted across all the
    sources by the snapshots each line stands for (a merged part's own count, so its rounding does not shift
    the parts after it, and short parts do not each add a line)."""
    position = 0  # snapshots before this line, since the run's first
    for part in sources:
        start, lines = position, 0
        for line in _lines(part.path):
            yield line, (start + lines * part.stride) % stride == 0
            lines += 1
        position = start + (part.count if part.count is not None else lines * part.stride)


def _represented(part: Part) -> int:
    return part.count if part.count is not None else _count_lines(part.path) * part.stride


def _merge(live: Path, archived: list[Part], archive_bytes: int) -> None:
    """The parts as one, at the finest stride that fits half the budget (the oldest history thins only as the
    run gets longer), via a temp file renamed into place; then the parts it covers are removed."""
    count = sum(_represented(p) for p in archived)
    estimate = sum(_size(p.path) * p.stride for p in archived)  # bytes if every snapshot were kept
    stride = max(p.stride for p in archived)
    while estimate // stride > archive_bytes // 2:
        stride *= 2
    temp = live.with_name(_MERGE_TEMP.format(stem=live.stem))
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        for line, kept in _thinned(archived, stride):
            if kept:
                out.write(line + b"\n")
        out.flush()
        os.fsync(out.fileno())
    first, last = archived[0].first, archived[-1].last
    os.replace(temp, live.with_name(f"{live.stem}.{first}-{last}.x{stride}.n{count}{live.suffix}"))
    tidy(live)


def tidy(live: Path) -> None:
    """Delete a merge's temp file and parts a merged one covers (both only left by a kill): each writer does
    this when it starts, and each rotation."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(live.with_name(_MERGE_TEMP.format(stem=live.stem)))
    keep = {p.path.name for p in parts(live)}
    pattern = _part_pattern(live)
    with contextlib.suppress(OSError):
        for entry in os.listdir(live.parent):
            if pattern.fullmatch(entry) and entry not in keep:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(live.parent / entry)


def _lines(path: Path) -> Iterator[bytes]:
    try:
        fh = path.open("rb")
    except OSError:
        return
    with fh:
        for raw in fh:
            line = raw.strip()
            if line:
                yield line


def _count_lines(path: Path) -> int:
    return sum(1 for _ in _lines(path))


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
