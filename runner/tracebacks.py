"""Python tracebacks in a job's output, per rank: which exception ended each rank, and where. Pure.

Lines arrive one at a time from per-rank logs (the rank is known) or from a shared stream where torch prefixes
every line of an uncaught exception with ``[rankN]: `` once the process group exists
(``torch/distributed/distributed_c10d.py``, ``_distributed_excepthook``). The traceback's structure is used,
not the exception's name: it ends at the first unindented line after the frames.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# torch puts "[rankN]: " in front of every line of an uncaught exception once the process group exists
# (torch/distributed/distributed_c10d.py, _distributed_excepthook); runner.metrics.parse strips it too.
TORCH_RANK_PREFIX_RE = re.compile(r"^\[rank(?P<rank>\d+)\]:\s?")
MAX_RANK = 2**31 - 1  # torch's ranks are C ints; a larger "rank" in a line is not one


def rank_number(text: str, default: int | None) -> int | None:
    """The rank a line's prefix names (``default`` when it names none that can be a rank: 5,000 digits, say)."""
    digits = text.lstrip("-").lstrip("0")
    if len(digits) > len(str(MAX_RANK)) or abs(int(text)) > MAX_RANK:
        return default
    return int(text)


_FRAME_RE = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>.+)$')
_CHAIN_MARKERS = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)
_KEEP_LINES = 40  # traceback lines kept per exception (the end is what matters)

# Exceptions that are the *consequence* of another rank's death: gloo/NCCL peers vanish, the store closes.
_SECONDARY_PATTERNS = (
    "Connection closed by peer",
    "Connection reset by peer",
    "remote worker crashing",
    "Broken pipe",
    "NCCL communicator was aborted",
    "remote process exited",
    "failed to recv, got 0 bytes",
    "Socket Timeout",
    "Connection refused",
)


@dataclass(frozen=True)
class RankException:
    """The exception that ended one rank's traceback."""

    rank: int | None  # None: the stream did not say (e.g. the launcher's own traceback)
    type: str  # "RuntimeError", "torch.OutOfMemoryError"
    message: str
    location: str | None  # 'train.py:108 in maybe_fail' — the innermost frame
    seq: int  # arrival order across the whole job: the first exception raised is usually the cause
    lines: tuple[str, ...] = ()  # the end of the traceback, without rank prefixes
    chained_from: str | None = None  # "ValueError: …" when raised while handling another

    @property
    def text(self) -> str:
        return f"{self.type}: {self.message}" if self.message else self.type

    @property
    def secondary(self) -> bool:
        """A consequence of another process dying (a peer closed the connection), not a cause."""
        return any(p in self.message for p in _SECONDARY_PATTERNS) or self.type.endswith("KeyboardInterrupt")


@dataclass
class _Open:
    lines: list[str] = field(default_factory=list)
    location: str | None = None
    chained_from: str | None = None
    after_exception: RankException | None = None  # a finished one that a chain marker may continue


class TracebackCollector:
    """Feed lines (``feed(text, default_rank=…)``); finished exceptions accumulate in ``exceptions``."""

    def __init__(self) -> None:
        self.exceptions: list[RankException] = []
        self._open: dict[object, _Open] = {}  # per stream: a traceback being read
        self._last: dict[object, RankException] = {}  # per stream: the last finished one (chains)
        self._seq = 0

    @staticmethod
    def key_of(
        text: str, *, default_rank: int | None = None, stream: object = None
    ) -> tuple[object, int | None]:
        """The traceback a line belongs to: its stream and rank (torch's ``[rankN]: `` prefix wins)."""
        m = TORCH_RANK_PREFIX_RE.match(text)
        return (stream, rank_number(m.group("rank"), default_rank) if m else default_rank)

    def reading(self, key: tuple[object, int | None]) -> bool:
        """Whether a traceback is being read on ``key`` (see ``key_of``)."""
        return key in self._open

    def feed(
        self, text: str, *, default_rank: int | None = None, stream: object = None
    ) -> RankException | None:
        """One line. Returns the exception when this line finished a traceback."""
        line = text.rstrip("\r\n")
        key = self.key_of(line, default_rank=default_rank, stream=stream)
        rank = key[1]
        m = TORCH_RANK_PREFIX_RE.match(line)
        if m:
            line = line[m.end() :]
        current = self._open.get(key)
        stripped = line.strip()
        if stripped == "Traceback (most recent call last):":
            chained = None
            if current is not None and current.chained_from is not None:
                chained = current.chained_from
            self._open[key] = _Open(lines=[line], chained_from=chained)
            return None
        if stripped in _CHAIN_MARKERS:
            last = self._last.get(key)
            if last is not None:
                self._open[key] = _Open(lines=[], chained_from=last.text)
            return None
        if current is None or not current.lines:
            return None
        if not stripped or line[0].isspace() or stripped.startswith("^") or stripped.startswith("~"):
            current.lines.append(line)
            frame = _FRAME_RE.match(line)
            if frame:
                current.location = f"{frame.group('file')}:{frame.group('line')} in {frame.group('fn')}"
            return None
        # The first unindented line after the frames: "Type: message" (or a bare "Type").
        current.lines.append(line)
        exc_type, _, message = stripped.partition(": ")
        if " " in exc_type or not exc_type:  # not an exception line after all: stop reading this one
            del self._open[key]
            return None
        self._seq += 1
        found = RankException(
            rank=rank,
            type=exc_type.rstrip(":"),
            message=message.strip(),
            location=current.location,
            seq=self._seq,
            lines=tuple(current.lines[-_KEEP_LINES:]),
            chained_from=current.chained_from,
        )
        del self._open[key]
        self._last[key] = found
        if found.chained_from is not None:
            # The chained exception replaces the one it was raised from (same stream, same rank).
            self.exceptions = [
                e for e in self.exceptions if not (e.rank == rank and e.text == found.chained_from)
            ]
        self.exceptions.append(found)
        return found


def root_cause(exceptions: list[RankException]) -> RankException | None:
    """The exception that most likely started the failure: the first one that is not a consequence of another
    rank's death; the first of all when every one is."""
    if not exceptions:
        return None
    primary = [e for e in exceptions if not e.secondary]
    return min(primary or exceptions, key=lambda e: e.seq)
