"""A predicted-memory bar against capacity: ``GPU  ██████████░░░░░  61.2 / 80.0 GiB``.

Red when the prediction exceeds the capacity, dim when either is unknown.
"""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from wizard.units import fmt_bytes

BAR_CELLS = 24


def bar_text(label: str, used: int | None, capacity: int | None, cells: int = BAR_CELLS) -> Text:
    text = Text(f"{label:<5}")
    if used is None:
        text.append("·" * cells, style="dim")
        text.append("  not predicted", style="dim")
        return text
    if used == 0:
        text.append("·" * cells, style="dim")
        text.append("  none", style="dim")
        return text
    if not capacity:
        text.append("?" * cells, style="dim")
        text.append(f"  {fmt_bytes(used)} / capacity unknown", style="dim")
        return text
    ratio = used / capacity
    filled = min(cells, round(ratio * cells))
    if used > 0 and filled == 0:
        filled = 1  # something is there: show it
    style = "bold red" if ratio > 1 else ("yellow" if ratio > 0.9 else "green")
    text.append("█" * filled, style=style)
    text.append("░" * (cells - filled), style="dim")
    text.append(f"  {fmt_bytes(used)} / {fmt_bytes(capacity)}", style=style if ratio > 1 else "")
    if ratio > 1:
        text.append("  over", style="bold red")
    return text


class MemoryBar(Widget):
    """One tier's bar. Set ``used`` and ``capacity`` (bytes) to update it."""

    DEFAULT_CSS = """
    MemoryBar { height: 1; width: 1fr; }
    """

    used: reactive[int | None] = reactive(None)
    capacity: reactive[int | None] = reactive(None)

    def __init__(self, label: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.label = label

    def render(self) -> Text:
        return bar_text(self.label, self.used, self.capacity)
