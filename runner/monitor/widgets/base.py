"""A panel that draws the latest Snapshot at its current size (attributes down: the app sets ``snapshot``)."""

from __future__ import annotations

from rich.console import RenderableType
from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from runner.metrics.snapshot import Snapshot


class SnapshotPanel(Widget):
    snapshot: reactive[Snapshot | None] = reactive(None, layout=False)

    def render(self) -> RenderableType:
        size = self.content_size
        if self.snapshot is None:
            return Text("waiting for the first sample…", style="dim")
        return self.draw(self.snapshot, max(1, size.width), max(1, size.height))

    def draw(self, snap: Snapshot, width: int, height: int) -> RenderableType:  # pragma: no cover - abstract
        raise NotImplementedError
