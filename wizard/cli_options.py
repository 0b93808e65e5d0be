"""Click option shapes that several `dswiz` commands declare: one definition each, so the commands agree on the
name, the metavar and how a default is shown. Front-door code only (imports click); the core never imports it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

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


OFFLOAD_DEVICES = ("none", "cpu", "nvme")


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
            click.option("--micro-batch", type=click.IntRange(min=1), help="Micro-batch per GPU."),
            click.option("--grad-accum", type=click.IntRange(min=1), help="Gradient accumulation steps."),
            click.option(
                "--activation-checkpointing/--no-activation-checkpointing",
                default=None,
                help="Recompute activations in backward (HF gradient_checkpointing), or not.",
            ),
        )
    ):
        f = option(f)
    return f
