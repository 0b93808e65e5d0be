""" "auto" values: only some consumers fill them, each a fixed set of keys (exact spellings from
transformers/integrations/deepspeed.py trainer_config_process/finalize and accelerate/accelerator.py
_prepare_deepspeed). Plain DeepSpeed fills none: "auto" on a top-level number fails, and inside a section it is
dropped silently (DeepSpeedConfigModel), so e.g. bf16.enabled "auto" trains in fp32."""

from __future__ import annotations

from typing import Any

from wizard.config.lint.base import ERROR, INFO, WARNING, LintContext, finding, is_auto, stage_of, walk
from wizard.findings import Finding

_BATCH = {
    "train_micro_batch_size_per_gpu",
    "train_batch_size",
    "gradient_accumulation_steps",
    "gradient_clipping",
}
# "bfloat16" is bf16's old name: neither fills it, but accelerate's DeepSpeedPlugin.set_mixed_precision (which the
# Trainer goes through too) adds "bf16": {"enabled": true} for a bf16 run, which DeepSpeed reads before "bfloat16";
# otherwise the "auto" is dropped (DeepSpeedConfigModel) and bf16 stays off, as asked.
_PRECISION = {"fp16.enabled", "bf16.enabled", "bfloat16.enabled"}
_HIDDEN_SIZE = {
    "zero_optimization.reduce_bucket_size",
    "zero_optimization.stage3_prefetch_bucket_size",
    "zero_optimization.stage3_param_persistence_threshold",
}
_SCHEDULER = {
    "scheduler.params.warmup_min_lr",
    "scheduler.params.warmup_max_lr",
    "scheduler.params.warmup_num_steps",
    "scheduler.params.total_num_steps",
}
TRAINER_FILLS = frozenset(
    _BATCH
    | _PRECISION
    | _HIDDEN_SIZE
    | _SCHEDULER
    | {
        "optimizer.params.lr",
        "optimizer.params.betas",
        "optimizer.params.eps",
        "optimizer.params.weight_decay",
    }
)
ACCELERATE_FILLS = frozenset(
    _BATCH
    | _PRECISION
    | _HIDDEN_SIZE
    | _SCHEDULER
    | {
        "optimizer.params.lr",  # from DummyOptim
        "optimizer.params.weight_decay",
        "zero_optimization.stage3_gather_16bit_weights_on_model_save",
    }
)
# In config-file mode accelerate fills these from its own plugin defaults (stage 2, no offload), not from anything
# the user chose.
ACCELERATE_DEFAULTS = {
    "zero_optimization.stage": "2 (ACCELERATE_DEEPSPEED_ZERO_STAGE, default 2)",
    "zero_optimization.offload_optimizer.device": '"none"',
    "zero_optimization.offload_param.device": '"none"',
    "zero_optimization.offload_optimizer.nvme_path": '"none"',
    "zero_optimization.offload_param.nvme_path": '"none"',
}


def auto_paths(cfg: dict[str, Any]) -> list[str]:
    return [path for path, value in walk(cfg) if is_auto(value)]


def check_auto(cfg: dict[str, Any], ctx: LintContext) -> list[Finding]:
    paths = auto_paths(cfg)
    if not paths:
        return []
    consumer = ctx.consumer
    if consumer is None:
        return _unknown_consumer(paths)
    if consumer == "deepspeed":
        return [
            finding(
                ERROR,
                "auto-unfilled",
                f'{path} is "auto", which plain DeepSpeed does not fill',
                *_deepspeed_reason(path),
                path,
            )
            for path in paths
        ]
    fills = TRAINER_FILLS if consumer == "trainer" else ACCELERATE_FILLS
    who = "the HF Trainer" if consumer == "trainer" else "accelerate"
    stage = stage_of(cfg)
    out: list[Finding] = []
    for path in paths:
        if consumer == "accelerate" and path in ACCELERATE_DEFAULTS:
            out.append(
                finding(
                    WARNING,
                    "auto-default",
                    f'{path} is "auto": accelerate fills it with its default {ACCELERATE_DEFAULTS[path]}',
                    "the value comes from accelerate's plugin defaults, not from a choice of yours",
                    f"write the value you want for {path.split('.')[-1]}",
                    path,
                )
            )
        elif path not in fills:
            out.append(
                finding(
                    ERROR,
                    "auto-unfilled",
                    f'{path} is "auto", which {who} does not fill',
                    f'{who} only fills "auto" on its own keys; this one reaches DeepSpeed as the string "auto"',
                    f"write the value itself for {path.split('.')[-1]}",
                    path,
                )
            )
        elif path in _HIDDEN_SIZE and path != "zero_optimization.reduce_bucket_size" and stage != 3:
            continue  # left as "auto" below stage 3, which DeepSpeed then ignores: harmless
        elif path in _HIDDEN_SIZE:
            out.append(
                finding(
                    WARNING if consumer == "accelerate" else INFO,
                    "auto-hidden-size",
                    f'{path} is "auto": filled from model.config.hidden_size',
                    f"{who} computes it from the model's hidden size; a model without model.config "
                    '(a plain nn.Module) fails with "Can\'t find `model.config` entry"',
                    "keep it for HF models; write a number (e.g. hidden_size**2) for others",
                    path,
                )
            )
        elif path in _SCHEDULER and consumer == "accelerate":
            out.append(
                finding(
                    INFO,
                    "auto-dummy",
                    f'{path} is "auto": accelerate fills it only through DummyScheduler',
                    "accelerate takes these from accelerate.utils.DummyScheduler(optimizer, total_num_steps=..., "
                    "warmup_num_steps=...) passed to prepare()",
                    "create DummyScheduler in the script (or write the numbers)",
                    path,
                )
            )
    return out


# Keys that plain DeepSpeed neither fills nor drops, and that neither the Trainer nor accelerate fills: what it does
# with "auto" there, and what to write instead. runtime/config.py keeps data_types.grad_accum_dtype's string as it is
# and engine.get_data_types looks it up in DtypeEnum when it builds the optimizer (DeepSpeed 0.19.8).
_DEEPSPEED_OWN: dict[str, tuple[str, str]] = {
    "data_types.grad_accum_dtype": (
        "DeepSpeed looks the name up when it builds the optimizer and fails (ValueError: 'auto' is not a valid "
        "DtypeEnum)",
        'write "fp32" (or the model\'s own "bf16" / "fp16"), or drop the key to accumulate in the model\'s dtype',
    ),
}


def _deepspeed_reason(path: str) -> tuple[str, str]:
    """(why, fix) of an "auto" that plain DeepSpeed reads."""
    if path in _DEEPSPEED_OWN:
        return _DEEPSPEED_OWN[path]
    fix = (
        f"write the value itself for {path.split('.')[-1]} (or use --for trainer/accelerate if one of them runs "
        "this config)"
    )
    if "." not in path or path.startswith(("optimizer.", "scheduler.")):
        why = "DeepSpeed uses the string as the value and fails (e.g. TypeError: '>' not supported between str and float)"
    else:
        why = 'DeepSpeed drops "auto" inside its sections silently and uses its default (bf16/fp16 "auto" means off)'
    return why, fix


def _unknown_consumer(paths: list[str]) -> list[Finding]:
    anywhere = TRAINER_FILLS | ACCELERATE_FILLS
    # No consumer named: the file may be for a program that fills its own "auto" keys (DeepSpeedExamples' SGLang
    # ZeRO-Inference configs are), so this is a warning until --for names the reader.
    out = [
        finding(
            WARNING,
            "auto-unfilled",
            f'{path} is "auto", which neither the HF Trainer nor accelerate fills',
            'unless the program that reads this config fills it, it reaches DeepSpeed as the string "auto" '
            "(a failure, or its default silently)",
            f"write the value itself for {path.split('.')[-1]}, or pass --for to check it against its reader",
            path,
        )
        for path in paths
        if path not in anywhere and path not in ACCELERATE_DEFAULTS
    ]
    fillable = [p for p in paths if p in anywhere or p in ACCELERATE_DEFAULTS]
    if fillable:
        out.append(
            finding(
                INFO,
                "auto-needs-consumer",
                f'{len(fillable)} value(s) are "auto" ({", ".join(fillable[:4])}{", ..." if len(fillable) > 4 else ""})',
                "only the HF Trainer and accelerate fill them (each a different set); plain DeepSpeed fails on them",
                "run `dswiz check FILE --for trainer` or `--for accelerate` to check them against that consumer",
                fillable[0],
            )
        )
    return out
