"""The breadcrumb at the top of every step: where you are among the six steps, in the width there is (full titles,
then short ones, then numbers beside the current step's title), so the whole stepper shows at 80 columns."""

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
SHORT_TITLES: tuple[str, ...] = ("Hardware", "Model", "Strategy", "Precision", "Nodes", "Review")


def step_text(current: int, width: int | None = None) -> Text:
    """The stepper in ``width`` columns (None: full titles)."""
    tiers = ((STEP_TITLES, "  ›  "), (STEP_TITLES, "›"), (SHORT_TITLES, "›"), (None, "›"))
    for titles, sep in tiers:
        text = Text()
        for i in range(len(STEP_TITLES)):
            if i:
                text.append(sep, style="dim")
            title = STEP_TITLES[i] if titles is None and i == current else (titles[i] if titles else "")
            style = "bold reverse" if i == current else ("" if i < current else "dim")
            text.append(f" {i + 1} {title} " if title else f" {i + 1} ", style=style)
        if width is None or text.cell_len <= width:
            return text
    return text


class StepBar(Static):
    DEFAULT_CSS = """
    StepBar { height: 1; width: 1fr; padding: 0 1; background: $panel; }
    """

    def __init__(self, current: int) -> None:
        super().__init__(step_text(current))
        self.current = current

    def on_resize(self) -> None:
        self.update(step_text(self.current, self.content_size.width))
