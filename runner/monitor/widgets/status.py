"""The top line: what is watched, the job's state, step, and when the last sample was taken."""

from __future__ import annotations

import time

from rich.console import RenderableType
from rich.text import Text

from runner.metrics.snapshot import Snapshot
from runner.monitor.render import fmt_duration
from runner.monitor.widgets.base import SnapshotPanel

_STATE = {
    "running": ("● running", "bold green"),
    "starting": ("◌ starting", "bold cyan"),
    "finished": ("✔ finished", "bold green"),
    "failed": ("✖ failed", "bold red"),
    "ended": ("■ ended (exit code unknown)", "bold yellow"),
    "interrupted": ("■ interrupted", "bold yellow"),
    "supervisor_lost": ("✖ supervisor lost", "bold red"),
    "unknown": ("? unknown", "bold yellow"),
}


class StatusLine(SnapshotPanel):
    def draw(self, snap: Snapshot, width: int, height: int) -> RenderableType:
        label, style = _STATE.get(snap.job_state, (snap.job_state, "bold"))
        out = Text(" dswiz monitor ", style="bold reverse")
        out.append(f" {snap.source} ", style="bold")
        out.append(label, style=style)
        if snap.exit_code is not None and snap.job_state in ("finished", "failed", "interrupted"):
            out.append(f" (exit {snap.exit_code})", style=style)
        if snap.world_size:
            out.append(f"  {snap.world_size} ranks", style="dim")
        if snap.step is not None:
            out.append(f"  step {snap.step}" + (f"/{snap.total_steps}" if snap.total_steps else ""))
        if snap.eta_s is not None:
            out.append(f"  ETA {fmt_duration(snap.eta_s)}")
        out.append("  " + time.strftime("%H:%M:%S", time.localtime(snap.time)), style="dim")
        return out
