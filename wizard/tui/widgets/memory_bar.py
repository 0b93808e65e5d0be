"""A predicted-memory bar against capacity: ``GPU  ██████████░░░░░  61.2 / 80.0 GiB``.

Red when the prediction exceeds what the planner lets a plan use (the capacity less the share kept free: the same
bar the planner's "does not fit" is judged by), yellow near it, dim when either is unknown.
"""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from wizard.units import fmt_bytes, fmt_percent

BAR_CELLS = 24


def bar_text(
    label: str, used: int | None, capacity: int | None, cells: int = BAR_CELLS, *, budget: int | None = None
) -> Text:
    """``budget``: what a plan may use of ``capacity`` (None: all of it)."""
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
    limit = min(budget, capacity) if budget is not None else capacity
    ratio = used / capacity
    filled = min(cells, round(ratio * cells))
    if used > 0 and filled == 0:
        filled = 1  # something is there: show it
    over = used > limit
    style = "bold red" if over else ("yellow" if used > 0.9 * limit else "green")
    text.append("█" * filled, style=style)
    text.append("░" * (cells - filled), style="dim")
    text.append(f"  {fmt_bytes(used)} / {fmt_bytes(capacity)}", style=style if over else "")
    if ratio > 1:
        text.append("  over", style="bold red")
    elif over:
        text.append(f"  in the {fmt_percent(1 - limit / capacity)} kept free", style="bold red")
    return text


class MemoryBar(Widget):
    """One tier's bar. Set ``used``, ``capacity`` and ``budget`` (bytes) to update it."""

    DEFAULT_CSS = """
    MemoryBar { height: 1; width: 1fr; }
    """

    used: reactive[int | None] = reactive(None)
    capacity: reactive[int | None] = reactive(None)
    budget: reactive[int | None] = reactive(None)  # what a plan may use of the capacity (None: all of it)

    def __init__(self, label: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.label = label

    def show(self, used: int | None, capacity: int | None, budget: int | None = None) -> None:
        self.used, self.capacity, self.budget = used, capacity, budget

    def render(self) -> Text:
        return bar_text(self.label, self.used, self.capacity, budget=self.budget)
