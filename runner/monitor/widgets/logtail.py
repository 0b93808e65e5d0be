"""The job's last log lines, cut to the panel's width (no wrapping: the newest lines stay visible)."""

from __future__ import annotations

from rich.console import RenderableType
from rich.text import Text

from runner.metrics.snapshot import Snapshot
from runner.monitor.widgets.base import SnapshotPanel


def _style(line: str) -> str:
    if "[ERROR]" in line or "Error" in line or "error" in line:
        return "red"
    if "[WARNING]" in line:
        return "yellow"
    return ""


class LogTailPanel(SnapshotPanel):
    def draw(self, snap: Snapshot, width: int, height: int) -> RenderableType:
        lines = list(snap.log_tail)[-height:]
        if not lines:
            return Text("no log lines yet (or the job's output is not in a file dswiz can read)", style="dim")
        out = []
        for line in lines:
            text = line.replace("\t", "    ")
            if len(text) > width:
                text = text[: width - 1] + "…"
            out.append(Text(text, style=_style(line), no_wrap=True))
        return Text("\n").join(out)
