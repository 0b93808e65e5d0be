"""The one place a ``WizardApp`` is built: by the CLI (``dswiz``), the tests and the screenshot script."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

from wizard.hardware.report import HardwareReport
from wizard.tui import core_bridge
from wizard.tui.choices import DEFAULT_OUT_DIR, Choices


def initial_choices(
    *,
    hardware: HardwareReport | None = None,
    hardware_spec: str | None = None,
    from_file: Path | None = None,
    out_dir: Path | None = None,
    core: ModuleType | Any = core_bridge,
) -> Choices:
    choices = Choices(hardware_spec=hardware_spec, hardware=hardware, out_dir=out_dir or DEFAULT_OUT_DIR)
    if from_file is not None:
        core.apply_import(choices, core.import_config(from_file))
        choices.imported_from = from_file
        if out_dir is None:
            choices.out_dir = from_file.parent
    return choices


def build_app(
    *,
    hardware: HardwareReport | None = None,
    hardware_spec: str | None = None,
    from_file: Path | None = None,
    out_dir: Path | None = None,
    core: ModuleType | Any = core_bridge,
    detect: bool = True,
) -> Any:
    """``hardware`` given: use it as is. Else ``hardware_spec`` (None = this machine) is read in a worker after
    the first frame, so detection never delays the screen."""
    from wizard.tui.app import WizardApp  # Textual only here: the factory's callers may not need it

    choices = initial_choices(
        hardware=hardware, hardware_spec=hardware_spec, from_file=from_file, out_dir=out_dir, core=core
    )
    return WizardApp(choices=choices, core=core, detect=detect)
