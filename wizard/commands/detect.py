"""`dswiz detect`: what hardware dswiz sees (or what a described profile amounts to), as a table or JSON.

``--json`` stays fast: it imports neither rich nor the catalog of other commands, only the hardware core.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from rich.console import Console

    from wizard.hardware.report import DiskInfo, GPUInfo, HardwareReport


@click.command()
@click.option(
    "--json", "as_json", is_flag=True, help="Print the report as JSON (stable keys) instead of a table."
)
@click.option(
    "--hardware",
    metavar="SPEC|FILE",
    help="Show described hardware instead: 8xA100-80GB, 2x8xH100, a YAML profile or a saved --json report.",
)
@click.pass_context
def detect(ctx: click.Context, as_json: bool, hardware: str | None) -> int:
    """Show the GPUs, CPU, memory, disks, software and hazards (with fixes) of this machine."""
    from wizard.hardware import get_hardware

    if hardware is None and ctx.parent is not None:
        hardware = ctx.parent.params.get("hardware")  # `dswiz --hardware 8xH100 detect` means the same
    report = get_hardware(hardware)
    if as_json:
        import json

        click.echo(json.dumps(report.to_dict(), indent=2, sort_keys=True))
    else:
        print_report(report)
    return 0


def _yes_no(value: bool | None) -> str:
    return "unknown" if value is None else ("yes" if value else "no")


def _or_unknown(value: Any) -> str:
    return "unknown" if value is None else str(value)


def _short_name(name: str) -> str:
    for prefix in ("NVIDIA GeForce ", "NVIDIA ", "Tesla "):
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def _nvlink(g: GPUInfo) -> str:
    if g.nvlink_count == 0 or (g.nvlink_count is None and g.nvlink_gbs == 0):
        return "none"
    if g.nvlink_gbs:
        return f"{g.nvlink_gbs:g} GB/s"
    return f"{g.nvlink_count} links" if g.nvlink_count else "?"


def _peak(g: GPUInfo) -> str:
    if g.peak_tflops_bf16 is not None:
        return f"{g.peak_tflops_bf16:g}"
    if g.peak_tflops_fp16 is not None:
        return f"{g.peak_tflops_fp16:g} fp16"
    return "?"


def _titled_table(title: str, *, header: bool = True, **style: Any) -> Any:
    """A left-titled rich table in detect's look: a simple head rule when it has a header, no box when not."""
    from rich import box
    from rich.table import Table

    if header:
        style = {"box": box.SIMPLE_HEAD, "show_edge": False, **style}
    else:
        style = {"show_header": False, "box": None, **style}
    return Table(title=title, title_justify="left", pad_edge=False, **style)


def _gpu_columns(report: HardwareReport) -> list[tuple[str, Callable[[GPUInfo], str]]]:
    from wizard.units import fmt_bytes

    gpus = report.gpus
    columns: list[tuple[str, Callable[[GPUInfo], str]]] = [
        ("#", lambda g: str(g.index)),
        ("GPU", lambda g: _short_name(g.name)),
        ("memory", lambda g: fmt_bytes(g.memory_total_bytes)),
    ]
    if report.source == "detected":
        columns.append(("free", lambda g: fmt_bytes(g.memory_free_bytes)))
    columns += [
        ("CC", lambda g: ".".join(map(str, g.compute_capability)) if g.compute_capability else "?"),
        ("bf16", lambda g: _yes_no(g.supports_bf16)),
    ]
    if any(g.supports_fp16 is not True for g in gpus):
        columns.append(("fp16", lambda g: _yes_no(g.supports_fp16)))
    if any(g.mig_mode for g in gpus):
        columns.append(("MIG", lambda g: {None: "?", True: "on", False: "off"}[g.mig_mode]))
    columns += [("NVLink", _nvlink), ("PCIe", lambda g: _or_unknown(g.pcie_gen)), ("peak", _peak)]
    return columns


def _gpu_table(report: HardwareReport) -> Any:
    from rich.markup import escape  # profile and system text is not markup

    gpus = report.gpus
    columns = _gpu_columns(report)
    table = _titled_table("GPUs (peak: dense bf16 TFLOP/s)", collapse_padding=True)
    for name, _ in columns:
        table.add_column(
            name, no_wrap=True, justify="right" if name in ("memory", "free", "peak") else "left"
        )
    rows = gpus[:1] if report.source == "described" else gpus  # described GPUs are identical: one row
    for g in rows:
        cells = [fn(g) for _, fn in columns]
        if report.source == "described" and len(gpus) > 1:
            cells[0] = f"0-{len(gpus) - 1}"
        table.add_row(*map(escape, cells))  # GPU names come from profiles: user text
    return table


def _disk_kind(d: DiskInfo) -> str:
    if d.nvme:
        rates = [f"{what} {rate / 1e9:g} GB/s" for what, rate in (("read", d.read_bytes_per_s),
                 ("write", d.write_bytes_per_s)) if rate]  # fmt: skip
        return "NVMe" + (f" ({', '.join(rates)})" if rates else "")
    if d.rotational is True:
        return "rotational"
    if d.rotational is False:
        return "SSD"
    return "-"


def _print_title(console: Console, report: HardwareReport) -> None:
    from rich.text import Text

    if report.source == "described":
        shape = f"{report.nodes} node(s) x {report.gpus_per_node} GPU(s) = {report.total_gpus} GPU(s)"
        if report.inter_node_gbps:
            shape += f", {report.inter_node_gbps:g} Gbit/s between nodes"
        console.print(Text(f"Described hardware: {report.description}", style="bold"))
        console.print(shape)
    else:
        console.print(Text(f"Hardware detected on {report.host.hostname or 'this machine'}", style="bold"))


def _print_gpus(console: Console, report: HardwareReport) -> None:
    from rich.text import Text

    if not report.gpus:
        console.print(
            Text(f"no NVIDIA GPU found: {report.no_gpu_reason or 'none listed'}", style="bold yellow")
        )
        return
    console.print(_gpu_table(report))
    if report.physical_gpu_count and report.physical_gpu_count > len(report.gpus):
        console.print(
            f"{len(report.gpus)} of {report.physical_gpu_count} GPUs visible "
            f"(CUDA_VISIBLE_DEVICES={report.visible_devices!r})"
        )
    if report.source == "detected" and len(report.gpus) > 1:  # docs/measurements.md, NVML's GPU order
        console.print(
            Text(
                "GPU numbers are NVML's (PCI bus order); CUDA uses the same only with "
                "CUDA_DEVICE_ORDER=PCI_BUS_ID.",
                style="dim",
            )
        )


def _host_table(report: HardwareReport) -> Any:
    from rich.markup import escape  # profile and system text is not markup

    from wizard.units import fmt_bytes

    host = report.host
    facts = _titled_table("Host", header=False)
    facts.add_column("what", style="bold")
    facts.add_column("value")
    if host.physical_cores is None:
        cores = _or_unknown(host.logical_cores) + (" logical" if host.logical_cores else "")
    else:
        cores = f"{host.physical_cores} physical / {_or_unknown(host.logical_cores)} logical"
    if host.restricted:
        cores += f"; this process may use {host.usable_cores} (affinity or cgroup quota): plans count those"
    ram = f"{fmt_bytes(host.ram_total_bytes)} ({fmt_bytes(host.ram_available_bytes)} available)"
    memlock = "unlimited" if host.memlock_limit_bytes == -1 else fmt_bytes(host.memlock_limit_bytes)
    libaio = _yes_no(host.libaio) + (f" ({host.libaio_detail})" if host.libaio_detail else "")
    rows = [
        ("CPU", _or_unknown(host.cpu_model)),
        ("cores", cores),
        ("RAM", ram),
        ("/dev/shm", fmt_bytes(host.shm_bytes)),
        ("locked memory", memlock),
        ("libaio", libaio),
    ]
    for what, value in rows:
        if report.source == "described" and value.startswith("unknown"):
            continue  # a profile says only what it says
        facts.add_row(what, escape(value))
    return facts


def _disk_table(report: HardwareReport) -> Any:
    from rich.markup import escape  # profile and system text is not markup

    from wizard.units import fmt_bytes

    disks = _titled_table("Disks")
    for col in ("mount", "device", "fs", "kind", "free", "total"):
        disks.add_column(col, overflow="fold")
    for d in report.host.disks:
        disks.add_row(
            escape(d.mountpoint),
            escape(d.device),
            escape(d.fstype),
            _disk_kind(d),
            fmt_bytes(d.free_bytes),
            fmt_bytes(d.total_bytes),
        )
    return disks


def _software_table(report: HardwareReport) -> Any:
    from rich.markup import escape  # profile and system text is not markup

    sw = report.software
    soft = _titled_table("Software", header=False)
    soft.add_column("what", style="bold")
    soft.add_column("version")
    torch = _or_unknown(sw.torch) if sw.torch else "not installed"
    if sw.torch:
        torch += f" (CUDA {sw.torch_cuda})" if sw.torch_cuda else " (no CUDA)"
    for what, value in (
        ("python", _or_unknown(sw.python)),
        ("torch", torch),
        ("deepspeed", sw.deepspeed or "not installed"),
        ("accelerate", sw.accelerate or "not installed"),
        ("transformers", sw.transformers or "not installed"),
        ("NVIDIA driver", sw.nvidia_driver or "none"),
        ("CUDA (driver)", sw.cuda_driver or "none"),
        ("nvcc", sw.nvcc or "not found"),
    ):
        soft.add_row(what, escape(value))
    return soft


def _hazards_table(report: HardwareReport) -> Any:
    from rich.text import Text

    from wizard.findings import sort_findings

    hazards = _titled_table("Hazards", header=False)
    hazards.add_column("severity", no_wrap=True)
    hazards.add_column("finding")
    colour = {"error": "bold red", "warning": "bold yellow", "info": "bold cyan"}
    for h in sort_findings(report.hazards):
        hazards.add_row(
            Text(h.severity.value, style=colour[h.severity.value]),
            Text.assemble(h.what, ("\nwhy: ", "dim"), h.why, ("\nfix: ", "bold"), h.fix),
        )
    return hazards


def print_report(report: HardwareReport) -> None:
    """The report as rich tables: title, GPUs, host, disks, software (detected only), hazards."""
    from rich.console import Console
    from rich.text import Text

    console = Console(highlight=False)
    _print_title(console, report)
    _print_gpus(console, report)
    console.print(_host_table(report))
    if report.host.disks:
        console.print(_disk_table(report))
    if report.source == "detected":
        console.print(_software_table(report))
    if report.hazards:
        console.print(_hazards_table(report))
    else:
        console.print(Text("No hazards found.", style="green"))
