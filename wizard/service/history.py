"""The run history as the planner's input: the corrections this hardware's recorded runs give (`dswiz history`).

Every front door that plans (`dswiz plan`, `dswiz config`, `dswiz probe`, the wizard) asks here, so that one flag
(`--no-history`) and one environment variable (``DSWIZ_HISTORY``; ``off`` turns the history off) mean the same
everywhere. Reading never creates the file, and a history that cannot be read is a note on the plan, not a failed
plan: the physics alone still answers.
"""

from __future__ import annotations

from dataclasses import replace

from wizard.errors import DswizError
from wizard.hardware.report import HardwareReport
from wizard.history.calibrate import Corrections, corrections
from wizard.history.record import hardware_fingerprint
from wizard.history.store import HistoryStore, default_path
from wizard.planner import PlanRequest


def calibration_for(hardware: HardwareReport) -> Corrections | None:
    """What the recorded runs on hardware like ``hardware`` correct; None when there are none to learn from."""
    path = default_path()
    if path is None or not path.is_file() or not hardware.gpus:
        return None
    key = hardware_fingerprint(hardware).key
    try:
        runs = HistoryStore(path).runs(hardware_key=key)
    except DswizError as e:
        return Corrections(hardware_key=key, families={}, problem=f"run history not used: {e.problem}")
    found = corrections(runs, key)
    return found if found.runs else None


def with_history(request: PlanRequest, hardware: HardwareReport, *, use: bool = True) -> PlanRequest:
    """``request`` calibrated by the run history of ``hardware`` (unchanged with ``use=False``: --no-history)."""
    return replace(request, calibration=calibration_for(hardware) if use else None)
