"""Hazards in the environment that break or slow a DeepSpeed job, each a Finding with its fix. Pure functions:
they read an environment mapping and a (partial) report, never the machine.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence

from wizard.findings import Finding, Severity
from wizard.hardware.report import GPUInfo, HardwareReport
from wizard.hardware.visibility import Visibility
from wizard.units import GiB, fmt_bytes

SMALL_SHM_BYTES = 1 * GiB  # Docker's default is 64 MiB; NCCL and DataLoader workers need far more
SMALL_MEMLOCK_BYTES = 1 * GiB  # RDMA (InfiniBand/RoCE) registers memory: NCCL wants "unlimited"
BUSY_GPU_BYTES = 2 * GiB  # used memory beyond a CUDA context: another process holds this GPU

# torch.utils.cpp_extension's names for architecture families, expanded the way torch expands them.
_NAMED_ARCHES = {
    "kepler+tesla": "3.7",
    "kepler": "3.5+PTX",
    "maxwell+tegra": "5.3",
    "maxwell": "5.0;5.2+PTX",
    "pascal": "6.0;6.1+PTX",
    "volta+tegra": "7.2",
    "volta": "7.0+PTX",
    "turing": "7.5+PTX",
    "ampere+tegra": "8.7",
    "ampere": "8.0;8.6+PTX",
    "ada": "8.9+PTX",
    "hopper": "9.0+PTX",
    "blackwell+tegra": "11.0",
    "blackwell": "10.0;10.3;12.0;12.1+PTX",
}


def arch_list_entries(value: str) -> list[str]:
    """The entries DeepSpeed's JIT op builder reads: spaces count as ';', blanks dropped (builder.py)."""
    return [cc.strip() for cc in value.strip().replace(" ", ";").split(";") if cc.strip()]


def deepspeed_parses(entry: str) -> bool:
    """Whether ``CUDAOpBuilder.compute_capability_args`` (deepspeed/ops/op_builder/builder.py) accepts the entry.

    It runs exactly these conversions: the sort key ``int(part.split('+')[0])`` for each '.'-part, then
    ``major = int(cc[0])`` and ``int(cc[1].split('+')[0])``. So "9.0", "8.6+PTX" pass; "9.0a" fails
    (``int('0a')``: the ValueError seen on the H200), as do "9" (no minor), "Hopper", "native" and "8.0,9.0".
    """
    try:
        for part in entry.split("."):
            int(part.split("+")[0])
        cc = entry.split(".")
        int(cc[0])
        int(cc[1].split("+")[0])
    except (ValueError, IndexError):
        return False
    return True


def unparsable_arch_entries(value: str) -> list[str]:
    return [e for e in arch_list_entries(value) if not deepspeed_parses(e)]


_DOTTED_RE = re.compile(r"^(\d+)\.(\d+)[a-z]*(\+ptx)?$", re.IGNORECASE)  # "9.0a", "10.0f+PTX"
_UNDOTTED_RE = re.compile(r"^(?:sm_?|compute_?)?(\d+)[a-z]*(\+ptx)?$", re.IGNORECASE)  # "sm_90a", "86", "9"


def _repair_entry(entry: str) -> list[str]:
    named = _NAMED_ARCHES.get(entry.lower())
    if named is not None:
        return named.split(";")
    m = _DOTTED_RE.match(entry)
    if m:
        major, minor = m.group(1), m.group(2)
    else:
        m = _UNDOTTED_RE.match(entry)
        if not m:
            return []  # "native" and anything unrecognisable: dropped (DeepSpeed then asks the visible GPUs)
        digits = m.group(1)
        major, minor = (digits, "0") if len(digits) == 1 else (digits[:-1], digits[-1])
    ptx = "+PTX" if entry.upper().endswith("+PTX") else ""
    return [f"{int(major)}.{int(minor)}{ptx}"]


def fixed_arch_list(value: str | None) -> str | None:
    """A TORCH_CUDA_ARCH_LIST DeepSpeed's op builder can parse, or None when ``value`` needs no repair.

    "9.0a" -> "9.0", "8.0;9.0a+PTX" -> "8.0;9.0+PTX", "Hopper" -> "9.0+PTX", "sm_90" -> "9.0",
    "8.0,9.0" -> "8.0;9.0"; "native" and unrecognisable entries are dropped. An empty result ("") means: unset
    the variable (DeepSpeed then builds for the GPUs it sees). The launcher applies this to the job's env.
    """
    if value is None or not unparsable_arch_entries(value):
        return None
    fixed: list[str] = []
    for entry in arch_list_entries(value.replace(",", ";")):
        for repaired in _repair_entry(entry) if not deepspeed_parses(entry) else [entry]:
            if repaired not in fixed:
                fixed.append(repaired)
    return ";".join(fixed)


def arch_list_hazards(env: Mapping[str, str]) -> list[Finding]:
    value = env.get("TORCH_CUDA_ARCH_LIST")
    if value is None:
        return []
    bad = unparsable_arch_entries(value)
    if not bad:
        return []
    fixed = fixed_arch_list(value)
    fix = f"export TORCH_CUDA_ARCH_LIST='{fixed}'" if fixed else "unset TORCH_CUDA_ARCH_LIST"
    return [
        Finding(
            Severity.ERROR,
            "arch-list-unparsable",
            f"TORCH_CUDA_ARCH_LIST={value!r} has entries DeepSpeed's op builder cannot parse: {', '.join(bad)}",
            'building a DeepSpeed op (fused_adam, cpu_adam, ...) fails with "ValueError: invalid literal for int()"',
            f"{fix} (dswiz launch repairs it for the job it starts)",
            "TORCH_CUDA_ARCH_LIST",
        )
    ]


def _indices(gpus: Sequence[GPUInfo]) -> str:
    return ",".join(str(g.index) for g in gpus)


def visibility_hazards(
    env: Mapping[str, str], physical: Sequence[GPUInfo], visibility: Visibility
) -> list[Finding]:
    value = env.get("CUDA_VISIBLE_DEVICES")
    out: list[Finding] = []
    if value is None:
        return out
    for problem in visibility.problems:
        out.append(
            Finding(
                Severity.ERROR,
                "visible-devices-invalid",
                f"CUDA_VISIBLE_DEVICES={value!r}: {problem}",
                "the job sees fewer GPUs than you listed (or none), so ranks fail or the plan does not match",
                f"list existing GPUs only, e.g. export CUDA_VISIBLE_DEVICES={_indices(physical) or '0'}"
                if physical
                else "unset CUDA_VISIBLE_DEVICES",
                "CUDA_VISIBLE_DEVICES",
            )
        )
    if visibility.hidden and physical:
        out.append(
            Finding(
                Severity.WARNING,
                "visible-devices-hide-gpus",
                f"CUDA_VISIBLE_DEVICES={value!r} hides {len(visibility.hidden)} of {len(physical)} GPUs "
                f"(hidden: {_indices(visibility.hidden)})",
                f"DeepSpeed will use only {len(visibility.visible)} GPU(s) on this machine",
                "unset CUDA_VISIBLE_DEVICES to use every GPU (keep it if you meant to leave GPUs free)",
                "CUDA_VISIBLE_DEVICES",
            )
        )
    models = {g.name for g in physical}
    if visibility.uses_indices and len(models) > 1 and env.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
        out.append(
            Finding(
                Severity.WARNING,
                "device-order",
                "CUDA_VISIBLE_DEVICES uses indices, GPUs differ and CUDA_DEVICE_ORDER is not PCI_BUS_ID",
                "CUDA numbers GPUs fastest first, NVML and nvidia-smi by PCI bus: an index may pick another GPU",
                "export CUDA_DEVICE_ORDER=PCI_BUS_ID",
                "CUDA_DEVICE_ORDER",
            )
        )
    return out


def gpu_hazards(gpus: Sequence[GPUInfo]) -> list[Finding]:
    out: list[Finding] = []
    mig = [g for g in gpus if g.mig_mode]
    if mig:
        out.append(
            Finding(
                Severity.WARNING,
                "mig-enabled",
                f"MIG mode is on for GPU {_indices(mig)}",
                "a process uses one MIG slice, not the whole GPU: memory and speed are a fraction; NCCL between "
                "slices and per-process memory monitoring are not supported",
                f"for training on whole GPUs: sudo nvidia-smi -i {_indices(mig)} -mig 0 (then reset the GPUs)",
                "GPU",
            )
        )
    counts = Counter(g.name for g in gpus)
    if len(counts) > 1:
        keep_name = max(
            counts, key=lambda n: (counts[n], max(g.memory_total_bytes or 0 for g in gpus if g.name == n))
        )
        keep = [g for g in gpus if g.name == keep_name]
        out.append(
            Finding(
                Severity.WARNING,
                "mixed-gpus",
                "the GPUs differ: " + ", ".join(f"{n} x{c}" for n, c in sorted(counts.items())),
                "ZeRO ranks are symmetric: the smallest and slowest GPU sets the memory limit and the pace",
                f"use identical GPUs: export CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES={_indices(keep)}",
                "GPU",
            )
        )
    for g in gpus:
        if g.memory_total_bytes is None or g.memory_free_bytes is None:
            continue
        used = g.memory_total_bytes - g.memory_free_bytes
        if used > BUSY_GPU_BYTES:
            out.append(
                Finding(
                    Severity.WARNING,
                    "gpu-busy",
                    f"GPU {g.index} already has {fmt_bytes(used)} in use",
                    "another process holds that memory: a plan sized for the whole GPU may run out of memory",
                    f"see who uses it (nvidia-smi -i {g.index}) and stop it, or leave that GPU out",
                    "GPU",
                )
            )
    return out


def host_hazards(report: HardwareReport) -> list[Finding]:
    host = report.host
    out: list[Finding] = []
    if host.libaio is False:
        out.append(
            Finding(
                Severity.INFO,
                "no-libaio",
                f"libaio is missing ({host.libaio_detail})" if host.libaio_detail else "libaio is missing",
                "DeepSpeed's async_io op cannot be built, so NVMe offload is impossible here",
                "sudo apt-get install libaio-dev (RHEL/Fedora: sudo yum install libaio-devel)",
                "libaio",
            )
        )
    if host.shm_bytes is not None and host.shm_bytes < SMALL_SHM_BYTES:
        out.append(
            Finding(
                Severity.WARNING,
                "small-shm",
                f"/dev/shm is only {fmt_bytes(host.shm_bytes)}",
                "NCCL and DataLoader workers use shared memory: jobs fail with bus errors or NCCL shm errors",
                "in Docker: --shm-size=16g (or --ipc=host); otherwise: sudo mount -o remount,size=16G /dev/shm",
                "/dev/shm",
            )
        )
    limit = host.memlock_limit_bytes
    if limit is not None and limit != -1 and limit < SMALL_MEMLOCK_BYTES:
        out.append(
            Finding(
                Severity.INFO,
                "low-memlock",
                f"the locked-memory limit (ulimit -l) is {fmt_bytes(limit)}",
                "multi-node NCCL over InfiniBand/RoCE must register (lock) memory and fails with a low limit",
                "ulimit -l unlimited (in /etc/security/limits.conf: '* - memlock unlimited'; Docker: "
                "--ulimit memlock=-1)",
                "RLIMIT_MEMLOCK",
            )
        )
    return out


def no_gpu_hazard(report: HardwareReport) -> list[Finding]:
    if report.gpus:
        return []
    reason = report.no_gpu_reason or "NVML lists no GPU"
    return [
        Finding(
            Severity.INFO,
            "no-gpu",
            f"no NVIDIA GPU found: {reason}",
            "plans for this machine are CPU-only; DeepSpeed runs here on CPU with the gloo backend",
            "plan for the GPUs you will train on: --hardware 8xA100-80GB (or 2x8xH100, or a YAML profile)",
            "GPU",
        )
    ]


def find_hazards(
    env: Mapping[str, str],
    report: HardwareReport,
    physical: Sequence[GPUInfo] = (),
    visibility: Visibility | None = None,
) -> tuple[Finding, ...]:
    """Every hazard of a detected machine: ``report`` holds the visible GPUs, ``physical`` all NVML sees."""
    found = arch_list_hazards(env)
    if visibility is not None:
        found += visibility_hazards(env, physical, visibility)
    found += gpu_hazards(report.gpus)
    found += no_gpu_hazard(report)
    found += host_hazards(report)
    return tuple(found)
