"""ZeRO settings DeepSpeed ignores or changes silently (FACTS §3 rule 4), NVMe offload prerequisites (rule 5) and
offload with the script's own optimizer (rule 7)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from wizard.config.lint.base import ERROR, INFO, WARNING, LintContext, as_int, finding, section, stage_of
from wizard.findings import Finding
from wizard.hardware.report import DiskInfo


def check_zero(cfg: dict[str, Any], ctx: LintContext) -> list[Finding]:
    stage = stage_of(cfg)
    if stage is None:
        return []  # not a readable stage: the type rules report it
    zero = section(cfg, "zero_optimization")
    opt_dev = section(cfg, "zero_optimization", "offload_optimizer").get("device")
    par_dev = section(cfg, "zero_optimization", "offload_param").get("device")
    out: list[Finding] = []
    if par_dev in ("cpu", "nvme") and stage != 3:
        out.append(
            finding(
                WARNING,
                "offload-param-ignored",
                f"offload_param (device {par_dev}) at ZeRO stage {stage} does nothing",
                "parameters are only partitioned, and so only offloaded, at stage 3; DeepSpeed ignores it silently",
                "set zero_optimization.stage to 3, or remove offload_param",
                "zero_optimization.offload_param.device",
            )
        )
    if opt_dev == "nvme" and stage in (1, 2):
        out.append(
            finding(
                WARNING,
                "nvme-becomes-cpu",
                f"offload_optimizer device nvme at ZeRO stage {stage} offloads to CPU memory instead",
                "stages 1 and 2 only know CPU offload: DeepSpeed silently keeps the optimizer in host RAM",
                'use stage 3 for NVMe offload, or write "device": "cpu" to say what happens',
                "zero_optimization.offload_optimizer.device",
            )
        )
    if opt_dev in ("cpu", "nvme") and stage == 0:
        out.append(
            finding(
                WARNING,
                "offload-stage0",
                "offload_optimizer at ZeRO stage 0",
                "stage 0 partitions nothing, so there is no ZeRO optimizer to offload",
                "set zero_optimization.stage to 1, 2 or 3, or remove offload_optimizer",
                "zero_optimization.offload_optimizer",
            )
        )
    out += _zeropp(zero, stage, ctx)
    for name, device in (("offload_optimizer", opt_dev), ("offload_param", par_dev)):
        if device == "nvme" and stage == 3:  # below stage 3 the rules above already say it is not used
            out += _nvme(section(zero, name), f"zero_optimization.{name}", ctx)
    out += _client_optimizer(cfg, stage, opt_dev, ctx)
    return out


def _zeropp(zero: dict[str, Any], stage: int, ctx: LintContext) -> list[Finding]:
    out: list[Finding] = []
    hpz = as_int(zero.get("zero_hpz_partition_size"))
    active = [k for k in ("zero_quantized_weights", "zero_quantized_gradients") if zero.get(k) is True]
    if hpz is not None and hpz > 1:
        active.append("zero_hpz_partition_size")
    if active and stage != 3:
        out.append(
            finding(
                WARNING,
                "zeropp-ignored",
                f"ZeRO++ ({', '.join(active)}) at ZeRO stage {stage} does nothing",
                "ZeRO++ quantized weights/gradients and hpZ act on stage-3 partitioned parameters only",
                "set zero_optimization.stage to 3, or remove the ZeRO++ keys",
                f"zero_optimization.{active[0]}",
            )
        )
    per_node = ctx.effective_gpus_per_node
    if hpz is not None and hpz > 1 and stage == 3 and per_node is not None and hpz != per_node:
        out.append(
            finding(
                WARNING,
                "hpz-size",
                f"zero_hpz_partition_size {hpz} differs from the {per_node} GPUs per node",
                "hpZ keeps a secondary weight copy inside each node; its group should be exactly one node",
                f"set zero_hpz_partition_size to {per_node}",
                "zero_optimization.zero_hpz_partition_size",
            )
        )
    return out


def _nvme(offload: dict[str, Any], where: str, ctx: LintContext) -> list[Finding]:
    path = offload.get("nvme_path")
    if not isinstance(path, str) or not path.strip():
        return [
            finding(
                ERROR,
                "nvme-path-missing",
                f"{where} offloads to nvme without an nvme_path",
                'DeepSpeed stops: "nvme_path" in DeepSpeed Config cannot be None if remote device is nvme',
                f'add "nvme_path": "/local_nvme/dswiz" to {where.split(".")[-1]} (a directory on a local NVMe drive)',
                f"{where}.device",
            )
        ]
    out: list[Finding] = []
    hw = ctx.hardware
    if ctx.check_local_paths:
        out += writable_findings(path, f"{where}.nvme_path")
    if hw is not None:
        disk = disk_for(path, hw.host.disks)
        if disk is not None and not disk.nvme:
            out.append(
                finding(
                    WARNING,
                    "nvme-not-on-nvme",
                    f"nvme_path {path} is on {disk.device} ({disk.fstype}), not an NVMe drive",
                    "offload streams optimizer state every step: a SATA/network disk makes each step many times "
                    "slower",
                    "point nvme_path at a directory on a local NVMe drive (dswiz detect lists them)",
                    f"{where}.nvme_path",
                )
            )
    libaio = hw.host.libaio if hw is not None else None
    if libaio is False:
        out.append(
            finding(
                ERROR,
                "no-libaio",
                "NVMe offload needs libaio, which this machine lacks",
                "DeepSpeed's async_io op (ds_report: async_io [NO]) cannot build without it, so the job fails",
                "install libaio (Debian/Ubuntu: apt install libaio-dev), or offload to cpu instead",
                f"{where}.device",
            )
        )
    elif libaio is None:
        out.append(
            finding(
                INFO,
                "libaio-unknown",
                "NVMe offload needs DeepSpeed's async_io op (libaio); not checked here",
                "without libaio the op cannot build and the job fails at start",
                "run `ds_report` on the training machine and look for async_io [OKAY] (or pass --hardware)",
                f"{where}.device",
            )
        )
    return out


def writable_findings(path: str, where: str) -> list[Finding]:
    target = Path(os.path.expanduser(path))
    probe = target
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        return [
            finding(
                ERROR,
                "nvme-path-not-writable",
                f"nvme_path {path}: {probe} is a file, not a directory",
                "DeepSpeed creates its swap directory there and fails",
                "point nvme_path at a directory",
                where,
            )
        ]
    if not os.access(probe, os.W_OK | os.X_OK):
        return [
            finding(
                ERROR,
                "nvme-path-not-writable",
                f"nvme_path {path} is not writable here ({probe} is not writable by you)",
                "DeepSpeed creates swap files under nvme_path and fails at the first optimizer step",
                f"create it and make it yours (sudo mkdir -p {path} && sudo chown $USER {path}), or choose another",
                where,
            )
        ]
    return []


def disk_for(path: str, disks: tuple[DiskInfo, ...]) -> DiskInfo | None:
    absolute = os.path.abspath(os.path.expanduser(path))
    best: DiskInfo | None = None
    for disk in disks:
        mount = disk.mountpoint.rstrip("/") or "/"
        inside = absolute == mount or absolute.startswith(mount + "/") or mount == "/"
        if inside and (best is None or len(mount) > len(best.mountpoint.rstrip("/") or "/")):
            best = disk
    return best


def _client_optimizer(cfg: dict[str, Any], stage: int, opt_dev: Any, ctx: LintContext) -> list[Finding]:
    if opt_dev not in ("cpu", "nvme") or stage == 0:
        return []
    has_ds_optimizer = isinstance(cfg.get("optimizer"), dict) and cfg["optimizer"].get("type") is not None
    if has_ds_optimizer or cfg.get("zero_force_ds_cpu_optimizer") is False:
        return []
    if ctx.consumer in ("accelerate", "trainer"):
        return [
            finding(
                INFO,
                "offload-optimizer-replaced",
                "optimizer offload without an optimizer in the config: accelerate swaps the script's optimizer",
                "accelerate (and the HF Trainer through it) replaces a torch optimizer by DeepSpeedCPUAdam, keeping "
                "only lr and weight_decay: betas/eps fall back to defaults and a non-Adam optimizer becomes Adam",
                'to keep control, add an "optimizer" section (type AdamW with its params)',
                "optimizer",
            )
        ]
    return [
        finding(
            WARNING,
            "offload-client-optimizer",
            "optimizer offload without an optimizer in the config",
            "if the script passes its own torch optimizer, DeepSpeed raises ZeRORuntimeException "
            "(only DeepSpeedCPUAdam/DeepSpeedCPULion are accepted with offload)",
            'add "optimizer": {"type": "AdamW", "params": {...}} and pass no optimizer to deepspeed.initialize '
            '(or set "zero_force_ds_cpu_optimizer": false to accept a slow torch optimizer)',
            "zero_optimization.offload_optimizer",
        )
    ]
