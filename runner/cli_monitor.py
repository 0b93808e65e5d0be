"""`dswiz monitor` (placeholder until its issue lands)."""

from __future__ import annotations

import click

from wizard.errors import DswizError


@click.command()
def monitor() -> None:
    """Not available yet."""
    raise DswizError("`dswiz monitor` is not implemented yet", "see README.md for what works today")
