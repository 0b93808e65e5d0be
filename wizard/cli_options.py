"""Click option shapes that several `dswiz` commands declare: one definition each, so the commands agree on the
name, the metavar and how a default is shown. Front-door code only (imports click); the core never imports it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:  # the planner is imported when a command plans, not when `--help` is drawn
    from wizard.planner import PlanRequest

F = TypeVar("F", bound=Callable[..., Any])


def python_option(help: str) -> Callable[[F], F]:
    """``--python PY``: the training environment's interpreter (each command says what it uses it for)."""
    return click.option("--python", "python", metavar="PY", help=help)


def flag_option(*names: str, help: str) -> Callable[[F], F]:
    """An on/off switch, off unless given."""
    return click.option(*names, is_flag=True, help=help)


def choice_option(*names: str, choices: tuple[str, ...], default: str, help: str) -> Callable[[F], F]:
    """One of fixed choices, with a default that ``--help`` shows."""
    return click.option(*names, type=click.Choice(choices), default=default, show_default=True, help=help)


def defaulted_option(name: str, kind: type[Any], default: Any, metavar: str, help: str) -> Callable[[F], F]:
    """A number with a default that ``--help`` shows."""
    return click.option(name, type=kind, default=default, show_default=True, metavar=metavar, help=help)


# ------------------------------------------------------------------ planning: the flags `dswiz plan` and `config` share

PRECISION_CHOICES = ("auto", "bf16", "fp16", "fp32")


def _size(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    if value is None:
        return None
    from wizard.units import parse_size

    try:
        return parse_size(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


def model_option(*, required: bool) -> Callable[[F], F]:
    return click.option(
        "--model",
        "-m",
        "model_text",
        required=required,
        metavar="NAME|CONFIG|NUMBERS",
        help="A preset (llama-7b, gpt2-xl, mixtral-8x7b, ...), a local config.json, or numbers like "
        "params=7e9 or layers=32,hidden=4096,heads=32,vocab=32000.",
    )


def hardware_option() -> Callable[[F], F]:
    return click.option(
        "--hardware",
        metavar="SPEC|FILE",
        help="Plan for described hardware: 8xA100-80GB, 2x8xH100,ram=1TiB,nvme=3.5TB, a YAML profile or a "
        "saved `dswiz detect --json`. Default: this machine.",
    )


def planning_options(*, model_required: bool) -> Callable[[F], F]:
    """What the planner is asked (``planning_request``): model, hardware, sequence, batch, precision, mode, what it
    may use (offload, checkpointing) and the memory it plans against. ``dswiz plan`` and ``dswiz config`` both."""
    options = [
        model_option(required=model_required),
        hardware_option(),
        click.option(
            "--seq-len",
            type=click.IntRange(1, 10_000_000),
            help="Tokens per sample (default: the model's context, at most 2048).",
        ),
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
        click.option(
            "--margin",
            type=click.FloatRange(0, 50),
            default=5.0,
            show_default=True,
            help="Percent of each GPU's memory to keep free.",
        ),
        click.option(
            "--gpu-memory",
            callback=_size,
            metavar="SIZE",
            help="Plan for this much memory per GPU (e.g. 24GiB) instead of the card's total.",
        ),
        click.option(
            "--nvme", callback=_size, metavar="SIZE", help="Assume an NVMe drive of this size for offload."
        ),
    ]

    def apply(f: F) -> F:
        for option in reversed(options):
            f = option(f)
        return f

    return apply


def planning_request(params: Mapping[str, Any], *, stages: tuple[int, ...] = ()) -> PlanRequest:
    """The planner's question from the planning flags (``planning_options``), the same for every command."""
    from wizard.planner import PlanRequest

    precision = params["precision"]
    return PlanRequest(
        seq_len=params["seq_len"],
        global_batch=params["global_batch"],
        mode=params["mode"],
        precisions=() if precision == "auto" else (precision,),
        stages=tuple(sorted(set(stages))) or (0, 1, 2, 3),
        allow_offload=not params["no_offload"],
        allow_nvme=not params["no_offload"],
        allow_activation_checkpointing=not params["no_checkpointing"],
        safety_margin=params["margin"] / 100,
        gpu_memory_bytes=params["gpu_memory"],
        nvme_bytes=params["nvme"],
    )
