"""The breadcrumb at the top of every step: where you are among the six steps."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

STEP_TITLES: tuple[str, ...] = (
    "Hardware",
    "Model",
    "Strategy",
    "Precision & batch",
    "Multi-node",
    "Review & write",
)


def step_text(current: int) -> Text:
    text = Text()
    for i, title in enumerate(STEP_TITLES):
        if i:
            text.append("  ›  ", style="dim")
        style = "bold reverse" if i == current else ("" if i < current else "dim")
        text.append(f" {i + 1} {title} ", style=style)
    return text


class StepBar(Static):
    DEFAULT_CSS = """
    StepBar { height: 1; width: 1fr; padding: 0 1; background: $panel; }
    """

    def __init__(self, current: int) -> None:
        super().__init__(step_text(current))
