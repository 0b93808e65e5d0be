"""bench/plan_accuracy.py without a GPU: the grid it would run, and the analysis of a raw results file (synthetic
rows whose errors are known), so the numbers in the GPU report are computed right."""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import asdict, replace
from pathlib import Path
from types import ModuleType

import pytest

from wizard.hardware.report import HostInfo
from wizard.model import load_model_spec

ROOT = Path(__file__).resolve().parents[2]
GiB = 1024**3


@pytest.fixture(scope="module")
def pa() -> ModuleType:
    spec = importlib.util.spec_from_file_location("plan_accuracy", ROOT / "bench" / "plan_accuracy.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["plan_accuracy"] = module
    spec.loader.exec_module(module)
    return module


def _h200(pa: ModuleType, world: int):  # type: ignore[no-untyped-def]
    hw = pa.smoke_hardware(world)
    return replace(hw, source="detected", host=HostInfo(logical_cores=16, ram_total_bytes=256 * GiB))


def test_grid_is_prioritised_and_covers_the_issue(pa: ModuleType) -> None:
    grid = pa.build_grid(_h200(pa, 1), 1, smoke=False)
    tiers = [c.tier for c in grid]
    assert tiers == sorted(tiers)
    assert len({c.key() for c in grid}) == len(grid)
    recs = [c for c in grid if any(t.startswith("rec:") for t in c.tags)]
    assert {c.model for c in recs} == set(pa.MODELS)
    assert {c.cap_gib for c in recs} == {None, 24, 40, 80}
    assert {c.zero_stage for c in grid} == {0, 1, 2, 3}
    assert any(c.offload_optimizer == "cpu" for c in grid) and any(c.checkpointing for c in grid)
    assert any(t.startswith("above:") for c in grid for t in c.tags)  # the fit boundary is probed
    # Two ranks: nothing predicted not to fit (a one-sided OOM would hang the other rank).
    two = pa.build_grid(_h200(pa, 2), 2, smoke=False)
    assert two and all(pa.predict_fits(_h200(pa, 2), c, 2) for c in two)


def _row(
    pa: ModuleType, hw, cfg, *, alloc_error: float, tps: float, status: str = "ok", reserved=None, step=1.0
):  # type: ignore[no-untyped-def]
    card = pa.card_for_cap(hw.min_gpu_memory_bytes, cfg.cap_gib, 1)
    pred = pa.predict(hw, load_model_spec(cfg.model), cfg, 1, pa.SEQ, card)
    measured = int(pred["allocated"] / (1 + alloc_error))  # so that predicted / measured - 1 == alloc_error
    return {
        "config": asdict(cfg),
        "world": 1,
        "seq_len": pa.SEQ,
        "status": status,
        "max_allocated": measured if status == "ok" else None,
        "max_reserved": reserved
        if reserved is not None
        else (int(measured * 1.05) if status == "ok" else None),
        "outside_allocator": 600 * 1024**2,
        "tokens_per_sec": tps if status == "ok" else None,
        "step_s": [step],
        "predicted": pred,
    }


def test_analysis_of_a_raw_file(pa: ModuleType, tmp_path: Path) -> None:
    hw = _h200(pa, 1)
    C = pa.Config
    rows = [
        _row(pa, hw, C("gpt2-medium", 2, micro_batch=4), alloc_error=0.05, tps=50_000),
        _row(
            pa,
            hw,
            C("gpt2-medium", 2, micro_batch=8, tags=("below:24GiB",)),
            alloc_error=-0.05,
            tps=60_000,
            reserved=20 * GiB,
        ),
        _row(
            pa,
            hw,
            C("gpt2-medium", 2, micro_batch=16, tags=("above:24GiB",)),
            alloc_error=0.10,
            tps=70_000,
            reserved=38 * GiB,
        ),
        _row(
            pa,
            hw,
            C("gpt2-medium", 1, checkpointing=True, micro_batch=20, cap_gib=24, tags=("rec:24GiB",)),
            alloc_error=0.0,
            tps=57_000,
        ),
        _row(
            pa,
            hw,
            C("gpt2-medium", 1, micro_batch=64, tags=("above:full",)),
            alloc_error=0.0,
            tps=0,
            status="oom",
        ),
    ]
    doc = {
        "world": 1,
        "date": "2026-11-30",
        "host": "h200",
        "optimizer": "x",
        "versions": {},
        "grid_size": 9,
        "hardware": hw.to_dict(),
        "rows": rows,
        "seq_len": pa.SEQ,
    }
    raw = tmp_path / "plan_accuracy-2026-11-30-1gpu.json"
    raw.write_text(json.dumps(doc))
    summary = pa.analyze([raw], tmp_path)
    run = summary["per_run"][0]
    assert run["ok"] == 4 and run["oom"] == 1
    # |errors| 0.05, 0.05, 0.10, 0.00 -> median 0.05
    assert run["memory_allocated_abs_error_median"] == pytest.approx(0.05, abs=1e-6)
    assert run["memory_allocated_signed_error_median"] == pytest.approx(0.025, abs=1e-6)
    (rec,) = run["recommendations"]
    # Rows that fit 24 GiB: the capped recommendation itself (57k) and the uncapped mbs 8 row (reserved 20 GiB, 60k).
    assert rec["best_tokens_per_sec"] == 60_000 and rec["ratio"] == pytest.approx(0.95)
    assert rec["grid_rows_fitting"] == 3  # mbs 4 (reserved ~13 GiB), mbs 8, the capped row
    sides = {(b["side"], b["card"]): b for b in run["boundaries"]}
    assert sides[("below", "24GiB")]["as_predicted"] and sides[("above", "24GiB")]["as_predicted"]
    assert sides[("above", "full")]["fitted"] is False
    targets = summary["targets"]
    assert targets["OOMs among recommended configs == 0"] == ("0", True)
    assert targets["memory error median <= 10 %"][1] is True
    assert (tmp_path / "plan_accuracy-2026-11-30-1gpu.md").read_text().count("| gpt2-medium |") >= 1
    assert json.loads((tmp_path / "plan_accuracy-2026-11-30-1gpu-summary.json").read_text())["targets"]


def test_compute_fit_recovers_a_known_efficiency_curve(pa: ModuleType) -> None:
    from wizard.throughput import flops_per_token

    hw = _h200(pa, 1)
    rows = []
    for name in ("gpt2-medium", "gpt2-xl", "gpt2"):
        m = load_model_spec(name)
        eff = 0.5 * m.hidden / (m.hidden + 1000)
        for mbs in (4, 8, 16):
            step = 0.05 + mbs * pa.SEQ * flops_per_token(m, pa.SEQ) / (989.4e12 * eff)
            cfg = pa.Config(name, 2, micro_batch=mbs)
            rows.append(_row(pa, hw, cfg, alloc_error=0.0, tps=mbs * pa.SEQ / step, step=step))
    fit = pa._fit_compute(rows)
    assert fit["COMPUTE_EFF_MAX"] == pytest.approx(0.5, rel=1e-6)
    assert fit["COMPUTE_EFF_HALF_HIDDEN"] == pytest.approx(1000, rel=1e-6)
    assert fit["per_model"]["gpt2-xl"]["fixed_seconds_per_step"] == pytest.approx(0.05, rel=1e-6)
