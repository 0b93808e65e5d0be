"""`dswiz check CONFIG --model M`: what the planner predicts for an existing DeepSpeed JSON / accelerate YAML on
the hardware it is meant for -- the config's own stage, offloads, checkpointing, micro-batch and accumulation, the
hardware's topology where the file does not give one -- as one finding (fits, or what to change) and the
candidate's stable JSON (``dswiz plan --json``'s contract)."""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wizard.errors import DswizError
from wizard.findings import Finding, Severity
from wizard.hardware.report import HardwareReport
from wizard.units import fmt_bytes

if TYPE_CHECKING:  # the planner is imported when a prediction is asked for, not when `dswiz check` starts
    from wizard.config.schema import ConfigSet, ZeroOptimization
    from wizard.config.sidecar import PlanSidecar
    from wizard.model import ModelSpec
    from wizard.planner import Plan
    from wizard.planner.buffers import ZeroBuffers
    from wizard.strategy import Strategy
    from wizard.tuning import FineTune


@dataclass(frozen=True)
class ConfigPrediction:
    finding: Finding
    candidate: (
        dict[str, Any] | None
    )  # candidate_to_json of the config's strategy; None when none could be made
    notes: tuple[Finding, ...] = ()  # what the prediction could not use (a damaged dswiz-plan.json)


# --finetune and the --lora-* flags, by their click names
FINETUNE_FLAGS = ("finetune", "lora_rank", "lora_alpha", "lora_targets")


@dataclass(frozen=True)
class PredictionAsk:
    """What shapes the prediction beyond the config (`dswiz check --model`'s flags, as `dswiz plan` takes them)."""

    # None: the folder's dswiz-plan.json (for this model), else the model's context
    seq_len: int | None = None
    # The FINETUNE_FLAGS given on the command line. What they leave out comes from the folder's dswiz-plan.json when
    # it was planned for this model, else full fine-tuning (and PEFT's defaults).
    finetune_flags: Mapping[str, Any] = field(default_factory=dict)
    # share of each card kept free; None: the folder's dswiz-plan.json's, else the planner's default
    safety_margin: float | None = None
    # plan for this much of each card; None: the folder's dswiz-plan.json's where this card holds it, else the card's
    gpu_memory_bytes: int | None = None
    # calibrated by the hardware's run history, as `dswiz plan` is (--no-history: not)
    use_history: bool = True


def config_prediction(
    file: Path, model_text: str, hardware: HardwareReport, ask: PredictionAsk = PredictionAsk()
) -> ConfigPrediction:
    """The planner's verdict on the config in ``file`` for ``model_text`` on ``hardware``, as ``ask`` shapes it."""
    from wizard.config.load import load_path
    from wizard.config.reimport import strategy_from_config
    from wizard.config.schema import DS_CONFIG_NAME
    from wizard.model import load_model_spec
    from wizard.planner import (
        PlanRequest,
        candidate_to_json,
        choice_advice,
        choose,
        plan,
        why_it_does_not_fit,
    )
    from wizard.planner.types import StrategyChoice

    model = load_model_spec(model_text)  # a model that does not load is an error, with or without a GPU here
    if not hardware.gpus:
        return _note(
            "no NVIDIA GPU here to predict for",
            "--model predicts the config's memory and speed on a GPU",
            "give the training machine with --hardware, e.g. --hardware 8xA100-80GB",
        )
    not_a_config = _not_a_config(file, model_text)
    if not_a_config is not None:
        return not_a_config
    try:
        loaded = load_path(file / DS_CONFIG_NAME if file.is_dir() else file)
    except DswizError as e:
        return _note(
            f"no prediction: the config does not load ({e.problem})",
            "the prediction reads the strategy from the config",
            e.fix or "fix the config (the findings above say how)",
        )
    sidecar, notes = _sidecar(file)
    s = strategy_from_config(loaded.config, mode=sidecar.strategy.mode if sidecar is not None else "train")
    if loaded.kind == "deepspeed":  # a DeepSpeed JSON names no topology: the hardware's
        s = s.with_(nodes=hardware.nodes, gpus_per_node=max(1, hardware.gpus_per_node))
    from wizard.planner import with_finetune
    from wizard.service.history import with_history

    # dswiz-plan.json's sequence and fine-tuning describe its own model's run only
    planned = sidecar if sidecar is not None and sidecar.model.name == model.name else None
    tuning, tuning_words = _tuning(ask.finetune_flags, planned, s.mode)
    model = with_finetune(model, tuning)
    seq_len, seq_source = _sequence(ask.seq_len, planned, model)
    gpu_memory, margin = _planned_memory(ask, sidecar, hardware)
    request = PlanRequest(
        seq_len=seq_len,
        precisions=(s.precision,),
        mode=s.mode,
        buffers=buffers_of(loaded.config),
        gpu_memory_bytes=gpu_memory,
        expandable_segments=planned_allocator(sidecar),
    )
    if margin is not None:
        request = replace(request, safety_margin=margin)
    request = with_history(request, hardware, use=ask.use_history)
    result = plan(hardware, model, request)
    chosen = choose(
        result,
        StrategyChoice(
            s.zero_stage,
            s.offload_optimizer,
            s.offload_param,
            s.activation_checkpointing,
            s.micro_batch_size,
            s.gradient_accumulation_steps,
        ),
    )
    p = chosen.predicted
    advice = choice_advice(chosen, result)
    speed = f"~{p.tokens_per_sec:,.0f} tokens/s" + (
        " (with PyTorch's expandable segments)" if request.expandable_segments else ""
    )
    trained = (
        f"{model.name} at {request.resolved_seq_len(model):,} tokens a sample ({seq_source}){tuning_words}"
    )
    from_plan = [
        flag
        for flag, taken in (
            ("--gpu-memory", ask.gpu_memory_bytes is None and gpu_memory is not None),
            ("--margin", ask.safety_margin is None and margin is not None),
        )
        if taken
    ]
    kept = f", {request.safety_margin * 100:g} % kept free" if "--margin" in from_plan else ""
    budget_source = (
        f" (as dswiz-plan.json planned{kept}; {' / '.join(from_plan)} to change)" if from_plan else ""
    )
    if chosen.fits:
        finding = Finding(
            Severity.INFO,
            "plan-fits",
            f"{chosen.label} at micro-batch {chosen.strategy.micro_batch_size} fits {trained}: "
            f"{fmt_bytes(p.gpu_needed_bytes)} of {fmt_bytes(result.gpu_capacity_bytes or 0)} per GPU{budget_source}, "
            f"{speed}",
            "the planner's prediction for this config on this hardware (`dswiz plan` with the same flags)",
            "; ".join(advice) or "nothing to change",
        )
    else:
        why_not = why_it_does_not_fit(chosen)
        torch_step = fused_adam_advice(
            result,
            chosen.strategy,
            "the FusedAdam DeepSpeed builds from the optimizer section",
            '"torch_adam": true and "fused": true in its params',
        )
        advice = [*([torch_step] if torch_step else []), *advice]
        finding = Finding(
            Severity.ERROR,
            "plan-does-not-fit",
            f"{chosen.label} at micro-batch {chosen.strategy.micro_batch_size} for {trained}: "
            + ("; ".join(why_not) or ", ".join(chosen.limits)),
            WONT_RUN,
            "; ".join(advice) or "see `dswiz plan --model ...` for what fits",
        )
    return ConfigPrediction(
        finding, candidate_to_json(chosen), (*notes, *_unmodelled(loaded.config, s, model))
    )


def _unmodelled(config: ConfigSet, s: Strategy, model: ModelSpec) -> tuple[Finding, ...]:
    """What the config sets that the memory model does not count: gradients accumulated in fp32
    (data_types.grad_accum_dtype) under 16-bit weights. ZeRO-1 with bf16 then runs DeepSpeed's BF16 optimizer, which
    keeps an fp32 gradient of every parameter on every GPU; stages 2-3 keep their gradient partitions in fp32
    (stage_1_and_2.py, stage3.py, bf16_optimizer.py; DeepSpeed 0.19.8). The linter refuses it without ZeRO."""
    from wizard.config.lint.precision import ACCUM_DTYPES

    data_types = config.deepspeed.unmanaged.get("data_types")
    value = data_types.get("grad_accum_dtype") if isinstance(data_types, dict) else None
    if s.precision not in ("bf16", "fp16") or s.zero_stage == 0 or value not in ACCUM_DTYPES["fp32"]:
        return ()
    from wizard.planner.finetune import trainable_params

    params = trainable_params(model)
    whole = s.zero_stage == 1  # every parameter's fp32 gradient on every GPU
    if whole:  # bf16's BF16 optimizer keeps its own 16-bit gradients beside the fp32 ones
        more = (4 if s.precision == "bf16" and s.offload_optimizer != "cpu" else 2) * params
    else:  # the partitions in fp32, on the GPU unless the optimizer is offloaded
        more = 0 if s.offload_optimizer != "none" else 2 * params // max(1, s.world_size)
    if more == 0:
        return ()
    return (
        Finding(
            Severity.WARNING,
            "plan-not-counted",
            f"the prediction counts {s.precision} gradients; this config accumulates them in fp32 "
            "(data_types.grad_accum_dtype), which the memory model does not count",
            "DeepSpeed keeps "
            + (
                "an fp32 gradient of every trained parameter on every GPU"
                + (" (ZeRO-1 with bf16 runs its BF16 optimizer)" if s.precision == "bf16" else "")
                if whole
                else "each GPU's gradient partitions in fp32"
            )
            + f": expect up to ~{fmt_bytes(more)} more per GPU than predicted",
            f"remove data_types.grad_accum_dtype (gradients in {s.precision}) to run as predicted, or keep "
            "that much of each card free",
            "data_types.grad_accum_dtype",
        ),
    )


def planned_hardware(file: Path) -> HardwareReport | None:
    """The hardware the folder's dswiz-plan.json was planned for (None without a readable one, or one without GPUs):
    what `dswiz check --model` predicts for on a machine with no GPU of its own when --hardware does not say."""
    sidecar, _ = _sidecar(file)
    return sidecar.hardware if sidecar is not None and sidecar.hardware.gpus else None


def _sidecar(file: Path) -> tuple[PlanSidecar | None, tuple[Finding, ...]]:
    """The dswiz-plan.json beside the config (dswiz config wrote it), or a warning that it does not read."""
    from wizard.config.sidecar import read_sidecar

    try:
        return read_sidecar(file if file.is_dir() else file.parent), ()
    except DswizError as e:
        return None, (
            Finding(
                Severity.WARNING,
                "plan-file-unreadable",
                f"the prediction could not use the folder's plan: {e.problem}",
                "its sequence length, fine-tuning, mode and the memory it was planned against are not in the config "
                "itself; the prediction assumed the model's context, full fine-tuning, training and the whole card "
                "with the default margin, unless flags said otherwise",
                e.fix
                or "write the folder again with dswiz config, or give --seq-len, --finetune, --gpu-memory and "
                "--margin",
            ),
        )


def _not_a_config(file: Path, model_text: str) -> ConfigPrediction | None:
    """The note for a file the prediction cannot read a strategy from (a pipe the check has read, a hostfile, a
    .deepspeed_env, a batch script); None for a DeepSpeed JSON, an accelerate YAML or a config folder."""
    if not file.is_dir() and not file.is_file():  # a pipe or a device: the check itself read it, once
        return _note(
            f"no prediction for {file}: a pipe or a device is read once, by the check",
            "--model reads the config again to predict it",
            f"save it to a file and check that: dswiz check ds_config.json --model {model_text}",
        )
    kind = _kind(file)
    if kind not in ("deepspeed", "accelerate"):
        names = {
            "hostfile": "a hostfile",
            "deepspeed_env": "a .deepspeed_env",
            "sbatch": "a Slurm batch script",
        }
        return _note(
            f"no prediction for {names.get(kind, kind)}: it names no ZeRO stage, offload or batch",
            "--model predicts a DeepSpeed JSON or an accelerate YAML",
            f"check the config beside it: dswiz check {file.parent} --model {model_text}",
        )
    return None


def _kind(file: Path) -> str:
    """What kind of file the prediction was asked for (a folder: its DeepSpeed JSON)."""
    from wizard.config.check import detect_kind
    from wizard.errors import read_user_text

    if file.is_dir():
        return "deepspeed"
    try:
        return detect_kind(file, read_user_text(file, "a config", ""))
    except DswizError:  # the check's own reading says why; the prediction then says the config does not load
        return "deepspeed"


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _tuning(flags: Mapping[str, Any], planned: PlanSidecar | None, mode: str) -> tuple[FineTune, str]:
    """The fine-tuning to predict for, and the words the finding adds for it ("" for full fine-tuning nobody
    asked for): the --finetune/--lora-* flags given, the rest from the plan made for this model."""
    from wizard.tuning import FULL, make_finetune

    base = planned.model.finetune if planned is not None and mode == "train" else FULL
    given = {k: v for k, v in flags.items() if v is not None}
    if not given:
        return base, (f", {base.label()} as dswiz-plan.json planned" if base.uses_lora else "")
    chosen = given.get("finetune") or base.mode
    lora_flags = [_flag(k) for k in given if k != "finetune"]
    if chosen == "full" and lora_flags:
        raise DswizError(
            f"{', '.join(lora_flags)} shape{'s' if len(lora_flags) == 1 else ''} LoRA adapters, and the "
            "prediction is for full fine-tuning"
            + ("" if "finetune" in given else " (no --finetune, no LoRA plan)"),
            "add --finetune lora (or qlora), or drop the --lora-* flags",
        )
    if chosen != "full" and mode == "inference":
        raise DswizError(
            f"--finetune {chosen} trains adapters, and the config runs inference (no optimizer)",
            "drop --finetune, or check the training config",
        )
    same = base.mode == chosen
    tuning = make_finetune(
        chosen,
        rank=given.get("lora_rank", base.lora_rank if same else None),
        alpha=given.get("lora_alpha", base.lora_alpha if same else None),
        targets=given.get("lora_targets", base.lora_targets if same else ()),
    )
    return tuning, f", {tuning.label()} ({', '.join(_flag(k) for k in given)})"


def _sequence(asked: int | None, planned: PlanSidecar | None, model: ModelSpec) -> tuple[int | None, str]:
    """The tokens per sample to predict for, and where that figure comes from (said in the finding); a sequence
    longer than a model with learned positions can take is the error `dswiz plan` gives."""
    if asked is not None:
        model.check_seq_len(asked)
        return asked, "--seq-len"
    if planned is not None:
        return planned.seq_len, "as dswiz-plan.json planned; --seq-len to change"
    return None, "the model's context, at most 2048; --seq-len to change"


def planned_allocator(sidecar: PlanSidecar | None) -> bool:
    """Whether the config's job runs PyTorch's allocator with expandable segments: its folder's dswiz-plan.json
    says so (dswiz config wrote the variable into its launch.sh), else this shell's allocator settings."""
    from wizard import alloc_conf

    planned = True if sidecar is not None and sidecar.expandable_segments else None
    return alloc_conf.planned_expandable_segments(planned, os.environ)


def _note(text: str, why: str, fix: str) -> ConfigPrediction:
    return ConfigPrediction(Finding(Severity.INFO, "plan-not-predicted", text, why, fix), None)


# DeepSpeed's zero_optimization keys for the buffers the memory model counts (deepspeed/runtime/zero/config.py,
# DeepSpeed 0.19.8), and the ZeroBuffers field each one sets.
BUFFER_KEYS = (
    ("reduce_bucket_size", "reduce_bucket_elements"),
    ("allgather_bucket_size", "allgather_bucket_elements"),
    ("stage3_prefetch_bucket_size", "prefetch_elements"),
    ("stage3_max_live_parameters", "max_live_parameters"),
    ("stage3_max_reuse_distance", "max_reuse_distance"),
)


WONT_RUN = "it would stop at the first step (CUDA out of memory, or the host's OOM killer for host RAM)"


def does_not_fit(plan: Plan, strategy: Strategy) -> Finding | None:
    """The planner's verdict on a strategy it was asked to write, as an error finding when it does not fit (None when
    it does, or there is no GPU to judge): what it needs, why that matters, what would fit. `dswiz config` refuses
    on it (unless --force-errors) and the wizard's Review asks before it writes."""
    from wizard import planner

    if not plan.hardware.gpus:
        return None
    chosen = planner.candidate_for(plan, strategy)
    if chosen.fits:
        return None
    why = planner.why_it_does_not_fit(chosen)
    advice = planner.choice_advice(chosen, plan)
    return Finding(
        Severity.ERROR,
        "plan-does-not-fit",
        f"{chosen.label} at micro-batch {strategy.micro_batch_size}: {why[0] if why else 'does not fit'}",
        WONT_RUN,
        "; ".join(advice) or "see `dswiz plan --model ...` for what fits",
    )


def fused_adam_advice(plan: Plan, strategy: Strategy, fused: str, switch: str) -> str | None:
    """Where ``plan`` counted DeepSpeed's FusedAdam at a 16-bit ZeRO-0 step (FP16_Optimizer: 4 bytes a parameter more
    than a torch optimizer's, ``ZeroBuffers.fused_optimizer``) and the same kind of strategy stepped by torch's fused
    AdamW fits, sized by the planner: the advice line that says so -- ``fused`` names where the FusedAdam comes from,
    ``switch`` how to step with torch's instead (a flag, or a config's keys). None where the optimizer makes no
    difference or that does not fit either."""
    from wizard import planner
    from wizard.planner.memory import unfused_16bit_step
    from wizard.planner.types import StrategyChoice

    buffers = plan.request.buffers
    if not buffers.fused_optimizer or not unfused_16bit_step(strategy):
        return None
    torch_step = replace(plan.request, buffers=replace(buffers, fused_optimizer=False))
    kind = StrategyChoice(0, "none", "none", strategy.activation_checkpointing)
    other = planner.choose(planner.plan(plan.hardware, plan.model, torch_step), kind)
    if not other.fits:
        return None
    return (
        f"{fused} holds 4 bytes a parameter more at ZeRO-0's step: with {switch} (torch's fused AdamW) micro-batch "
        f"{other.strategy.micro_batch_size} fits ({fmt_bytes(other.predicted.gpu_needed_bytes)} per GPU)"
    )


def config_builds_fused_adam(config: ConfigSet) -> bool:
    """Whether a config's optimizer section makes DeepSpeed build its FusedAdam (stage 0 steps through
    FP16_Optimizer): the rule of wizard.config.optimizer_op on the config as DeepSpeed reads it."""
    from wizard.config.optimizer_op import builds_fused_adam
    from wizard.config.render import ds_config_dict

    return builds_fused_adam(ds_config_dict(config.deepspeed))


def _planned_memory(
    ask: PredictionAsk, sidecar: PlanSidecar | None, hardware: HardwareReport
) -> tuple[int | None, float | None]:
    """(--gpu-memory, --margin) as given, else as the folder's dswiz-plan.json planned them -- its memory only where
    this hardware's card holds it (a plan for 24 GiB of an H200 judged on a 16 GiB card is judged on that card)."""
    from wizard.service.choices import gpu_memory_for

    gpu_memory, margin = ask.gpu_memory_bytes, ask.safety_margin
    if gpu_memory is None and sidecar is not None and sidecar.gpu_memory_bytes:
        with contextlib.suppress(DswizError):  # more than this card holds: judged on the card
            gpu_memory = gpu_memory_for(sidecar.gpu_memory_bytes, hardware)
    if margin is None and sidecar is not None:
        margin = sidecar.safety_margin
    return gpu_memory, margin


def reduces_to_owners(zero: ZeroOptimization) -> bool:
    """Whether stages 1-2 reduce each gradient slice to the rank that owns it (one pass over the ring) instead of
    all-reducing whole buckets (two): only with use_multi_rank_bucket_allreduce off, reduce_scatter on and the
    gradients contiguous -- non-contiguous gradients go through buffered_reduce_fallback, which all-reduces, unless
    the optimizer is offloaded, which makes them contiguous (stage_1_and_2.py, DeepSpeed 0.19.8)."""
    offloaded = zero.offload_optimizer is not None and zero.offload_optimizer.device in ("cpu", "nvme")
    return (
        zero.use_multi_rank_bucket_allreduce is False
        and zero.reduce_scatter is not False
        and (zero.contiguous_gradients is not False or offloaded)
    )


def buffer_count(key: str, value: Any) -> int | None:
    """A ``zero_optimization`` buffer setting (one of BUFFER_KEYS) as the memory model reads it: a whole count of
    elements within what a model can hold; None where DeepSpeed's default stands instead (absent, "auto", out of
    range, below ``least_buffer_count``)."""
    from wizard.model import MAX_COUNT

    if (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and least_buffer_count(key) <= value <= MAX_COUNT
    ):
        return int(value)
    return None


def least_buffer_count(key: str) -> int:
    """The smallest value DeepSpeed takes for a buffer setting: ZeRO-3's prefetch, live and reuse limits may be 0
    (off); the bucket sizes may not."""
    return 0 if key.startswith("stage3_") else 1


def buffers_of(config: ConfigSet) -> ZeroBuffers:
    """The buffer sizes a DeepSpeed config sets (a smaller reduce bucket frees memory: the ZeRO-Offload paper's
    13B run used 5e7); DeepSpeed's defaults where a key is absent or "auto" (the Trainer fills it)."""
    from wizard.planner.buffers import DEFAULT_BUFFERS

    zero = config.deepspeed.zero_optimization
    changes: dict[str, Any] = {}
    if config_builds_fused_adam(config):  # stage 0 steps through FP16_Optimizer
        changes["fused_optimizer"] = True
    if zero is None:
        return replace(DEFAULT_BUFFERS, **changes)
    for key, name in BUFFER_KEYS:
        count = buffer_count(key, getattr(zero, key, None))
        if count is not None:
            changes[name] = count
    if zero.overlap_comm is not None:
        changes["overlap_comm"] = zero.overlap_comm
    if reduces_to_owners(zero):
        changes["gradient_all_reduce"] = False
    return replace(DEFAULT_BUFFERS, **changes)
