"""Mixture-of-experts against the ZeRO stage, as the installed DeepSpeed decides it (docs/deepspeed-rules.md).

DeepSpeed 0.19.8 ``engine._validate_zero3_moe_compatibility`` refuses only its *own* MoE layers at stage 3: a
native ``deepspeed.moe.layer.MoE`` ("Native DeepSpeed MoE is not supported with ZeRO Stage 3. Use AutoEP or choose
ZeRO stage 1/2.") -- which a config cannot show, it is in the model code -- and AutoEP (the config's
``expert_parallel`` section) with quantized gradients, hpZ or sequence parallelism. Hugging Face MoE models
(Mixtral, Qwen2-MoE, ...) are ordinary modules to the engine (``has_moe_layers`` stays False): they run at every
stage, and at stage 3 want their MoE block as a leaf module (zero_optimization.leaf_module), which is no error.
Saving AutoEP at stage 3 as a consolidated 16-bit model raises NotImplementedError
(``_raise_if_autoep_zero3_consolidated_export``).
"""

from __future__ import annotations

from typing import Any

from wizard.config.lint.base import ERROR, WARNING, LintContext, as_int, finding, section, stage_of
from wizard.findings import Finding


def check_moe(cfg: dict[str, Any], ctx: LintContext) -> list[Finding]:
    ep = section(cfg, "expert_parallel")
    if ep.get("enabled") is not True or stage_of(cfg) != 3:
        return []
    zero = section(cfg, "zero_optimization")
    hpz = as_int(zero.get("zero_hpz_partition_size"))
    sp = as_int(cfg.get("sequence_parallel_size"))
    # What AutoEP at stage 3 refuses at start: (active, code, the setting, what DeepSpeed does not support, fix, key)
    refused = (
        (
            zero.get("zero_quantized_gradients") is True,
            "autoep-stage3-qgz",
            "zero_quantized_gradients",
            "zero_quantized_gradients",
            "set zero_optimization.zero_quantized_gradients to false (or use stage 2 with AutoEP)",
            "zero_optimization.zero_quantized_gradients",
        ),
        (
            hpz is not None and hpz > 1,
            "autoep-stage3-hpz",
            f"zero_hpz_partition_size {hpz}",
            "hpZeRO secondary tensor groups",
            "remove zero_optimization.zero_hpz_partition_size (or set it to 1)",
            "zero_optimization.zero_hpz_partition_size",
        ),
        (
            sp is not None and sp > 1,
            "autoep-stage3-sequence-parallel",
            f"sequence_parallel_size {sp}",
            "sequence parallelism",
            "set sequence_parallel_size to 1, or use AutoEP at stage 1/2",
            "sequence_parallel_size",
        ),
    )
    out = [
        finding(
            ERROR,
            code,
            f"AutoEP (expert_parallel) at ZeRO stage 3 with {setting}",
            f'DeepSpeed stops at start: "AutoEP with ZeRO Stage 3 does not support {unsupported} yet"',
            fix,
            location,
        )
        for active, code, setting, unsupported, fix, location in refused
        if active
    ]
    if zero.get("stage3_gather_16bit_weights_on_model_save") is True:
        out.append(
            finding(
                WARNING,
                "autoep-stage3-16bit-save",
                "AutoEP at ZeRO stage 3 cannot save a consolidated 16-bit model",
                "save_16bit_model() (and the HF Trainer's / accelerate's save through it) raises "
                "NotImplementedError: expert parameters are partitioned over expert groups",
                "set stage3_gather_16bit_weights_on_model_save to false and convert checkpoints with DeepSpeed's "
                "ds_to_universal.py",
                "zero_optimization.stage3_gather_16bit_weights_on_model_save",
            )
        )
    return out
