"""Fold DeepSpeed's configuration dump on the terminal: ~100 lines that rank 0 prints once at engine start
(``[config.py:NNN:print] DeepSpeedEngine configuration:``, one ``[config.py:NNN:print]   key .... value`` line
per setting, some with multi-line values, then ``[config.py:NNN:print_user_config]   json = {`` and the config
as indented JSON). The log files keep every line; the terminal gets one line saying where they are.

Pure: lines in, lines and fold notices out. State is kept per source (rank), because lines of other ranks can
arrive between two lines of the dump.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from runner.tracebacks import TracebackCollector

# DeepSpeed's logger prefix (deepspeed/utils/logging.py, LoggerFactory, 0.19.8; docs/log-formats.md) from
# deepspeed/runtime/config.py's DeepSpeedConfig.print and print_user_config: the config dump at engine start.
_DUMP_LINE_RE = re.compile(r"^\[[\d-]+ [\d:,]+\] \[\w+\] \[config\.py:\d+:(?P<fn>print|print_user_config)\] ")
_CONTINUATION_RE = re.compile(r"^(?:\s|[}\]])")  # a multi-line value's inner or closing line


@dataclass(frozen=True)
class Shown:
    """A line to print as it is."""

    text: str


@dataclass(frozen=True)
class Folded:
    """``lines`` lines of DeepSpeed's config dump were left out (from ``rank``'s output; None: the launcher's)."""

    lines: int
    rank: int | None


Output = Shown | Folded


@dataclass
class _Dump:
    lines: int = 0
    json_depth: int | None = None  # inside print_user_config's JSON: its brace depth


@dataclass
class ConfigDumpFolder:
    """``feed(line, rank)`` returns what to print instead; ``flush()`` ends dumps still open (the output ended)."""

    _open: dict[int | None, _Dump] = field(default_factory=dict)

    def feed(self, text: str, rank: int | None = None) -> list[Output]:
        dump = self._open.get(rank)
        m = _DUMP_LINE_RE.match(text)
        if m:
            dump = dump or self._open.setdefault(rank, _Dump())
            dump.lines += 1
            if m.group("fn") == "print_user_config":
                rest = text[m.end() :]
                dump.json_depth = rest.count("{") - rest.count("}")
                if dump.json_depth <= 0:
                    return [self._close(rank)]
            return []
        if dump is None:
            return [Shown(text)]
        if dump.json_depth is not None:
            dump.lines += 1
            dump.json_depth += text.count("{") - text.count("}")
            return [self._close(rank)] if dump.json_depth <= 0 else []
        if _CONTINUATION_RE.match(text):
            dump.lines += 1
            return []
        return [self._close(rank), Shown(text)]

    def flush(self) -> list[Output]:
        return [self._close(rank) for rank in list(self._open)]

    def _close(self, rank: int | None) -> Folded:
        dump = self._open.pop(rank)
        return Folded(dump.lines, rank)


@dataclass(frozen=True)
class FoldedInterrupt:
    """A Python traceback ending in ``KeyboardInterrupt`` (``lines`` long) was left out: what a process prints when
    a stop (dswiz's, or the user's Ctrl-C) reaches it -- the consequence, never the cause."""

    lines: int
    rank: int | None


@dataclass
class InterruptTracebackFolder:
    """``feed(line, rank)`` holds a traceback until its last line shows what it was: a ``KeyboardInterrupt`` one is
    folded, any other is shown whole (a real failure must stay on the screen). Where a traceback starts and ends is
    decided by the verdict's own reader (runner.tracebacks), so both agree, ranks' interleaved lines included."""

    _reader: TracebackCollector = field(default_factory=TracebackCollector)
    _held: dict[tuple[object, int | None], list[str]] = field(default_factory=dict)

    def feed(self, text: str, rank: int | None = None) -> list[Shown | FoldedInterrupt]:
        key = TracebackCollector.key_of(text, default_rank=rank)
        found = self._reader.feed(text, default_rank=rank)
        if self._reader.reading(key):
            self._held.setdefault(key, []).append(text)
            return []
        held = self._held.pop(key, [])
        if found is not None and found.type.endswith("KeyboardInterrupt"):
            return [FoldedInterrupt(len(held) + 1, rank)]
        return [Shown(line) for line in [*held, text]]

    def flush(self) -> list[Shown | FoldedInterrupt]:
        out: list[Shown | FoldedInterrupt] = [Shown(line) for lines in self._held.values() for line in lines]
        self._held.clear()
        return out
