"""Per-GPU memory bars (used vs total, predicted peak marked '│') and utilisation sparklines."""

from __future__ import annotations

from rich.console import RenderableType
from rich.text import Text

from runner.metrics.snapshot import GpuState, Snapshot
from runner.monitor.render import bar, fmt_gib, fmt_num, sparkline
from runner.monitor.widgets.base import SnapshotPanel


class GpuPanel(SnapshotPanel):
    def draw(self, snap: Snapshot, width: int, height: int) -> RenderableType:
        if not snap.gpus:
            text = Text()
            text.append("No GPU numbers: ", style="bold yellow")
            text.append(snap.gpu_note or "no NVIDIA GPU visible")
            text.append(
                "\nGPU memory and utilisation are not shown; throughput, loss and host are.", style="dim"
            )
            return text
        utils = [
            [p.gpu_utils[i] if i < len(p.gpu_utils) else None for p in snap.history]
            for i in range(len(snap.gpus))
        ]
        compare = peak_vs_plan(snap)
        lines = [compare] if compare is not None else []
        two_lines = len(snap.gpus) * 2 <= height - len(lines)
        for i, gpu in enumerate(snap.gpus):
            lines += _gpu_lines(gpu, utils[i] if i < len(utils) else [], width, two_lines)
        out = Text("\n").join(lines[:height])
        if len(lines) > height:
            out.append(f"\n… {len(snap.gpus)} GPUs; enlarge the terminal to see all", style="dim")
        return out


def peak_vs_plan(snap: Snapshot) -> Text | None:
    """ "peak 23.4G measured · plan 22.0G (+6%)": the most any GPU held so far beside the plan's peak."""
    measured, planned = snap.measured_peak_gpu_bytes, snap.predicted_peak_gpu_bytes
    if measured is None and planned is None:
        return None
    out = (
        Text("peak ", style="dim")
        .append(f"{fmt_gib(measured)}G", style="bold")
        .append(" measured", style="dim")
    )
    if planned:
        out.append(" · plan ", style="dim").append(f"{fmt_gib(planned)}G")
        if measured is not None:
            out.append(f" ({relative_diff(measured, planned)})", style="dim")
    return out


def relative_diff(measured: float, planned: float) -> str:
    """ "+6%": how far the measurement is from the plan, signed."""
    return f"{(measured - planned) / planned:+.0%}" if planned else fmt_num(None)


def _gpu_lines(g: GpuState, utils: list[float | None], width: int, two_lines: bool) -> list[Text]:
    total = g.memory_total_bytes
    frac = g.memory_fraction
    marker = g.predicted_peak_bytes / total if g.predicted_peak_bytes and total else None
    label = f"{g.index} "
    nums = f" {fmt_gib(g.memory_used_bytes)}/{fmt_gib(total)}G"
    util = f"{g.utilization:3.0f}%" if g.utilization is not None else "  –%"
    if two_lines:
        name = (g.name or "GPU").replace("NVIDIA ", "")[:14]
        head = Text(label + f"{name:<14} ", style="bold")
        bar_w = max(4, width - len(head) - len(nums))
        line1 = head + bar(frac, bar_w, marker=marker) + Text(nums)
        extra = []
        if g.power_watts is not None:
            extra.append(f"{g.power_watts:.0f}W")
        if g.temperature_c is not None:
            extra.append(f"{g.temperature_c:.0f}°C")
        if g.job_memory_bytes is not None:
            extra.append(f"job {fmt_gib(g.job_memory_bytes)}G")
        tail = " " + " ".join(extra) if extra else ""
        spark_w = max(4, width - 8 - len(util) - len(tail))
        line2 = Text("  util ", style="dim") + Text(sparkline(utils, spark_w, lo=0, hi=100), style="cyan")
        line2 += Text(f" {util}{tail}")
        return [line1, line2]
    spark_w = 8
    bar_w = max(4, width - len(label) - len(nums) - spark_w - len(util) - 2)
    line = Text(label, style="bold") + bar(frac, bar_w, marker=marker) + Text(nums + " ")
    line += Text(sparkline(utils, spark_w, lo=0, hi=100), style="cyan") + Text(" " + util)
    return [line]
