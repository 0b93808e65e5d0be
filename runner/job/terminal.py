"""The job in a terminal: the log streamed as it comes, a status line every interval, dswiz's own lines marked
``[dswiz]``, the verdict at the end."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import IO

from runner import rundir
from runner.job.sink import RunOutcome
from runner.logfold import ConfigDumpFolder, Folded, FoldedInterrupt, InterruptTracebackFolder, Output, Shown
from runner.metrics.tail import rank_log_files, rank_of_log_file
from runner.phases import Phase
from runner.verdict import Status


class TerminalSink:
    """The log streamed as it comes, a one-line status every interval, dswiz's own lines marked ``[dswiz]``.
    DeepSpeed's ~100-line config dump is folded into one line naming the log file that keeps it.

    Writes that fail (the terminal went away: SIGHUP) are dropped; the run directory still gets everything.
    """

    def __init__(
        self, stream: IO[str] | None = None, *, show_log: bool = True, run_dir: Path | None = None
    ) -> None:
        self._stream = stream if stream is not None else sys.stdout
        self._show_log = show_log
        self._dead = False
        self._muted = False
        self._held: RunOutcome | None = None
        self._fold = ConfigDumpFolder()
        self._interrupts = InterruptTracebackFolder()
        self._run_dir = run_dir

    def mute(self) -> None:
        """While a dashboard owns the terminal: print nothing (the run directory still gets everything)."""
        self._muted = True

    def unmute(self) -> None:
        """Back to printing; a verdict that came while muted is printed now."""
        self._muted = False
        if self._held is not None:
            held, self._held = self._held, None
            self.on_end(held)

    def _write(self, text: str) -> None:
        if self._dead or self._muted:
            return
        try:
            self._stream.write(text + "\n")
            self._stream.flush()
        except (OSError, ValueError):
            self._dead = True

    def on_line(self, text: str, rank: int | None) -> None:
        if self._show_log:
            self._show(self._fold.feed(text.split("\r")[-1], rank), rank)

    def _show(self, outputs: list[Output], rank: int | None) -> None:
        for out in outputs:
            if isinstance(out, Shown):
                self._show_unfolded(self._interrupts.feed(out.text, rank))
            else:
                self._write(
                    f"[dswiz] DeepSpeed printed its config ({out.lines} lines): {self._where(out.rank)}"
                )

    def _show_unfolded(self, outputs: list[Shown | FoldedInterrupt]) -> None:
        for out in outputs:
            if isinstance(out, Shown):
                self._write(out.text)
            else:
                self._write(
                    f"[dswiz] a process printed its KeyboardInterrupt traceback ({out.lines} lines; the stop "
                    f"reached it): {self._where(out.rank)}"
                )

    def _where(self, rank: int | None) -> str:
        """The log file that keeps a rank's lines (the launcher's: logs/combined.log)."""
        if self._run_dir is None:
            return "the run directory's logs"
        if rank is None:
            return str(self._run_dir / rundir.COMBINED_LOG)
        rank_dir = self._run_dir / rundir.RANK_LOGS_DIR
        files = [f for f in rank_log_files(rank_dir) if rank_of_log_file(f) == rank]
        return str(files[-1] if files else rank_dir)

    def on_status(self, status: Status) -> None:
        self._write(f"[dswiz] {status.line()}")

    def on_phase(self, phase: Phase) -> None:
        self._write(f"[dswiz] {phase.name}…")

    def on_notice(self, text: str) -> None:
        self._write(f"[dswiz] {text}")

    def on_end(self, outcome: RunOutcome) -> None:
        if self._show_log:
            for folded in self._fold.flush():  # flush() only returns Folded notices
                self._show([folded], folded.rank if isinstance(folded, Folded) else None)
            self._show_unfolded(self._interrupts.flush())
        if self._muted:
            self._held = outcome
            return
        for line in format_verdict(outcome):
            self._write(f"[dswiz] {line}")


def format_verdict(outcome: RunOutcome) -> list[str]:
    v = outcome.verdict
    lines = [f"verdict: {v.summary}"]
    lines += [f"  {a}" for a in v.advice]
    lines += [f"  | {e}" for e in v.evidence]
    gone = "" if outcome.run_dir.is_dir() else " (removed during the run)"
    lines.append(f"run directory: {outcome.run_dir}{gone}")
    return lines
