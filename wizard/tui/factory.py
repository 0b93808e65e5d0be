"""The one place a ``WizardApp`` is built: by the CLI (``dswiz``), the tests and the screenshot script."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wizard.hardware.report import HardwareReport
from wizard.service import Choices, WizardService, initial_choices

if TYPE_CHECKING:  # Textual is imported only when an app is built: the factory's callers may not need it
    from wizard.tui.app import WizardApp


def build_app(
    *,
    hardware: HardwareReport | None = None,
    hardware_spec: str | None = None,
    from_file: Path | None = None,
    out_dir: Path | None = None,
    service: WizardService | None = None,
    detect: bool = True,
    model_text: str = "",
    skip_answered: bool = False,
    prefill: Mapping[str, Any] | None = None,
) -> WizardApp:
    """``hardware`` given: use it as is. Else ``hardware_spec`` (None = this machine) is read in a worker after
    the first frame, so detection never delays the screen. Described hardware (and ``model_text``) answer their
    steps: with ``skip_answered`` (the CLI) the wizard opens on the first step still to answer
    (``WizardApp.skip_answered_steps``). ``prefill``: ``Choices`` fields the command line set (--gpu-memory,
    --margin)."""
    from wizard.tui.app import WizardApp

    service = service or WizardService()
    choices: Choices = initial_choices(
        service,
        hardware=hardware,
        hardware_spec=hardware_spec,
        from_file=from_file,
        out_dir=out_dir,
        model_text=model_text,
    )
    for name, value in (prefill or {}).items():
        setattr(choices, name, value)
    return WizardApp(choices=choices, service=service, detect=detect, skip_answered=skip_answered)
