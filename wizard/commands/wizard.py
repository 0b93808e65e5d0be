"""Bare `dswiz`: the full-screen wizard, or line prompts with --plain (placeholder until the TUI issue lands)."""

from __future__ import annotations

from wizard.errors import DswizError


def run_wizard(*, plain: bool, hardware: str | None, from_file: str | None) -> None:
    raise DswizError(
        "the full-screen wizard is not built yet",
        "use `dswiz detect` for now; `dswiz --help` lists the commands",
    )
