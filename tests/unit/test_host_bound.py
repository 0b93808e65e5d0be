"""A step that waits mostly on the host runs as fast as the CPU and the scheduler let it: on one H200 machine the same
host-bound config ran up to 1.41x apart from one process to the next, a GPU-bound one within 1 %
(bench/results/plan_accuracy-2026-12-04-1gpu-thin-thin4.json). The plan says so where its step is host-bound."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from wizard.hardware.report import HardwareReport
from wizard.planner import PlanRequest, evaluate
from wizard.planner import calibration as cal
from wizard.planner.throughput import estimate_throughput, host_share

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"


def _readings(doc: dict, model: str, stage: int, micro_batch: int) -> list[float]:  # type: ignore[type-arg]
    return sorted(
        r["tokens_per_sec"]
        for r in doc["rows"]
        if (r["config"]["model"], r["config"]["zero_stage"], r["config"]["micro_batch"])
        == (model, stage, micro_batch)
    )


def test_the_spread_quoted_is_the_one_machines_readings(bench_script: Callable[[str], ModuleType]) -> None:
    """Four processes each, back to back on one machine: the host-bound configs (a host share over the threshold)
    ran up to HOST_BOUND_RUN_SPREAD[0] apart, the GPU-bound control (a share of a few percent) repeated an earlier
    process's reading within 1 %."""
    pa = bench_script("plan_accuracy")
    doc = json.loads((RESULTS / "plan_accuracy-2026-12-04-1gpu-thin-thin4.json").read_text())
    hw = HardwareReport.from_dict(doc["hardware"])
    spreads = {}
    for model, stage, mbs in (("pythia-1b", 0, 1), ("qwen2-1.5b", 1, 1)):
        tps = _readings(doc, model, stage, mbs)
        assert len(tps) == 4
        spreads[model] = tps[-1] / tps[0]
        s = pa.Config(model, stage, micro_batch=mbs, seq=2048).strategy(1)
        assert host_share(estimate_throughput(hw, pa.bench_spec(model), s, 2048)) >= cal.HOST_BOUND_SHARE
    assert max(spreads.values()) == pytest.approx(cal.HOST_BOUND_RUN_SPREAD[0], abs=0.005)
    (control,) = _readings(doc, "llama-1b", 1, 16)
    earlier = json.loads((RESULTS / "plan_accuracy-2026-12-04-1gpu-thin-thin2.json").read_text())
    assert control == pytest.approx(_readings(earlier, "llama-1b", 1, 16)[0], rel=0.01)
    s = pa.Config("llama-1b", 1, micro_batch=16, seq=2048).strategy(1)
    assert host_share(estimate_throughput(hw, pa.bench_spec("llama-1b"), s, 2048)) < 0.1


def test_a_host_bound_plan_says_how_far_runs_fall_apart(bench_script: Callable[[str], ModuleType]) -> None:
    """llama-1b ZeRO-1 at micro-batch 1 on an H200 waits on the host for most of its step: its reasons say so, with
    the measured spread and what moves the work onto the GPU; at micro-batch 16 they do not."""
    pa = bench_script("plan_accuracy")
    doc = json.loads((RESULTS / "plan_accuracy-2026-12-04-1gpu-thin-thin4.json").read_text())
    hw = HardwareReport.from_dict(doc["hardware"])
    spec, request = pa.bench_spec("llama-1b"), PlanRequest(seq_len=2048)

    def host_reasons(mbs: int) -> list[str]:
        s = pa.Config("llama-1b", 1, micro_batch=mbs, seq=2048).strategy(1)
        return [r for r in evaluate(hw, spec, s, request).reasons if r.startswith("host-bound:")]

    (text,) = host_reasons(1)
    assert "up to 1.41x apart from one run to the next on one machine, 1.66x across machines" in text
    assert text.startswith("host-bound: 42 % of the step waits on the host")
    assert "more work per micro-step (micro-batch, sequence) moves it onto the GPU" in text
    assert host_reasons(16) == []
