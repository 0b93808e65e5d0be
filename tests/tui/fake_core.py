"""What the wizard's tests fix: "this machine". NVML cannot exist here and a test must not depend on the machine that
runs it, so detecting this machine returns a report without a GPU; everything else is the real service (planner,
config writers, linter). Described hardware and saved reports (the real H200 ``dswiz detect --json`` in
tests/fixtures/hardware) go through the real ``wizard.hardware``."""

from __future__ import annotations

from pathlib import Path

from wizard.hardware import get_hardware
from wizard.hardware.report import HardwareReport
from wizard.service import WizardService

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hardware"
H200 = FIXTURES / "h200-detected.json"  # recorded on the H200 machine: 1 GPU, no NVMe drive, no libaio
A100X8 = FIXTURES / "described-8xA100-80GB.json"  # `dswiz detect --hardware 8xA100-80GB --json`
NO_GPU = HardwareReport(source="detected", no_gpu_reason="NVML: driver library not found")


def hardware_on_fixed_machine(spec: str | None) -> HardwareReport:
    return NO_GPU if spec is None else get_hardware(spec)


def service_on_fixed_machine() -> WizardService:
    return WizardService(hardware_on_fixed_machine)
