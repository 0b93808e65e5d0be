"""Which optimizer DeepSpeed builds from a config's ``optimizer`` section. Pure: a DeepSpeed config dict in, a name out.

One rule for three readers: the op DeepSpeed JIT-compiles before the first step (``dswiz launch`` names the phase),
and whether stage 0 in 16 bits steps through ``FP16_Optimizer`` (DeepSpeed's FusedAdam) or ``FP16_UnfusedOptimizer``
(any other optimizer: the script's own, ``torch_adam``), which the memory model counts apart
(``wizard.planner.buffers.ZeroBuffers.fused_optimizer``) -- for a config ``dswiz check`` reads and for the configs
``dswiz config`` writes.

DeepSpeed 0.19.8, ``deepspeed/runtime/engine.py``: ``_configure_basic_optimizer`` builds, for an Adam/AdamW section,
DeepSpeedCPUAdam when the optimizer is offloaded, torch's Adam/AdamW when ``torch_adam`` is true (it pops the key
and takes any true value), else its FusedAdam; Lamb and Lion have fused and CPU ops of their own.
``_configure_fp16_optimizer`` wraps an optimizer that is a FusedAdam in FP16_Optimizer, any other in
FP16_UnfusedOptimizer. No section: the script passes its own optimizer (dswiz cannot see which).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

FUSED_ADAM = "fused_adam"


def optimizer_op(ds_config: Mapping[str, Any] | None, *, gpu: bool = True) -> str | None:
    """The op DeepSpeed builds for the config's optimizer section: "fused_adam", "cpu_adam", "fused_lamb",
    "fused_lion", "cpu_lion"; None for none (no section, torch_adam, an optimizer of no op we know, or a fused op
    on a machine without a GPU)."""
    if not isinstance(ds_config, Mapping):
        return None
    opt = ds_config.get("optimizer")
    if not isinstance(opt, Mapping):
        return None
    name = str(opt.get("type", "")).lower()
    zero = ds_config.get("zero_optimization")
    offload = zero.get("offload_optimizer") if isinstance(zero, Mapping) else None
    offloaded = isinstance(offload, Mapping) and str(offload.get("device", "none")).lower() in ("cpu", "nvme")
    if name in ("adam", "adamw"):
        params = opt.get("params")
        if isinstance(params, Mapping) and params.get("torch_adam"):
            return None
        return "cpu_adam" if offloaded else (FUSED_ADAM if gpu else None)
    if name == "lamb":
        return "fused_lamb" if gpu else None
    if name == "lion":
        return "cpu_lion" if offloaded else ("fused_lion" if gpu else None)
    return None


def builds_fused_adam(ds_config: Mapping[str, Any] | None) -> bool:
    """Whether the config's optimizer section makes DeepSpeed build its FusedAdam where the optimizer stays on the GPU
    (its own offload aside: the section is what a re-plan at another stage keeps), so that stage 0 in 16 bits steps
    through FP16_Optimizer."""
    section = ds_config.get("optimizer") if isinstance(ds_config, Mapping) else None
    return optimizer_op({"optimizer": section}, gpu=True) == FUSED_ADAM
