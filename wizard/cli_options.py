"""Click option shapes that several `dswiz` commands declare: one definition each, so the commands agree on the
name, the metavar and how a default is shown. Front-door code only (imports click); the core never imports it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from wizard.tuning import DEFAULT_LORA_ALPHA, DEFAULT_LORA_RANK, FINETUNE_MODES, FineTune, make_finetune

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


MODEL_HELP = (
    "A preset (llama-7b, gpt2-xl, mixtral-8x7b, ...), a Hugging Face hub id (meta-llama/Llama-3.1-8B: read from "
    "the local HF cache, else only its config.json is fetched; HF_HUB_OFFLINE and HF_TOKEN honoured), a checkpoint "
    "folder, a config.json, or numbers like params=7e9 or layers=32,hidden=4096,heads=32,vocab=32000."
)


def model_option(*names: str, required: bool, help: str = MODEL_HELP) -> Callable[[F], F]:
    """``--model``: what is trained (wizard.model.load_model_spec reads every form)."""
    return click.option(*names, required=required, metavar="NAME|HUB-ID|PATH|NUMBERS", help=help)


def finetune_options(f: F) -> F:
    """``--finetune full|lora|qlora`` with ``--lora-rank``, ``--lora-alpha``, ``--lora-targets``: which parameters
    train (``finetune_from_flags`` turns them into a wizard.tuning.FineTune)."""
    options = (
        click.option(
            "--finetune",
            type=click.Choice(FINETUNE_MODES),
            default="full",
            show_default=True,
            help="full: every weight trains; lora: PEFT adapters on a frozen 16-bit base; qlora: adapters on a "
            "frozen 4-bit NF4 base (bitsandbytes, double quantization).",
        ),
        _lora_number("--lora-rank", DEFAULT_LORA_RANK, "LoRA rank r (peft.LoraConfig's default)."),
        _lora_number(
            "--lora-alpha",
            DEFAULT_LORA_ALPHA,
            "LoRA alpha (scales the update by alpha/r; no effect on memory).",
        ),
        click.option(
            "--lora-targets",
            metavar="NAMES|all-linear",
            help="Modules to adapt, comma-separated (q_proj,v_proj), or all-linear. Default: PEFT's for the "
            "architecture (q_proj,v_proj for LLaMA/Mistral/Qwen2, c_attn for GPT-2).",
        ),
    )
    for option in reversed(options):
        f = option(f)
    return f


def _lora_number(name: str, default: int, help: str) -> Callable[[F], F]:
    return click.option(name, type=click.IntRange(1, 65536), default=default, show_default=True, help=help)


def finetune_from_flags(flags: dict[str, Any]) -> FineTune:
    """The FineTune the --finetune/--lora-* flags describe (DswizError for bad targets)."""
    return make_finetune(
        flags.get("finetune") or "full",
        rank=flags.get("lora_rank"),
        alpha=flags.get("lora_alpha"),
        targets=flags.get("lora_targets") or (),
    )
