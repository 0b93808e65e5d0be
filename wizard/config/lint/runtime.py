"""What the job will do at run time that the user may not expect: optimizer/scheduler pairing rules of the
consumers (accelerate 1.15.0 ``accelerate/accelerator.py`` ``Accelerator._prepare_deepspeed``: DummyOptim /
DummyScheduler against the config's sections), gradient clipping in the wrong place, sections that do less than
their name says, and whether the running job will be observable (DeepSpeed 0.19.8 ``deepspeed/runtime/
constants.py``: steps_per_print and log_level default to None; accelerate's ``DeepSpeedPlugin.__post_init__``
sets steps_per_print to infinity)."""

from __future__ import annotations

from typing import Any

from wizard.config import ds_keys
from wizard.config.lint.base import ERROR, INFO, LintContext, finding, section
from wizard.findings import Finding


def check_runtime(cfg: dict[str, Any], ctx: LintContext) -> list[Finding]:
    out: list[Finding] = []
    params = section(cfg, "optimizer", "params")
    if "max_grad_norm" in params:
        out.append(
            finding(
                ERROR,
                "max-grad-norm-in-optimizer",
                "optimizer.params.max_grad_norm is set",
                "DeepSpeed refuses it: \"'max_grad_norm' is not supported as an optimizer parameter\"",
                f'remove it and set top-level "gradient_clipping": {params["max_grad_norm"]!r}',
                "optimizer.params.max_grad_norm",
            )
        )
    out += _optimizer_type(cfg)
    has_opt = isinstance(cfg.get("optimizer"), dict)
    has_sched = isinstance(cfg.get("scheduler"), dict)
    if ctx.consumer == "accelerate" and (has_opt or has_sched):
        what = " and ".join(n for n, present in (("optimizer", has_opt), ("scheduler", has_sched)) if present)
        out.append(
            finding(
                INFO,
                "accelerate-dummy-objects",
                f"the config defines the {what}: the script must use accelerate's placeholders",
                "accelerate refuses a real torch optimizer/scheduler next to one in the config, and a DummyOptim "
                "only pairs with a DummyScheduler",
                "create accelerate.utils.DummyOptim(params, lr=...)"
                + (" and DummyScheduler(optimizer, ...)" if has_sched else "")
                + " and pass them to accelerator.prepare()",
                "optimizer" if has_opt else "scheduler",
            )
        )
    if "activation_checkpointing" in cfg:
        out.append(
            finding(
                INFO,
                "activation-checkpointing-section",
                "the activation_checkpointing section does not switch checkpointing on",
                "it only configures deepspeed.checkpointing, which the model must call itself",
                "enable it in the model (HF: model.gradient_checkpointing_enable() or --gradient_checkpointing)",
                "activation_checkpointing",
            )
        )
    out += _observability(cfg, ctx)
    return out


# Optimizers earlier DeepSpeed releases built from the config and 0.19.8 no longer has (deepspeed/runtime/fp16/onebit
# is gone): the same refusal, with the history in the message.
_REMOVED_OPTIMIZERS = {"onebitadam": "OneBitAdam", "zerooneadam": "ZeroOneAdam", "onebitlamb": "OneBitLamb"}


def _optimizer_type(cfg: dict[str, Any]) -> list[Finding]:
    """DeepSpeed 0.19.8 ``engine.py`` ``_do_sanity_check``: a config optimizer must be one of DeepSpeed's (any case)
    or a torch.optim class of exactly that name, else "<name> is not a supported DeepSpeed Optimizer"."""
    name = section(cfg, "optimizer").get("type")
    if not isinstance(name, str) or name.lower() in ds_keys.DEEPSPEED_OPTIMIZERS:
        return []
    if name in ds_keys.TORCH_OPTIMIZERS:
        return []
    removed = _REMOVED_OPTIMIZERS.get(name.lower())
    history = (
        f"the 1-bit optimizers ({removed} among them) are not part of DeepSpeed {ds_keys.FROZEN_FROM_DEEPSPEED}; "
        if removed
        else ""
    )
    return [
        finding(
            ERROR,
            "optimizer-unsupported",
            f'optimizer type "{name}" is not an optimizer DeepSpeed {ds_keys.FROZEN_FROM_DEEPSPEED} can build',
            f'{history}deepspeed.initialize stops: "{name} is not a supported DeepSpeed Optimizer" (it takes '
            "DeepSpeed's own optimizers or a torch.optim class of exactly that name)",
            'use "AdamW" (or "Lamb"), or pin the older DeepSpeed this config was written for'
            if removed
            else f"use one of {', '.join(sorted(ds_keys.DEEPSPEED_OPTIMIZERS))} or a torch.optim class name "
            "(case matters: SGD, not sgd)",
            "optimizer.type",
        )
    ]


def _observability(cfg: dict[str, Any], ctx: LintContext) -> list[Finding]:
    if ctx.consumer in ("accelerate", "trainer"):
        who = "accelerate" if ctx.consumer == "accelerate" else "the HF Trainer"
        return [
            finding(
                INFO,
                "accelerate-steps-per-print",
                f"under {who}, DeepSpeed's own step and throughput lines never print",
                "accelerate's DeepSpeedPlugin (which the HF Trainer uses too) sets steps_per_print to infinity "
                "in every DeepSpeed config",
                "read progress from the script's own output (dswiz monitor does; print the loss every N steps)",
                "steps_per_print",
            )
        ]
    if (
        ctx.at_launch
    ):  # the launch adds steps_per_print and log_level to the copy it starts (observable_ds_config)
        return []
    out: list[Finding] = []
    if cfg.get("steps_per_print") is None:
        out.append(
            finding(
                INFO,
                "no-steps-per-print",
                "steps_per_print is not set: DeepSpeed prints no step or throughput lines",
                "its default is None since 0.15.2, so a running job shows no samples/s or learning rate",
                'add "steps_per_print": 10',
                "steps_per_print",
            )
        )
    if cfg.get("log_level") is None:
        out.append(
            finding(
                INFO,
                "no-log-level",
                "log_level is not set: DeepSpeed's ranks log at WARNING and hide the throughput lines",
                "since 0.17.6 ranks log at WARNING; the config's log_level (DeepSpeed >= 0.19.3) lowers it",
                'add "log_level": "info" (ignored by DeepSpeed before 0.19.3)',
                "log_level",
            )
        )
    return out
