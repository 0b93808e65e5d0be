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
