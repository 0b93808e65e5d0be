"""History charts: throughput (samples/s or tokens/s, TFLOP/s per GPU, MFU), loss, learning rate, step time."""

from __future__ import annotations

from collections.abc import Callable

from rich.console import RenderableType
from rich.text import Text

from runner.metrics.snapshot import HistoryPoint, Snapshot
from runner.monitor.render import block_chart, fmt_duration, fmt_num
from runner.monitor.widgets.base import SnapshotPanel
from runner.monitor.widgets.gpus import relative_diff


def chart_lines(
    points: tuple[HistoryPoint, ...],
    pick: Callable[[HistoryPoint], float | None],
    width: int,
    height: int,
    style: str,
) -> Text:
    """A block chart with its top and bottom values labelled on the left (6 cells)."""
    label_w = 6
    rows, lo, hi = block_chart([pick(p) for p in points], max(1, width - label_w), max(1, height))
    out = []
    for i, row in enumerate(rows):
        if i == 0 and hi is not None:
            label = fmt_num(hi)
        elif i == len(rows) - 1 and lo is not None:
            label = fmt_num(lo)
        else:
            label = ""
        out.append(Text(f"{label:>5} ", style="dim") + Text(row, style=style))
    return Text("\n").join(out)


class ThroughputPanel(SnapshotPanel):
    def draw(self, snap: Snapshot, width: int, height: int) -> RenderableType:
        head = Text()
        head.append("samples/s ", style="dim").append(fmt_num(snap.samples_per_sec), style="bold")
        head.append("  tokens/s ", style="dim").append(fmt_num(snap.tokens_per_sec), style="bold")
        if snap.predicted_tokens_per_sec:
            head.append(f" (plan {fmt_num(snap.predicted_tokens_per_sec)}", style="dim")
            if snap.tokens_per_sec is not None:
                head.append(
                    f" {relative_diff(snap.tokens_per_sec, snap.predicted_tokens_per_sec)}", style="dim"
                )
            head.append(")", style="dim")
        second = Text()
        second.append("TFLOP/s/GPU ", style="dim").append(fmt_num(snap.tflops_per_gpu), style="bold")
        mfu = f"{snap.mfu:.1%}" if snap.mfu is not None else "–"
        second.append("  MFU ", style="dim").append(mfu, style="bold")
        use_tokens = any(p.tokens_per_sec is not None for p in snap.history)
        if use_tokens:
            chart = chart_lines(snap.history, lambda p: p.tokens_per_sec, width, height - 2, "green")
        else:
            chart = chart_lines(snap.history, lambda p: p.samples_per_sec, width, height - 2, "green")
        return Text("\n").join([head, second, chart])


def titled(name: str, snap: Snapshot, figure: str) -> str:
    """A panel title naming where its figure came from: "Throughput · csv monitor"."""
    source = snap.sources.get(figure)
    return f"{name} · {source}" if source else name


class LossPanel(SnapshotPanel):
    def draw(self, snap: Snapshot, width: int, height: int) -> RenderableType:
        return chart_lines(snap.history, lambda p: p.loss, width, height, "yellow")


class LrPanel(SnapshotPanel):
    def draw(self, snap: Snapshot, width: int, height: int) -> RenderableType:
        return chart_lines(snap.history, lambda p: p.lr, width, height, "magenta")


class StepPanel(SnapshotPanel):
    """Progress: step / total, step time (and its chart), ETA."""

    def draw(self, snap: Snapshot, width: int, height: int) -> RenderableType:
        head = Text()
        total = f"/{snap.total_steps}" if snap.total_steps else ""
        head.append("step ", style="dim").append(
            f"{snap.step if snap.step is not None else '–'}{total}", style="bold"
        )
        second = Text()
        step_time = f"{snap.step_time_s:.3g}s" if snap.step_time_s is not None else "–"
        second.append("time/step ", style="dim").append(step_time, style="bold")
        second.append("  ETA ", style="dim").append(fmt_duration(snap.eta_s), style="bold")
        chart = chart_lines(snap.history, lambda p: p.step_time_s, width, max(1, height - 2), "cyan")
        return Text("\n").join([head, second, chart])
