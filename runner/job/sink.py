"""What a running job tells whoever shows it (``JobSink``), and what it hands back at the end (``RunOutcome``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from runner.phases import Phase
from runner.rundir import RunRecord, RunVerdict
from runner.verdict import Status


@dataclass(frozen=True)
class RunOutcome:
    exit_code: int
    verdict: RunVerdict
    run_dir: Path
    record: RunRecord


class JobSink(Protocol):
    """Where a running job is shown: the terminal printer (``runner.job.terminal``), or a dashboard."""

    def on_line(self, text: str, rank: int | None) -> None: ...
    def on_status(self, status: Status) -> None: ...
    def on_phase(self, phase: Phase) -> None: ...
    def on_notice(self, text: str) -> None: ...
    def on_end(self, outcome: RunOutcome) -> None: ...
