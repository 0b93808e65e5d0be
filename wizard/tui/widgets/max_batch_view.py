"""The max-batch table, compact: one line per ZeRO stage and offload choice with the largest micro-batch that fits
and its predicted tokens/s, without and with activation checkpointing side by side (stage 0 = plain data
parallelism, the DDP baseline). The fastest entry is highlighted."""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from wizard.planner import MaxBatchRow
from wizard.service.tables import max_batch_pairs


def _cells(line: MaxBatchRow | None, fastest: float | None) -> list[Text]:
    if line is None:
        return [Text(""), Text("")]
    if line.max_micro_batch == 0 or line.tokens_per_sec is None:
        return [Text("none", style="red"), Text("-", style="dim")]
    batch = Text(f"{line.max_micro_batch}{'+' if line.capped else ''}")
    if line.limits:
        batch = Text(f"{line.max_micro_batch} ({'/'.join(line.limits)} short)", style="red")
    rate = Text(f"{line.tokens_per_sec:,.0f}")
    if fastest is not None and line.fits and line.tokens_per_sec >= fastest:
        batch.stylize("bold green")
        rate.stylize("bold green")
    return [batch, rate]


def max_batch_renderable(lines: Sequence[MaxBatchRow]) -> Table | Text:
    if not lines:
        return Text("No prediction yet: fill in the Model step first.", style="dim")
    fitting = [x.tokens_per_sec for x in lines if x.fits and x.tokens_per_sec is not None]
    fastest = max(fitting) if fitting else None
    ckpt = any(x.strategy.activation_checkpointing for x in lines)
    table = Table(box=box.SIMPLE, pad_edge=False, show_edge=False, header_style="bold")
    for name in ("stage", "offload", "batch", "tokens/s") + (("batch ckpt", "tokens/s ckpt") if ckpt else ()):
        table.add_column(name, justify="left" if name in ("stage", "offload") else "right", no_wrap=True)
    for pair in max_batch_pairs(lines):
        row = [Text(pair.stage), Text(pair.offload)]
        for line in pair.rows(ckpt):
            row += _cells(line, fastest)
        table.add_row(*row)
    return table


class MaxBatchView(Static):
    """The table above, for the strategy screen."""

    lines: tuple[MaxBatchRow, ...] = ()

    def show_lines(self, lines: Sequence[MaxBatchRow]) -> None:
        self.lines = tuple(lines)
        self.update(max_batch_renderable(self.lines))
