"""What this machine can run at all: the capacity of each memory tier, the precisions its GPUs compute in, whether
NVMe offload can work (a disk and libaio), whether host RAM holds an offload. The planner never proposes what fails
here; the wizard disables it with the same words."""

from __future__ import annotations

from wizard.hardware.report import HardwareReport
from wizard.model import ModelSpec
from wizard.planner import calibration as cal
from wizard.planner.host_memory import host_bytes
from wizard.planner.types import Capacities, PlanRequest
from wizard.strategy import Precision, Strategy
from wizard.units import fmt_bytes, fmt_percent


def capacities(hardware: HardwareReport, request: PlanRequest | None = None) -> Capacities:
    """The capacities every plan, evaluation and front door judges against."""
    request = request or PlanRequest()
    notes: list[str] = []
    gpu_cap = request.gpu_memory_bytes or hardware.min_gpu_memory_bytes
    host = hardware.host
    if hardware.source == "detected" and host.ram_available_bytes:
        cpu_cap: int | None = host.ram_available_bytes
    else:
        cpu_cap = host.ram_total_bytes
    if cpu_cap is None:
        notes.append("host RAM unknown: CPU offload is not checked against it")
    if hardware.nodes > 1 and not hardware.inter_node_gbps:
        notes.append(
            f"network between nodes unknown: {cal.DEFAULT_INTER_NODE_GBPS:g} Gbit/s assumed for the tokens/s "
            "(describe it, e.g. 2x8xH100,net=400)"
        )
    nvme_cap: int | None = request.nvme_bytes
    if nvme_cap is None and host.swap_drive is not None:
        nvme_cap = host.swap_drive.free_bytes
    return Capacities(gpu_cap, cpu_cap, nvme_cap, request.safety_margin, tuple(notes))


def usable_precisions(hardware: HardwareReport, request: PlanRequest) -> tuple[list[Precision], list[str]]:
    """The precisions to plan with, and a note for each one asked for that the GPUs cannot compute in."""
    notes: list[str] = []
    wanted: tuple[Precision, ...] = request.precisions or ("bf16", "fp16", "fp32")
    ok: list[Precision] = []
    for p in wanted:
        problem = precision_problem(hardware, p)
        if problem:
            notes.append(f"{p} not offered: {problem}")
            continue
        ok.append(p)
    if not request.precisions and ok:
        ok = ok[:1]  # the best supported one; 16-bit halves memory and doubles speed over fp32
    return ok, notes


def nvme_usable(
    hardware: HardwareReport, request: PlanRequest, nvme_cap: int | None
) -> tuple[bool, str | None]:
    """Whether to offer NVMe offload, and the note that says why not."""
    if not request.allow_nvme:
        return False, None
    problem = _nvme_problem(hardware, request, nvme_cap)
    return problem is None, None if problem is None else f"NVMe offload not offered: {problem}"


def _cc(cc: tuple[int, int] | None) -> str:
    return "unknown" if cc is None else f"{cc[0]}.{cc[1]}"


def precision_problem(hardware: HardwareReport, precision: str) -> str | None:
    """Why these GPUs cannot compute in ``precision`` (from their compute capability), or None."""
    for gpu in hardware.gpus:
        cc = _cc(gpu.compute_capability)
        if precision == "bf16" and gpu.supports_bf16 is False:
            return f"{gpu.name} has compute capability {cc}; bf16 needs 8.0 (Ampere) or newer"
        if precision == "fp16" and gpu.supports_fp16 is False:
            return f"{gpu.name} has compute capability {cc}; fp16 needs 7.0 (Volta) or newer"
    return None


def _nvme_problem(hardware: HardwareReport, request: PlanRequest, nvme_cap: int | None) -> str | None:
    if nvme_cap is None:
        return "no NVMe disk found (describe one with --nvme SIZE)"
    if request.nvme_bytes is not None:
        return None  # described by the user: trusted
    if hardware.host.libaio is False:
        return "libaio is missing, so DeepSpeed's async_io op cannot build (Debian/Ubuntu: apt install libaio-dev)"
    if hardware.host.libaio is None and hardware.source == "detected":
        return "could not tell whether libaio is installed (DeepSpeed's async_io op needs it)"
    return None


def _host_ram_problem(
    hardware: HardwareReport, request: PlanRequest, model: ModelSpec, s: Strategy
) -> str | None:
    if s.offload_optimizer == "none" and s.offload_param == "none":
        return None
    cap = capacities(hardware, request)
    cpu_cap, cpu_budget = cap.cpu, cap.cpu_budget
    if cpu_cap is None or cpu_budget is None:
        return None
    need, _ = host_bytes(model, s)
    if need <= cpu_budget:
        return None
    return (
        f"host RAM too small for this offload: needs {fmt_bytes(need)} per node, {fmt_bytes(cpu_cap)} available "
        f"({fmt_percent(cal.HOST_SAFETY_MARGIN)} kept free)"
    )


def hardware_problems(
    hardware: HardwareReport,
    strategy: Strategy,
    request: PlanRequest | None = None,
    *,
    model: ModelSpec | None = None,
) -> list[str]:
    """Why this machine cannot run ``strategy`` at all, in words (empty when it can): NVMe offload without an NVMe
    disk or libaio, a precision the GPUs lack (bf16 below compute capability 8.0, fp16 below 7.0), more nodes or
    GPUs per node than the hardware has, and -- when ``model`` is given -- host RAM too small for the offload.

    One source of truth: the planner never proposes a strategy with a problem here (host RAM aside: for the planner
    that is a "does not fit" with advice on how much more RAM would), the wizard disables it with the reason.
    ``Strategy.problems`` holds the combinations DeepSpeed itself rejects."""
    request = request or PlanRequest()
    out: list[str] = []
    problem = precision_problem(hardware, strategy.precision)
    if problem:
        out.append(problem)
    if "nvme" in (strategy.offload_optimizer, strategy.offload_param):
        problem = _nvme_problem(hardware, request, capacities(hardware, request).nvme)
        if problem:
            out.append(f"NVMe offload: {problem}")
    if hardware.gpus and strategy.nodes > hardware.nodes:
        out.append(f"{strategy.nodes} nodes asked for, the hardware has {hardware.nodes}")
    if hardware.gpus and strategy.gpus_per_node > hardware.gpus_per_node:
        out.append(
            f"{strategy.gpus_per_node} GPUs per node asked for, the hardware has {hardware.gpus_per_node}"
        )
    if model is not None:
        problem = _host_ram_problem(hardware, request, model, strategy)
        if problem:
            out.append(problem)
    return out
