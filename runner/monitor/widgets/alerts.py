"""Alerts, worst first, then what the monitor cannot see (notes)."""

from __future__ import annotations

from rich.console import RenderableType
from rich.text import Text

from runner.metrics.snapshot import Snapshot
from runner.monitor.widgets.base import SnapshotPanel

_STYLE = {"error": ("✖ ", "bold red"), "warning": ("▲ ", "yellow"), "info": ("• ", "cyan")}


class AlertsPanel(SnapshotPanel):
    def draw(self, snap: Snapshot, width: int, height: int) -> RenderableType:
        out = Text()
        if not snap.alerts:
            out.append("✔ no alerts", style="green")
        for i, alert in enumerate(snap.alerts):
            icon, style = _STYLE.get(alert.severity, ("• ", ""))
            if i:
                out.append("\n")
            out.append(icon, style=style)
            out.append(alert.message)
        for note in snap.notes:
            out.append("\n• " + note, style="dim")
        return out
