"""The architecture rule, made executable: the pure core imports no terminal UI library and no torch; pynvml only
inside wizard/hardware/. Each core module is imported in a fresh interpreter and sys.modules is inspected."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

UI_AND_TORCH = ("textual", "rich", "questionary", "torch", "deepspeed", "accelerate", "transformers")

# Packages whose every module is below the front doors (the service, the core, the runner's engine). Front doors
# (cli, commands, tui, prompts, monitor) are excluded.
CORE_PACKAGES = (
    "wizard.config",
    "wizard.config.lint",
    "wizard.planner",
    "wizard.service",
    "runner.metrics",
    "runner.job",
)
CORE_MODULES = (
    "wizard.errors",
    "wizard.findings",
    "wizard.units",
    "wizard.fsio",
    "wizard.strategy",
    "wizard.hardware",
    "wizard.hardware.report",
    "wizard.hardware.catalog",
    "wizard.hardware.described",
    "wizard.hardware.detect",
    "wizard.hardware.nvml",
    "wizard.hardware.host",
    "wizard.hardware.software",
    "wizard.hardware.visibility",
    "wizard.hardware.hazards",
    "wizard.hardware.gpu_sampler",
    "wizard.model",
    "wizard.model_presets",
    "wizard.planner.calibration",
    "wizard.planner.memory",
    "wizard.planner.throughput",
    "wizard.planner",
    "wizard.planner.types",
    "wizard.planner.feasibility",
    "wizard.planner.explain",
    "wizard.planner.search",
    "wizard.planner.serialize",
    "wizard.checkpoints",
    "wizard.hints",
    "wizard.replan",
    "wizard.launch_command",
    "runner.rundir",
    "runner.configdir",
    "runner.phases",
    "runner.tracebacks",
    "runner.logfold",
    "runner.verdict",
    "runner.metrics.parse",
)


def _existing(modules: tuple[str, ...]) -> list[str]:
    out = []
    for name in modules:
        rel = Path(*name.split("."))
        if (ROOT / rel).with_suffix(".py").exists() or (ROOT / rel / "__init__.py").exists():
            out.append(name)
    for pkg in CORE_PACKAGES:
        path = ROOT / Path(*pkg.split("."))
        if (path / "__init__.py").exists():
            out.append(pkg)
            out.extend(f"{pkg}.{m.name}" for m in pkgutil.iter_modules([str(path)]))
    return sorted(set(out))


def _imported_after(module: str) -> set[str]:
    code = f"import sys, json; import {module}; print(json.dumps(sorted(sys.modules)))"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("module", _existing(CORE_MODULES))
def test_core_module_imports_no_ui_and_no_torch(module: str) -> None:
    loaded = _imported_after(module)
    bad = sorted(m for m in loaded if m.split(".")[0] in UI_AND_TORCH)
    assert not bad, f"{module} pulled in {bad}"
    if not module.startswith("wizard.hardware"):
        assert "pynvml" not in loaded, f"{module} imports pynvml outside wizard/hardware/"


def test_the_rule_covers_the_core() -> None:
    # Guards the guard: if the core modules were renamed, the parametrized test above would silently shrink.
    assert len(_existing(CORE_MODULES)) >= 6


def test_cli_help_does_not_import_torch() -> None:
    code = (
        "import sys, json\n"
        "from wizard.cli import cli\n"
        "try:\n    cli.main(['--help'], standalone_mode=False)\nexcept SystemExit:\n    pass\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    loaded = set(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert not {"torch", "deepspeed", "textual"} & loaded
