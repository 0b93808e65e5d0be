"""Bare ``dswiz``: the full-screen wizard, or the same questions as line prompts with ``--plain``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from wizard.errors import DswizError

if TYPE_CHECKING:
    from wizard.service import Choices, WizardService


def run_wizard(
    *,
    plain: bool,
    hardware: str | None,
    from_file: str | None,
    model_text: str = "",
    use_history: bool = True,
    gpu_memory_bytes: int | None = None,
    safety_margin: float | None = None,
) -> int:
    """``gpu_memory_bytes`` / ``safety_margin`` (--gpu-memory, --margin): what of each card the plan may use, the
    Hardware step's fields (the line prompts take them as given)."""
    from wizard.service import WizardService

    card: dict[str, object] = {}  # what was given; the rest as the defaults or an imported folder's plan say
    if gpu_memory_bytes is not None:
        card["gpu_memory_bytes"] = gpu_memory_bytes
    if safety_margin is not None:
        card["safety_margin"] = safety_margin

    from_path = Path(from_file) if from_file else None
    service = WizardService(use_history=use_history)
    if plain:
        from wizard.commands.config import is_interactive
        from wizard.prompts import run_prompts

        if not is_interactive():
            raise DswizError(
                "`dswiz --plain` asks questions, but there is no terminal to ask them in",
                "run it in an interactive terminal, or pass your choices as flags: "
                "dswiz config --yes --model gpt2-medium --out DIR",
            )

        return run_prompts(
            hardware_spec=hardware, from_file=from_path, model_text=model_text, service=service, prefill=card
        )
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise DswizError(
            "the full-screen wizard needs an interactive terminal",
            "run `dswiz --plain` for line prompts, or `dswiz config --yes …` for no questions at all",
        )
    from wizard.tui.factory import build_app

    app = build_app(
        hardware_spec=hardware,
        from_file=from_path,
        model_text=model_text,
        skip_answered=True,
        service=service,
        prefill=card,
    )
    written = app.run()
    if app.return_code:  # the app ended on an error it has printed
        return app.return_code
    if written:
        for line in written_summary(app.service, app.choices, [Path(p) for p in written]):
            print(line)
    return 0


def written_summary(service: WizardService, choices: Choices, written: list[Path]) -> list[str]:
    """What the terminal shows once the full-screen wizard has written: the files, the change the script needs for
    the chosen consumer (the Review step's words), and the command to run next."""
    lines = ["Wrote:", *(f"  {path}" for path in written)]
    files = {p.name: p.read_text(encoding="utf-8") for p in written if p.suffix == ".json"}
    lines += service.code_hint_lines(choices, files)
    lines.append(f"Next: {service.launch_command(choices)}")
    return lines
