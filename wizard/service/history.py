"""The run history as the planner's input: the corrections this hardware's recorded runs give (`dswiz history`).

Every front door that plans (`dswiz plan`, `dswiz config`, `dswiz probe`, the wizard) asks here, so that one flag
(`--no-history`) and one environment variable (``DSWIZ_HISTORY``; ``off`` turns the history off) mean the same
everywhere. Reading never creates the file, and a history that cannot be read is a note on the plan, not a failed
plan: the physics alone still answers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from runner.run_history import physics_figures, recorded_strategy
from wizard.errors import DswizError
from wizard.hardware.report import HardwareReport
from wizard.history.calibrate import Corrections, corrections
from wizard.history.record import Measurement, hardware_fingerprint
from wizard.history.store import HistoryStore, default_path
from wizard.model import ModelSpec
from wizard.planner import PlanRequest
from wizard.planner.calibration import physics_version


def calibration_for(hardware: HardwareReport) -> Corrections | None:
    """What the recorded runs on hardware like ``hardware`` correct; None when there are none to learn from."""
    path = default_path()
    if path is None or not path.is_file() or not hardware.gpus:
        return None
    fingerprint = hardware_fingerprint(hardware)
    key = fingerprint.key
    try:
        runs = HistoryStore(path).runs(hardware_key=key)
    except DswizError as e:
        return Corrections(hardware_key=key, families={}, problem=f"run history not used: {e.problem}")
    current, remade, stale = physics_version(), [], 0
    for r in runs:
        if r.physics == current:
            remade.append(r)
            continue
        again = predicted_again(r, hardware, current)
        if again is None:
            stale += 1
        else:
            remade.append(again)
    found = replace(corrections(remade, key, fingerprint.host_cpu), stale=stale)
    return found if found.runs or stale else None


def predicted_again(
    record: Measurement, hardware: HardwareReport, physics: str | None = None
) -> Measurement | None:
    """``record`` with the prediction of the physics of this dswiz, for a record predicted by other physics (an older
    dswiz, a recalibration): a factor learned against the old figures would correct the new ones by what the old
    physics got wrong. None where the record does not hold its model's spec, strategy and sequence (then it can only
    be left out); a record without a prediction (a launch without a plan) stays as it is. ``physics``: this dswiz's
    physics_version(), where the caller has it already."""
    if record.predicted.tokens_per_sec is None and record.predicted.peak_gpu_bytes is None:
        return record
    spec, seq = record.model_spec, record.seq_len
    strategy = recorded_strategy(record.strategy, hardware.gpus_per_node)
    if not isinstance(spec, Mapping) or strategy is None or not seq:
        return None
    try:
        figures = physics_figures(
            hardware,
            ModelSpec.from_dict(spec),
            strategy,
            seq,
            expandable_segments=record.expandable_segments,
            fused_optimizer=record.fused_optimizer,
        )
    except (DswizError, TypeError, ValueError, KeyError, AttributeError, ArithmeticError, RecursionError):
        return None  # a hand-edited or foreign record: left out
    return replace(record, predicted=figures, physics=physics or physics_version())


def with_history(request: PlanRequest, hardware: HardwareReport, *, use: bool = True) -> PlanRequest:
    """``request`` calibrated by the run history of ``hardware`` (unchanged with ``use=False``: --no-history)."""
    return replace(request, calibration=calibration_for(hardware) if use else None)
