"""The core the wizard's tests drive: the real ``wizard.tui.core_bridge`` (planner, config writers, linter), with
one seam -- what "this machine" is. NVML cannot exist here and a test must not depend on the machine that runs it,
so detecting this machine returns a fixed report without a GPU. Described hardware and saved reports (the real H200
``dswiz detect --json`` in tests/fixtures/hardware) go through the real ``wizard.hardware``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from wizard.hardware.report import HardwareReport
from wizard.tui import core_bridge

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hardware"
H200 = FIXTURES / "h200-detected.json"  # recorded on the H200 machine: 1 GPU, no NVMe drive, no libaio
A100X8 = FIXTURES / "described-8xA100-80GB.json"  # `dswiz detect --hardware 8xA100-80GB --json`
NO_GPU = HardwareReport(source="detected", no_gpu_reason="NVML: driver library not found")


class CoreOnFixedMachine:
    """``core_bridge`` with "this machine" fixed to ``NO_GPU``."""

    def get_hardware(self, spec: str | None) -> HardwareReport:
        if spec is None:
            return NO_GPU
        return core_bridge.get_hardware(spec)

    def __getattr__(self, name: str) -> Any:
        return getattr(core_bridge, name)
