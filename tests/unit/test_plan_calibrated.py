"""The run history corrects the plan: `dswiz plan`/`config` read this hardware's recorded runs (a real SQLite history
file), move their predictions toward what was measured, say so, and `--no-history` plans from the physics alone.

The records are written through the history's own store: they stand for GPU runs, which cannot happen on this
machine (the launch -> record path is tested with real DeepSpeed in tests/integration/test_launch_history.py).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wizard.config.sidecar import read_sidecar
from wizard.hardware import get_hardware
from wizard.history.calibrate import MEMORY_BOUNDS, TOKENS_BOUNDS, corrections
from wizard.history.record import Figures, Measurement, hardware_fingerprint
from wizard.history.store import HistoryStore
from wizard.model import load_model_spec
from wizard.planner import Plan, PlanRequest, evaluate, plan
from wizard.planner.calibration import physics_version
from wizard.strategy import Strategy

HW_SPEC = "1xH100-80GB"
MODEL = "gpt2-xl"
Z2 = {"stage": 2, "offload_optimizer": "none", "offload_param": "none"}
LLAMA_1B = "type=llama,name=llama-1b,layers=22,hidden=2048,heads=32,kv_heads=4,ffn=5632,vocab=32000,seq=2048"


def _record(db: Path, *, tokens_ratio: float, memory_ratio: float, runs: int = 3) -> None:
    """``runs`` finished runs on HW_SPEC, in the history file ``db``, that measured ``ratio`` x the prediction."""
    store = HistoryStore(db)
    for run in _runs(tokens_ratio, memory_ratio, n=runs):
        store.put(run)


def _dswiz(*args: str, db: Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DSWIZ_HISTORY": str(db)}
    return subprocess.run(
        [sys.executable, "-m", "wizard", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=cwd,
    )


def _z2(doc: dict) -> dict:
    return next(
        c
        for c in doc["candidates"]
        if c["zero_stage"] == 2 and c["offload_optimizer"] == "none" and not c["activation_checkpointing"]
    )


# ------------------------------------------------------------------------------------------ the planner itself


def _calibrated_request(runs: list[Measurement]) -> PlanRequest:
    key = hardware_fingerprint(get_hardware(HW_SPEC)).key
    return PlanRequest(calibration=corrections(runs, key))


def _runs(tokens_ratio: float, memory_ratio: float, n: int = 4) -> list[Measurement]:
    """``n`` finished ZeRO-2 runs on HW_SPEC (each its own record) that measured ``ratio`` x the prediction."""
    hw = hardware_fingerprint(get_hardware(HW_SPEC))
    measured = Figures(tokens_per_sec=1000.0 * tokens_ratio, peak_gpu_bytes=int((40 << 30) * memory_ratio))
    predicted = Figures(tokens_per_sec=1000.0, peak_gpu_bytes=40 << 30)
    return [
        Measurement(
            hw,
            {"name": MODEL},
            Z2,
            predicted=predicted,
            measured=measured,
            outcome="success",
            physics=physics_version(),
        )
        for _ in range(n)
    ]


def test_a_strategy_is_predicted_toward_its_familys_measurements() -> None:
    hw, model = get_hardware(HW_SPEC), load_model_spec(MODEL)
    s = Strategy(zero_stage=2, precision="bf16", micro_batch_size=2, gpus_per_node=1)
    physics = evaluate(hw, model, s)
    slower = evaluate(hw, model, s, _calibrated_request(_runs(0.8, 1.1)))
    t, m = slower.predicted.tokens_factor, slower.predicted.memory_factor
    assert 0.8 < t < 1.0 and 1.0 < m < 1.1  # part of the way (shrunk toward the prior)
    assert math.isclose(slower.predicted.tokens_per_sec, physics.predicted.tokens_per_sec * t, rel_tol=1e-9)
    assert math.isclose(slower.predicted.step_seconds, physics.predicted.step_seconds / t, rel_tol=1e-9)
    assert abs(slower.predicted.gpu_bytes - physics.predicted.gpu_bytes * m) <= 1
    # the correction is a named part of the GPU memory, so the breakdown still adds up to what has to fit
    parts = dict(slower.predicted.breakdown)
    assert parts["history_correction"] == slower.predicted.gpu_bytes - physics.predicted.gpu_bytes
    assert math.isclose(
        sum(slower.predicted.time_parts[i][1] for i in range(len(slower.predicted.time_parts))),
        sum(v for _, v in physics.predicted.time_parts) / t,
        rel_tol=1e-9,
    )


def test_slow_host_bound_runs_correct_only_the_host_bound_candidates() -> None:
    """Runs the planner put on the host (micro-batch 1 of a ~1B model: half their step waits on Python) that read 30 %
    slow correct the same family's micro-batch 1, never its micro-batch 16, which the GPU sets."""
    from wizard.planner.throughput import estimate_throughput, host_bound

    hw, model = get_hardware(HW_SPEC), load_model_spec(LLAMA_1B)
    small, large = (
        Strategy(zero_stage=2, precision="bf16", micro_batch_size=b, gpus_per_node=1) for b in (1, 16)
    )
    assert host_bound(estimate_throughput(hw, model, small, 1024))
    assert not host_bound(estimate_throughput(hw, model, large, 1024))
    slow = [
        replace(r, predicted=replace(r.predicted, host_bound=True)) for r in _runs(0.7, 1.0)
    ]  # recorded with the prediction's flag
    request = replace(_calibrated_request(slow), seq_len=1024)
    assert evaluate(hw, model, small, request).predicted.tokens_factor < 0.8
    assert evaluate(hw, model, large, request).predicted.tokens_factor == 1.0


def test_more_memory_measured_means_a_smaller_micro_batch_fits() -> None:
    hw, model = get_hardware(HW_SPEC), load_model_spec(MODEL)
    physics = plan(hw, model)
    hungry = plan(hw, model, _calibrated_request(_runs(1.0, 1.2, n=20)))

    def z2_batch(p: Plan) -> int:
        return next(
            c.max_micro_batch
            for c in p.candidates
            if c.strategy.zero_stage == 2
            and c.strategy.offload_optimizer == "none"
            and c.strategy.activation_checkpointing
        )

    assert 0 < z2_batch(hungry) < z2_batch(physics)
    for c in hungry.candidates:  # every fitting candidate still fits with the corrected memory
        if c.fits:
            assert c.predicted.gpu_needed_bytes <= hungry.gpu_capacity_bytes * (
                1 - hungry.request.safety_margin
            )


def test_families_without_runs_take_the_machines_correction_and_the_plan_says_so() -> None:
    hw, model = get_hardware(HW_SPEC), load_model_spec(MODEL)
    p = plan(hw, model, _calibrated_request(_runs(0.7, 1.0)))
    own = next(
        c
        for c in p.candidates
        if c.strategy.zero_stage == 2
        and c.strategy.offload_optimizer == "none"
        and not c.strategy.activation_checkpointing
    )
    other = next(
        c for c in p.candidates if c.strategy.zero_stage == 3 and c.strategy.offload_optimizer == "cpu"
    )
    assert (
        own.predicted.tokens_factor == other.predicted.tokens_factor < 1.0
    )  # one family measured: the machine
    assert any(n.startswith("calibrated by 4 runs on this hardware") for n in p.notes)
    assert not any("calibrated" in n for n in plan(hw, model).notes)


@pytest.mark.parametrize("ratio", [0.01, 0.3, 3.0, 100.0])
def test_corrections_never_leave_their_bounds_in_the_plan(ratio: float) -> None:
    hw, model = get_hardware(HW_SPEC), load_model_spec(MODEL)
    p = plan(hw, model, _calibrated_request(_runs(ratio, ratio, n=50)))
    for c in p.candidates:
        assert TOKENS_BOUNDS[0] <= c.predicted.tokens_factor <= TOKENS_BOUNDS[1]
        assert MEMORY_BOUNDS[0] <= c.predicted.memory_factor <= MEMORY_BOUNDS[1]


# --------------------------------------------------------------------------------------------- at the CLI


def test_dswiz_plan_reads_the_history_and_no_history_turns_it_off(tmp_path: Path) -> None:
    db = tmp_path / "history.sqlite3"
    args = ("plan", "--model", MODEL, "--hardware", HW_SPEC, "--all", "--json")
    before = _dswiz(*args, db=db)
    assert before.returncode == 0, before.stderr
    assert not db.exists()  # planning reads the history, never creates it
    _record(db, tokens_ratio=0.6, memory_ratio=1.0)
    after = _dswiz(*args, db=db)
    off = _dswiz(*args, "--no-history", db=db)
    assert after.returncode == 0 and off.returncode == 0, after.stderr + off.stderr
    b, a, o = (json.loads(x.stdout) for x in (before, after, off))
    assert _z2(a)["predicted"]["tokens_per_sec"] < 0.9 * _z2(b)["predicted"]["tokens_per_sec"]
    assert _z2(a)["predicted"]["history_factors"]["tokens_per_sec"] < 0.9
    assert _z2(o) == _z2(b)  # --no-history: the physics alone, exactly
    assert any(n.startswith("calibrated by 3 runs") for n in a["notes"])
    assert not any("calibrated" in n for n in o["notes"])
    text = _dswiz("plan", "--model", MODEL, "--hardware", HW_SPEC, db=db)
    assert "calibrated by 3 runs on this hardware" in text.stdout and "median error tokens/s" in text.stdout


def test_other_hardware_is_not_calibrated_by_these_runs(tmp_path: Path) -> None:
    db = tmp_path / "history.sqlite3"
    _record(db, tokens_ratio=0.6, memory_ratio=1.0)
    other = _dswiz("plan", "--model", MODEL, "--hardware", "1xA100-80GB", "--json", db=db)
    assert other.returncode == 0, other.stderr
    assert not any("calibrated" in n for n in json.loads(other.stdout)["notes"])


def test_the_written_plan_keeps_the_factor_so_the_next_record_compares_the_physics(tmp_path: Path) -> None:
    from runner.run_history import entry_at_start

    db = tmp_path / "history.sqlite3"
    _record(db, tokens_ratio=0.6, memory_ratio=1.1)
    flags = ("config", "--yes", "--model", MODEL, "--hardware", HW_SPEC, "--stage", "2")
    assert _dswiz(*flags, "--out", str(tmp_path / "cal"), db=db).returncode == 0
    assert _dswiz(*flags, "--out", str(tmp_path / "raw"), "--no-history", db=db).returncode == 0
    cal, raw = read_sidecar(tmp_path / "cal"), read_sidecar(tmp_path / "raw")
    assert cal is not None and raw is not None and cal.predicted is not None and raw.predicted is not None
    assert cal.strategy.zero_stage == raw.strategy.zero_stage == 2
    assert cal.predicted.tokens_factor < 1.0 < cal.predicted.memory_factor
    assert raw.predicted.tokens_factor == raw.predicted.memory_factor == 1.0
    hw = hardware_fingerprint(get_hardware(HW_SPEC))
    entry = entry_at_start(run_id="r", run_dir=tmp_path, hardware=hw, sidecar=cal, applies=True)
    # the record holds the physics' prediction (the factor divided out), so corrections never compound
    physics = cal.predicted.tokens_per_sec / cal.predicted.tokens_factor
    assert entry.predicted.tokens_per_sec == pytest.approx(physics, rel=1e-4)  # the plan's figure is rounded


def test_an_unreadable_history_is_a_note_not_a_failed_plan(tmp_path: Path) -> None:
    db = tmp_path / "history.sqlite3"
    db.write_bytes(b"this is not sqlite" * 100)
    proc = _dswiz("plan", "--model", MODEL, "--hardware", HW_SPEC, "--json", db=db)
    assert proc.returncode == 0, proc.stderr
    notes = json.loads(proc.stdout)["notes"]
    assert any(n.startswith("run history not used:") and "not a readable SQLite file" in n for n in notes)


def test_the_wizard_plans_with_the_history_unless_told_not_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wizard.service import WizardService
    from wizard.service.wizard_service import initial_choices

    db = tmp_path / "history.sqlite3"
    _record(db, tokens_ratio=0.6, memory_ratio=1.0)
    monkeypatch.setenv("DSWIZ_HISTORY", str(db))
    model = load_model_spec(MODEL)
    notes = {}
    for use in (True, False):
        service = WizardService(use_history=use)
        choices = initial_choices(service, hardware=get_hardware(HW_SPEC))
        notes[use] = service.plan(choices, model).notes
    assert any(n.startswith("calibrated by 3 runs") for n in notes[True])
    assert not any("calibrated" in n for n in notes[False])


def test_config_and_check_say_and_use_the_calibration_as_plan_does(tmp_path: Path) -> None:
    db = tmp_path / "history.sqlite3"
    _record(db, tokens_ratio=0.6, memory_ratio=1.0)
    made = _dswiz(
        "config", "--yes", "--model", MODEL, "--hardware", HW_SPEC, "--out", str(tmp_path / "c"), db=db
    )
    assert made.returncode == 0, made.stderr
    assert "note: calibrated by 3 runs on this hardware" in made.stderr
    args = ("check", str(tmp_path / "c" / "ds_config.json"), "--model", MODEL, "--hardware", HW_SPEC)
    checked, physics = _dswiz(*args, "--json", db=db), _dswiz(*args, "--json", "--no-history", db=db)

    def predicted(proc: subprocess.CompletedProcess[str]) -> float:
        doc = json.loads(proc.stdout)
        return float(doc["prediction"]["predicted"]["tokens_per_sec"])

    assert predicted(checked) < 0.9 * predicted(physics)


def test_runs_predicted_by_other_physics_are_predicted_again_or_left_out(tmp_path: Path) -> None:
    """A dswiz upgrade changes the physics: a record's stored prediction then says what the old physics got wrong.
    Records that hold their model's spec are predicted again with today's physics (so a run that measured exactly
    today's prediction teaches no correction); records without one are left out, and the plan says so."""
    from wizard.service.history import calibration_for

    hw_report, model = get_hardware(HW_SPEC), load_model_spec(MODEL)
    s = Strategy(zero_stage=2, micro_batch_size=8)
    now = evaluate(hw_report, model, s, PlanRequest(seq_len=1024)).predicted
    hw = hardware_fingerprint(hw_report)
    strategy = {"stage": 2, "offload_optimizer": "none", "offload_param": "none", "precision": "bf16",
                "micro_batch": 8, "grad_accum": 1, "activation_checkpointing": False, "mode": "train",
                "world_size": 1}  # fmt: skip
    measured = Figures(tokens_per_sec=now.tokens_per_sec, peak_gpu_bytes=now.gpu_bytes)
    old = Figures(
        tokens_per_sec=now.tokens_per_sec * 1.3, peak_gpu_bytes=now.gpu_bytes
    )  # the old physics: +30 %
    with_spec = [
        Measurement(
            hw,
            {"name": MODEL},
            strategy,
            predicted=old,
            measured=measured,
            seq_len=1024,
            outcome="success",
            physics="older",
            model_spec=model.to_dict(),
        )
        for _ in range(3)
    ]
    db = tmp_path / "h.sqlite3"
    store = HistoryStore(db)
    for r in with_spec:
        store.put(r)
    os.environ["DSWIZ_HISTORY"] = str(db)
    try:
        c = calibration_for(hw_report)
        assert c is not None and c.runs == 3 and c.stale == 0
        # predicted again: today's physics was right, so nothing is corrected (the stored +30 % would give 0.77)
        assert c.for_family("z2-opt:none-param:none").tokens_per_sec.value == pytest.approx(1.0, abs=1e-6)
        bare = Measurement(hw, {"name": MODEL}, strategy, predicted=old, measured=measured, seq_len=1024,
                           outcome="success", physics="older")  # fmt: skip
        store.put(bare)
        c = calibration_for(hw_report)
        assert c is not None and c.runs == 3 and c.stale == 1
        assert "1 run predicted by an older dswiz left out" in (c.summary() or "")
    finally:
        del os.environ["DSWIZ_HISTORY"]


@given(
    spec=st.dictionaries(
        st.sampled_from(
            ["name", "layers", "hidden", "heads", "vocab", "finetune", "notes", "total_params", "kv_heads"]
        ),
        st.one_of(
            st.none(),
            st.integers(-5, 10**13),
            st.text(max_size=5),
            st.lists(st.integers(), max_size=3),
            st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
        ),
    ),
    strategy=st.dictionaries(
        st.sampled_from(
            ["stage", "precision", "micro_batch", "world_size", "grad_accum", "offload_optimizer"]
        ),
        st.one_of(st.none(), st.integers(-3, 9), st.text(max_size=4)),
    ),
)
@settings(max_examples=60, deadline=None)
def test_a_foreign_record_is_predicted_again_or_left_out_never_an_error(spec: dict, strategy: dict) -> None:
    from wizard.service.history import predicted_again

    hw_report = get_hardware(HW_SPEC)
    base = {**load_model_spec(MODEL).to_dict(), **spec}
    record = Measurement(hardware_fingerprint(hw_report), {"name": MODEL}, strategy, seq_len=1024, physics="older",
                         predicted=Figures(tokens_per_sec=1.0), model_spec=base)  # fmt: skip
    again = predicted_again(record, hw_report)
    assert again is None or again.physics == physics_version()
