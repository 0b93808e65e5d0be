"""`dswiz plan` (placeholder until its issue lands)."""

from __future__ import annotations

import click

from wizard.errors import DswizError


@click.command()
def plan() -> None:
    """Not available yet."""
    raise DswizError("`dswiz plan` is not implemented yet", "see README.md for what works today")
