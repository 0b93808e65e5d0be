"""Click option shapes that several `dswiz` commands declare: one definition each, so the commands agree on the
name, the metavar and how a default is shown. Front-door code only (imports click); the core never imports it."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import click

from wizard.tuning import DEFAULT_LORA_ALPHA, DEFAULT_LORA_RANK, FINETUNE_MODES, FineTune, make_finetune
from wizard.units import MAX_SAFETY_MARGIN

if TYPE_CHECKING:  # the planner and the model are imported when a command plans, not when `--help` is drawn
    from wizard.errors import DswizError
    from wizard.hardware.report import HardwareReport
    from wizard.model import ModelSpec
    from wizard.planner import PlanRequest
    from wizard.planner.types import StrategyChoice

F = TypeVar("F", bound=Callable[..., Any])


def _local_python(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--python for a command that runs it here: it must exist and be executable (a missing one was only a warning
    in `dswiz check`, exit 0)."""
    import shutil

    from wizard.errors import DswizError

    if value is not None and shutil.which(value) is None:
        raise DswizError(
            f"--python {value}: no such executable here",
            "pass the training environment's interpreter (e.g. .venv/bin/python), or leave --python out",
        )
    return value


def python_option(help: str, *, runs_here: bool = True) -> Callable[[F], F]:
    """``--python PY``: the training environment's interpreter (each command says what it uses it for). Checked
    to exist when the command runs it on this machine (``runs_here``); `dswiz launch` checks it in its preflight,
    on every node."""
    callback = _local_python if runs_here else None
    return click.option("--python", "python", metavar="PY", help=help, callback=callback)


def flag_option(*names: str, help: str) -> Callable[[F], F]:
    """An on/off switch, off unless given."""
    return click.option(*names, is_flag=True, help=help)


def no_local_rank_option() -> Callable[[F], F]:
    """--no-local-rank/--local-rank: whether DeepSpeed's launcher leaves --local_rank=N off the script's command
    line (`dswiz config` writes it into launch.sh, `dswiz launch --config` follows the folder unless told, `dswiz
    probe` passes it on). None: not given."""
    return click.option(
        "--no-local-rank/--local-rank",
        "no_local_rank",
        default=None,
        help="--no-local-rank: do not put --local_rank=N on the script's command line (DeepSpeed's --no_local_rank), "
        "for scripts whose parser cannot take it; the rank is in the LOCAL_RANK environment variable either way. "
        "DeepSpeed launcher only (its MPI/slurm backends never pass it); refused with accelerate and torchrun, which "
        "never do. --local-rank: pass it, whatever a --config folder's launch.sh says (the default otherwise).",
    )


def choice_option(*names: str, choices: tuple[str, ...], default: str, help: str) -> Callable[[F], F]:
    """One of fixed choices, with a default that ``--help`` shows."""
    return click.option(*names, type=click.Choice(choices), default=default, show_default=True, help=help)


class FiniteFloat(click.FloatRange):
    """A number option within bounds that also refuses nan and inf: click's FloatRange lets nan through every
    bound (every comparison with nan is false), and `--margin nan` once reached the planner as a traceback."""

    name = "number"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return rv


def defaulted_option(name: str, kind: Any, default: Any, metavar: str, help: str) -> Callable[[F], F]:
    """A number with a default that ``--help`` shows."""
    return click.option(name, type=kind, default=default, show_default=True, metavar=metavar, help=help)


# ------------------------------------------------------------------ planning: the flags `dswiz plan` and `config` share

PRECISION_CHOICES = ("auto", "bf16", "fp16", "fp32")


def _size(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    if value is None:
        return None
    from wizard.units import parse_card_size

    try:
        return parse_card_size(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


MODEL_HELP = (
    "A preset (llama-7b, gpt2-xl, mixtral-8x7b, ...), a Hugging Face hub id (meta-llama/Llama-3.1-8B: read from "
    "the local HF cache, else only its config.json is fetched; HF_HUB_OFFLINE and HF_TOKEN honoured), a checkpoint "
    "folder, a config.json, or numbers like params=7e9 or layers=32,hidden=4096,heads=32,vocab=32000."
)


def model_option(*, required: bool) -> Callable[[F], F]:
    """``--model``: what is trained (wizard.model.load_model_spec reads every form)."""
    return click.option(
        "--model",
        "-m",
        "model_text",
        required=required,
        metavar="NAME|HUB-ID|PATH|NUMBERS",
        help=MODEL_HELP,
    )


def finetune_options(*, from_plan: bool = False) -> tuple[Callable[[F], F], ...]:
    """``--finetune full|lora|qlora`` with ``--lora-rank``, ``--lora-alpha``, ``--lora-targets``: which parameters
    train (``finetune_from_flags`` turns them into a wizard.tuning.FineTune). ``from_plan``: no defaults of their
    own (None when not given): what they leave out comes from a folder's dswiz-plan.json (`dswiz check --model`)."""
    then = " Default: the folder's dswiz-plan.json (for the same model), else " if from_plan else ""
    return (
        click.option(
            "--finetune",
            type=click.Choice(FINETUNE_MODES),
            default=None if from_plan else "full",
            show_default=not from_plan,
            help="full: every weight trains; lora: PEFT adapters on a frozen 16-bit base; qlora: adapters on a "
            "frozen 4-bit NF4 base (bitsandbytes, double quantization)."
            + (then + "full." if from_plan else ""),
        ),
        _lora_number(
            "--lora-rank",
            DEFAULT_LORA_RANK,
            "LoRA rank r (peft.LoraConfig's default).",
            then + str(DEFAULT_LORA_RANK) + "." if from_plan else "",
        ),
        _lora_number(
            "--lora-alpha",
            DEFAULT_LORA_ALPHA,
            "LoRA alpha (scales the update by alpha/r; no effect on memory).",
            then + str(DEFAULT_LORA_ALPHA) + "." if from_plan else "",
        ),
        click.option(
            "--lora-targets",
            metavar="NAMES|all-linear",
            help="Modules to adapt, comma-separated (q_proj,v_proj), or all-linear. Default: PEFT's for the "
            "architecture (q_proj,v_proj for LLaMA/Mistral/Qwen2, c_attn for GPT-2)."
            + (" With a folder's dswiz-plan.json for the same model: its targets." if from_plan else ""),
        ),
    )


def _lora_number(name: str, default: int, help: str, from_plan: str = "") -> Callable[[F], F]:
    """A --lora-* count; ``from_plan`` (the help's default sentence) when a plan file supplies the default."""
    if from_plan:
        return click.option(name, type=click.IntRange(1, 65536), default=None, help=help + from_plan)
    return click.option(name, type=click.IntRange(1, 65536), default=default, show_default=True, help=help)


def finetune_from_flags(flags: Mapping[str, Any]) -> FineTune:
    """The FineTune the --finetune/--lora-* flags describe (DswizError for bad targets)."""
    return make_finetune(
        flags.get("finetune") or "full",
        rank=flags.get("lora_rank"),
        alpha=flags.get("lora_alpha"),
        targets=flags.get("lora_targets") or (),
    )


def hardware_option() -> Callable[[F], F]:
    return click.option(
        "--hardware",
        metavar="SPEC|FILE",
        help="Plan for described hardware: 8xA100-80GB, 2x8xH100,ram=1TiB,nvme=3.5TB, a YAML profile or a "
        "saved `dswiz detect --json`. Default: this machine.",
    )


def together(*options: Callable[[F], F]) -> Callable[[F], F]:
    """Several click options as one decorator, listed by --help in the order given."""

    def apply(f: F) -> F:
        for option in reversed(options):
            f = option(f)
        return f

    return apply


def seq_len_option(help_text: str) -> Callable[[F], F]:
    """--seq-len: tokens per sample (planning; `dswiz check --model`)."""
    return click.option("--seq-len", type=click.IntRange(1, 10_000_000), help=help_text)


def card_memory_options(*, from_plan: bool = False) -> tuple[Callable[[F], F], ...]:
    """--margin and --gpu-memory: how much of each card a plan (or `dswiz check --model`'s prediction) may use;
    ``from_plan``: a folder's dswiz-plan.json says it where the flag is not given (`dswiz check`)."""
    plan = " Default: as the folder's dswiz-plan.json planned, else" if from_plan else ""
    return (
        click.option(
            "--margin",
            type=FiniteFloat(0, MAX_SAFETY_MARGIN * 100),
            default=5.0,
            show_default=not from_plan,
            help=f"Percent of each GPU's memory to keep free.{plan + ' 5.' if from_plan else ''}",
        ),
        click.option(
            "--gpu-memory",
            callback=_size,
            metavar="SIZE",
            help="Plan for this much memory per GPU (e.g. 24GiB) instead of the card's total."
            + (plan + " the card's total." if from_plan else ""),
        ),
    )


def planning_options(*, model_required: bool) -> Callable[[F], F]:
    """What the planner is asked (``planning_model``, ``planning_request``): model and how it is fine-tuned,
    hardware, sequence, batch, precision, mode, what it may use (offload, checkpointing) and the memory it plans
    against. ``dswiz plan`` and ``dswiz config`` both."""
    options = [
        model_option(required=model_required),
        *finetune_options(),
        hardware_option(),
        seq_len_option("Tokens per sample (default: the model's context, at most 2048)."),
        click.option(
            "--global-batch",
            type=click.IntRange(1, 100_000_000),
            help="Target global batch (samples per optimizer step); micro-batch x accumulation x GPUs matches it.",
        ),
        choice_option(
            "--precision",
            choices=PRECISION_CHOICES,
            default="auto",
            help="auto: bf16 where the GPUs support it, else fp16, else fp32.",
        ),
        click.option(
            "--mode",
            type=click.Choice(("train", "inference")),
            default="train",
            show_default=True,
            help="train, or ZeRO-3 inference (no optimizer; parameter offload runs models larger than the GPUs).",
        ),
        flag_option("--no-offload", help="Never offload to CPU or NVMe."),
        flag_option("--no-checkpointing", help="Never use activation checkpointing."),
        *card_memory_options(),
        click.option(
            "--nvme", callback=_size, metavar="SIZE", help="Assume an NVMe drive of this size for offload."
        ),
        click.option(
            "--expandable-segments/--no-expandable-segments",
            default=None,
            help="Plan for PyTorch's allocator with expandable segments (PYTORCH_CUDA_ALLOC_CONF="
            "expandable_segments:True): under memory pressure it keeps almost no cache, so a tight card fits larger "
            "micro-batches; near the card's limit it remaps pages every micro-step, which the plan charges and "
            "weighs. dswiz config writes the variable into launch.sh and dswiz-plan.json; dswiz launch sets it. "
            "Default: what this shell's PYTORCH_ALLOC_CONF / PYTORCH_CUDA_ALLOC_CONF say.",
        ),
        no_history_option(),
    ]

    return together(*options)


# --micro-batch / --grad-accum: a million sequences per GPU per step is past any real run (a typo, not a plan)
MAX_BATCH_FLAG = 1_000_000


def planning_model(params: Mapping[str, Any]) -> ModelSpec:
    """The model the planning flags name, trained as --finetune/--lora-* say (``planning_options``; --model given)."""
    from wizard.errors import DswizError
    from wizard.model import load_model_spec
    from wizard.planner import with_finetune

    tuning = finetune_from_flags(params)
    if tuning.uses_lora and params.get("mode") == "inference":
        raise DswizError(
            f"--finetune {tuning.mode} trains adapters, --mode inference trains nothing", "drop one of them"
        )
    return with_finetune(load_model_spec(params["model_text"]), tuning)


def no_gpu_error(report: HardwareReport, model_text: str, command: str) -> DswizError:
    """What `dswiz plan` and `dswiz config --model` say on a machine without a GPU (the same words: they once told
    two stories, "nothing to fit on" and "no strategy fits")."""
    from wizard.errors import DswizError

    reason = f" ({report.no_gpu_reason})" if report.no_gpu_reason else ""
    return DswizError(
        f"no NVIDIA GPU on this machine{reason}, so there is nothing to fit on",
        f"plan for the machine you will train on: dswiz {command} --model {model_text} --hardware 8xA100-80GB "
        "(or 2x8xH100, a YAML profile, or a `dswiz detect --json` saved there)",
    )


PLAN_WITHOUT_HISTORY = (
    "Leave the run history out: plan from the physics alone, not corrected by this hardware's recorded runs "
    "(`dswiz history`)."
)


def no_history_option(help_text: str = PLAN_WITHOUT_HISTORY) -> Callable[[F], F]:
    """--no-history: the one flag for "leave the run history out" (planning; recording in `dswiz launch`)."""
    return flag_option("--no-history", help=help_text)


def planning_request(
    params: Mapping[str, Any], *, stages: tuple[int, ...] = (), hardware: HardwareReport | None = None
) -> PlanRequest:
    """The planner's question from the planning flags (``planning_options``), the same for every command; with
    ``hardware``, calibrated by its run history unless --no-history."""
    from wizard.planner import PlanRequest
    from wizard.planner.types import ZERO_STAGES
    from wizard.service.choices import gpu_memory_for

    gpu_memory = gpu_memory_for(params["gpu_memory"], hardware)
    precision = params["precision"]
    request = PlanRequest(
        seq_len=params["seq_len"],
        global_batch=params["global_batch"],
        mode=params["mode"],
        precisions=() if precision == "auto" else (precision,),
        stages=tuple(sorted(set(stages))) or ZERO_STAGES,
        allow_offload=not params["no_offload"],
        allow_nvme=not params["no_offload"],
        allow_activation_checkpointing=not params["no_checkpointing"],
        safety_margin=params["margin"] / 100,
        gpu_memory_bytes=gpu_memory,
        nvme_bytes=params["nvme"],
        expandable_segments=planned_expandable_segments(params.get("expandable_segments")),
    )
    if hardware is None:
        return request
    from wizard.service.history import with_history

    return with_history(request, hardware, use=not params["no_history"])


def planned_expandable_segments(flag: bool | None) -> bool:
    """--expandable-segments / --no-expandable-segments, else what this shell's allocator settings say."""
    from wizard import alloc_conf

    return alloc_conf.planned_expandable_segments(flag, os.environ)


OFFLOAD_DEVICES = ("none", "cpu", "nvme")


def strategy_choice(params: Mapping[str, Any], *, stage: int | None) -> StrategyChoice:
    """The parts of a strategy that ``stage`` and the ``strategy_options`` flags fix; None where not given."""
    from wizard.errors import DswizError
    from wizard.planner.types import StrategyChoice

    for flag, key in (("--offload-optimizer", "offload_optimizer"), ("--offload-param", "offload_param")):
        if params.get("no_offload") and params.get(key) not in (None, "none"):
            raise DswizError(
                f"--no-offload and {flag} {params[key]} contradict each other",
                f"drop --no-offload to offload, or {flag} to keep everything on the GPUs",
            )
    if params.get("no_checkpointing") and params.get("activation_checkpointing"):
        raise DswizError(
            "--no-checkpointing and --activation-checkpointing contradict each other",
            "drop one of them (--no-activation-checkpointing fixes the strategy without checkpointing)",
        )
    return StrategyChoice(
        zero_stage=stage,
        offload_optimizer=params.get("offload_optimizer"),
        offload_param=params.get("offload_param"),
        activation_checkpointing=params.get("activation_checkpointing"),
        micro_batch_size=params.get("micro_batch"),
        gradient_accumulation_steps=params.get("grad_accum"),
    )


def strategy_options(f: F) -> F:
    """The flags that fix one part of a strategy (`dswiz config` writes it, `dswiz plan` evaluates it), unset
    unless given: --offload-optimizer, --offload-param, --micro-batch, --grad-accum and
    --activation-checkpointing/--no-activation-checkpointing. (--stage differs: `plan` takes it several times.)"""
    for option in reversed(
        (
            click.option(
                "--offload-optimizer",
                type=click.Choice(OFFLOAD_DEVICES),
                help="Offload optimizer state: none, cpu, nvme.",
            ),
            click.option(
                "--offload-param",
                type=click.Choice(OFFLOAD_DEVICES),
                help="Offload parameters (stage 3): none, cpu, nvme.",
            ),
            click.option(
                "--micro-batch", type=click.IntRange(1, MAX_BATCH_FLAG), help="Micro-batch per GPU."
            ),
            click.option(
                "--grad-accum", type=click.IntRange(1, MAX_BATCH_FLAG), help="Gradient accumulation steps."
            ),
            click.option(
                "--activation-checkpointing/--no-activation-checkpointing",
                default=None,
                help="Recompute activations in backward (HF gradient_checkpointing), or not.",
            ),
        )
    ):
        f = option(f)
    return f


def given_options(ctx: click.Context, values: Mapping[str, Any]) -> list[tuple[click.Option, Any]]:
    """The command's options the user gave (not None, not at their default, not a plain switch left off; the off
    side of an on/off pair such as --no-expandable-segments counts), with their values."""
    out = []
    for param in ctx.command.params:
        if not isinstance(param, click.Option) or param.name is None:
            continue
        value = values.get(param.name)
        if value is None or (value is False and not param.secondary_opts) or value == param.default:
            continue
        out.append((param, value))
    return out
