"""Bare ``dswiz``: the full-screen wizard, or the same questions as line prompts with ``--plain``."""

from __future__ import annotations

import sys
from pathlib import Path

from wizard.errors import DswizError


def run_wizard(*, plain: bool, hardware: str | None, from_file: str | None) -> int:
    from_path = Path(from_file) if from_file else None
    if plain:
        from wizard.prompts import run_prompts

        return run_prompts(hardware_spec=hardware, from_file=from_path)
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise DswizError(
            "the full-screen wizard needs an interactive terminal",
            "run `dswiz --plain` for line prompts, or `dswiz config --yes …` for no questions at all",
        )
    from wizard.tui.factory import build_app

    app = build_app(hardware_spec=hardware, from_file=from_path)
    written = app.run()
    if written:
        print("Wrote:")
        for path in written:
            print(f"  {path}")
        files = {p.name: p.read_text(encoding="utf-8") for p in map(Path, written) if p.suffix == ".json"}
        for line in app.service.code_hint_lines(app.choices, files):
            print(line)
        print(f"Next: {app.service.launch_command(app.choices)}")
    return 0
