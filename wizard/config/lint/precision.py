"""Precision (DeepSpeed 0.19.8 deepspeed/runtime/config.py ``DeepSpeedConfig._initialize_params``: "bfloat16 and
fp16 modes cannot be simultaneously enabled"; docs/deepspeed-rules.md): fp16 and bf16 together, master-weight options outside ZeRO, dynamic loss
scaling that DeepSpeed refuses, a gradient accumulation dtype that initialize refuses (runtime/engine.py), and
precision the GPUs cannot run (from the compute capability, not torch)."""

from __future__ import annotations

from typing import Any

from wizard.config.lint.base import (
    ERROR,
    WARNING,
    LintContext,
    as_int,
    enabled,
    finding,
    is_auto,
    section,
    stage_of,
)
from wizard.findings import Finding


def check_precision(cfg: dict[str, Any], ctx: LintContext) -> list[Finding]:
    out: list[Finding] = []
    fp16, bf16 = (
        enabled(cfg, "fp16"),
        enabled(cfg, "bf16") or ("bf16" not in cfg and enabled(cfg, "bfloat16")),
    )
    if fp16 and bf16:
        out.append(
            finding(
                ERROR,
                "fp16-and-bf16",
                "fp16 and bf16 are both enabled",
                "DeepSpeed asserts 'bfloat16 and fp16 modes cannot be simultaneously enabled'",
                'keep one: bf16 on A100/H100 and newer (compute capability >= 8.0), fp16 on V100/T4; set the other "enabled": false',
                "fp16.enabled",
            )
        )
    stage = stage_of(cfg)
    masters = (
        ("fp16", "fp16_master_weights_and_grads"),
        ("bf16", "bf16_master_weights_and_grads"),
        ("bf16", "bf16_optimizer_states"),
    )
    for name, key in masters:
        if section(cfg, name).get(key) is True and stage == 0:
            out.append(
                finding(
                    ERROR,
                    "master-weights-stage",
                    f"{name}.{key} needs ZeRO stage 1, 2 or 3",
                    f"DeepSpeed asserts: {key} is only supported with ZeRO Stage 1, 2, or 3",
                    f'set zero_optimization.stage to 1-3, or remove "{key}"',
                    f"{name}.{key}",
                )
            )
    b = section(cfg, "bf16")
    if b.get("bf16_optimizer_states") is True and b.get("bf16_master_weights_and_grads") is not True:
        out.append(
            finding(
                ERROR,
                "master-weights-stage",
                "bf16.bf16_optimizer_states needs bf16.bf16_master_weights_and_grads",
                "DeepSpeed asserts: bf16_optimizer_states requires bf16_master_weights_and_grads to be enabled",
                'set "bf16_master_weights_and_grads": true, or remove "bf16_optimizer_states"',
                "bf16.bf16_optimizer_states",
            )
        )
    out += _loss_scaling(cfg)
    out += _grad_accum_dtype(cfg, fp16=fp16, bf16=bf16, stage=stage)
    out += precision_vs_hardware(ctx, fp16=fp16, bf16=bf16)
    return out


# data_types.grad_accum_dtype: the names DeepSpeed 0.19.8's DtypeEnum reads for each floating dtype
# (deepspeed/runtime/config.py)
ACCUM_DTYPES = {
    "fp16": ("fp16", "float16", "half", "torch.float16"),
    "fp32": ("fp32", "float32", "float", "torch.float32"),
    "bf16": ("bf16", "bfloat16", "torch.bfloat16"),
    "int8": ("int8", "torch.int8"),
}


def _grad_accum_dtype(cfg: dict[str, Any], *, fp16: bool, bf16: bool, stage: int | None) -> list[Finding]:
    """data_types.grad_accum_dtype as DeepSpeed 0.19.8 reads it (runtime/engine.py ``get_data_types`` and
    ``_do_optimizer_sanity_check``): a name DtypeEnum knows; without ZeRO the same dtype as the model's (anything
    else raises NotImplementedError "unsupported mix of model_dtype and grad_accum_dtype" when the engine builds
    its optimizer); bf16 with fp32 accumulation at ZeRO-1 runs DeepSpeed's BF16 optimizer, which needs the
    gradient norm (compute_grad_norm)."""
    value = section(cfg, "data_types").get("grad_accum_dtype")
    if value is None or is_auto(value):
        return []
    where = "data_types.grad_accum_dtype"
    accum = next((name for name, aliases in ACCUM_DTYPES.items() if value in aliases), None)
    if accum is None:
        return [
            finding(
                ERROR,
                "grad-accum-dtype",
                f"{where} is {value!r}, not a dtype DeepSpeed accumulates gradients in",
                "DeepSpeed reads it as a DtypeEnum name and refuses anything else (ValueError)",
                'set it to "fp32", "bf16" or "fp16", or remove it (then it is the model\'s dtype)',
                where,
            )
        ]
    if (fp16 and bf16) or any(is_auto(section(cfg, name).get("enabled")) for name in ("fp16", "bf16")):
        return []  # fp16-and-bf16 says what to fix first; "auto": the model's dtype is the consumer's to fill
    model = "fp16" if fp16 else "bf16" if bf16 else "fp32"
    if stage == 0 and accum != model:
        return [
            finding(
                ERROR,
                "grad-accum-dtype",
                f"{where} is {accum} with {model} weights and no ZeRO",
                "without ZeRO DeepSpeed accumulates gradients only in the model's dtype: initialize raises "
                "NotImplementedError (unsupported mix of model_dtype and grad_accum_dtype)",
                f'remove {where} (or set it to "{model}"), or use ZeRO stage 1 or more'
                + (
                    " (bf16 with fp32 accumulation at stage 1 runs DeepSpeed's BF16 optimizer)"
                    if model == "bf16"
                    else ""
                ),
                where,
            )
        ]
    offloaded = section(cfg, "zero_optimization", "offload_optimizer").get("device") == "cpu"
    grad_norm = section(cfg, "zero_optimization").get("compute_grad_norm", True)
    if stage == 1 and model == "bf16" and accum == "fp32" and not offloaded and grad_norm is False:
        return [
            finding(
                ERROR,
                "grad-accum-dtype",
                f"{where} is fp32 with bf16 weights at ZeRO-1 and zero_optimization.compute_grad_norm false",
                "bf16 with fp32 accumulation at stage 1 runs DeepSpeed's BF16 optimizer, which raises ValueError "
                "without the gradient norm",
                f"remove zero_optimization.compute_grad_norm (true by default), or remove {where}",
                "zero_optimization.compute_grad_norm",
            )
        ]
    return []


def _loss_scaling(cfg: dict[str, Any]) -> list[Finding]:
    f = section(cfg, "fp16")
    if f.get("enabled") is not True:
        return []
    scale = f.get("loss_scale", 0)
    if not isinstance(scale, (int, float)) or isinstance(scale, bool) or scale != 0:
        return []
    out = []
    for key in ("loss_scale_window", "min_loss_scale"):
        value = as_int(f.get(key, 1))
        if value is not None and value <= 0:
            out.append(
                finding(
                    ERROR,
                    "fp16-loss-scale",
                    f"fp16.{key} is {value} with dynamic loss scaling (loss_scale 0)",
                    f"DeepSpeed refuses it: fp16.{key} must be > 0 when dynamic loss scaling is enabled",
                    f"set fp16.{key} to {1000 if key == 'loss_scale_window' else 1} (DeepSpeed's default)",
                    f"fp16.{key}",
                )
            )
    return out


def precision_vs_hardware(ctx: LintContext, *, fp16: bool, bf16: bool) -> list[Finding]:
    """fp16/bf16 against the lowest compute capability of the GPUs (docs/deepspeed-rules.md)."""
    hw = ctx.hardware
    if hw is None or not hw.gpus or not (fp16 or bf16):
        return []
    caps = [g.compute_capability for g in hw.gpus if g.compute_capability is not None]
    if not caps:
        return []
    lowest = min(caps)
    name = next(g.name for g in hw.gpus if g.compute_capability == lowest)
    cc = f"{lowest[0]}.{lowest[1]}"
    if bf16 and lowest < (8, 0):
        fix = (
            "use fp16 (with loss scaling) instead" if lowest >= (7, 0) else "use fp32 (no fp16/bf16 section)"
        )
        return [
            finding(
                ERROR,
                "precision-unsupported",
                f"bf16 on {name} (compute capability {cc})",
                "bf16 needs compute capability >= 8.0; torch.cuda.is_bf16_supported() may say yes on older GPUs "
                "through slow emulation",
                fix,
                "bf16.enabled",
            )
        ]
    if fp16 and lowest < (7, 0):
        return [
            finding(
                ERROR,
                "precision-unsupported",
                f"fp16 on {name} (compute capability {cc})",
                "DeepSpeed's fp16 needs compute capability >= 7.0 (tensor cores)",
                "use fp32 (remove the fp16 section)",
                "fp16.enabled",
            )
        ]
    if fp16 and lowest >= (8, 0):
        return [
            finding(
                WARNING,
                "precision-fp16-on-bf16-gpu",
                f"fp16 on {name}, which supports bf16",
                "fp16 needs loss scaling and can overflow (skipped steps); bf16 has fp32's range at the same speed",
                'switch to "bf16": {"enabled": true} and disable fp16',
                "fp16.enabled",
            )
        ]
    return []
