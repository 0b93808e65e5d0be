"""Host RAM (with the plan's pinned-memory estimate marked), swap, the job's RSS and CPU, NVMe offload I/O."""

from __future__ import annotations

from rich.console import RenderableType
from rich.text import Text

from runner.metrics.snapshot import Snapshot
from runner.monitor.render import bar, fmt_gib, fmt_gib_unit, fmt_rate
from runner.monitor.widgets.base import SnapshotPanel


class HostPanel(SnapshotPanel):
    def draw(self, snap: Snapshot, width: int, height: int) -> RenderableType:
        used, total = snap.host_ram_used_bytes, snap.host_ram_total_bytes
        frac = used / total if used is not None and total else None
        marker = snap.pinned_estimate_bytes / total if snap.pinned_estimate_bytes and total else None
        nums = f" {fmt_gib(used)}/{fmt_gib_unit(total)}"
        ram = Text("RAM ", style="dim") + bar(frac, max(4, width - 4 - len(nums)), marker=marker) + Text(nums)
        second = Text()
        second.append("swap ", style="dim").append(fmt_gib_unit(snap.host_swap_used_bytes))
        if snap.pinned_estimate_bytes:
            second.append("  pinned est ", style="dim").append(
                fmt_gib_unit(snap.pinned_estimate_bytes), style="magenta"
            )
        third = Text()
        third.append("job RSS ", style="dim").append(fmt_gib_unit(snap.job_rss_bytes))
        cpu = f"{snap.job_cpu_percent:.0f}%" if snap.job_cpu_percent is not None else "–"
        third.append("  CPU ", style="dim").append(cpu)
        fourth = Text()
        if snap.disk_device:
            fourth.append(f"NVMe {snap.disk_device} ", style="dim")
            fourth.append(
                f"r {fmt_rate(snap.disk_read_bytes_per_sec)}  w {fmt_rate(snap.disk_write_bytes_per_sec)}"
            )
        else:
            fourth.append("NVMe offload: none", style="dim")
        return Text("\n").join([ram, second, third, fourth][:height])
