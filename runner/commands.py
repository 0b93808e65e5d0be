"""`dswiz launch` and `dswiz monitor` (placeholders until their issues land)."""

from __future__ import annotations

import click

from wizard.errors import DswizError


@click.command()
def launch() -> None:
    """Not available yet."""
    raise DswizError("`dswiz launch` is not implemented yet", "see README.md for what works today")


@click.command()
def monitor() -> None:
    """Not available yet."""
    raise DswizError("`dswiz monitor` is not implemented yet", "see README.md for what works today")
