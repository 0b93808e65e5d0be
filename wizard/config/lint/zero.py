"""ZeRO settings DeepSpeed ignores or changes silently (parameters are offloaded only at stage 3,
``deepspeed/runtime/zero/offload_config.py`` ``DeepSpeedZeroOffloadParamConfig``; stages 1-2 treat any optimizer
offload device as CPU, ``stage_1_and_2.py`` ``DeepSpeedZeroOptimizer.__init__`` ``cpu_offload``; DeepSpeed
0.19.8), NVMe offload prerequisites (``wizard.config.nvme``) and offload with the script's own optimizer
(``deepspeed/runtime/engine.py`` ``_configure_optimizer`` raises ZeRORuntimeException)."""

from __future__ import annotations

from typing import Any

from wizard.config.lint.base import ERROR, INFO, WARNING, LintContext, as_int, finding, section, stage_of
from wizard.config.nvme import offload_nvme_findings
from wizard.findings import Finding


def check_zero(cfg: dict[str, Any], ctx: LintContext) -> list[Finding]:
    stage = stage_of(cfg)
    if stage is None:
        return []  # not a readable stage: the type rules report it
    if ctx.consumer in ("trainer", "accelerate") and "zero_optimization" not in cfg:
        return [_zero_section_required(ctx.consumer)]
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
            out += offload_nvme_findings(
                section(zero, name),
                f"zero_optimization.{name}",
                ctx.hardware,
                check_local_paths=ctx.check_local_paths,
                at_launch=ctx.at_launch,
            )
    out += _client_optimizer(cfg, stage, opt_dev, ctx)
    return out


def _zero_section_required(consumer: str) -> Finding:
    """accelerate 1.15.0 ``utils/dataclasses.py`` ``DeepSpeedPlugin.__post_init__`` (the HF Trainer builds one too)
    refuses a DeepSpeed config without the section, where plain DeepSpeed would run stage 0."""
    who = "the HF Trainer (through accelerate's DeepSpeedPlugin)" if consumer == "trainer" else "accelerate"
    return finding(
        ERROR,
        "no-zero-optimization",
        "the config has no zero_optimization section",
        f'{who} stops: "Please specify the ZeRO optimization config in the DeepSpeed config."',
        'add "zero_optimization": {"stage": 0} (or the stage you want)',
        "zero_optimization",
    )


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
