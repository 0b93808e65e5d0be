"""The offloaded step against the cores a rank gets (calibration.CPU_ADAM_*_PER_PARAM), held to the H200 readings
of bench/plan_accuracy.py --cpus 2/4/8/16, and bench/fit_cpu_offload_cores.py's committed page."""

from __future__ import annotations

import itertools
import json
import statistics
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest

from wizard.hardware.described import describe
from wizard.hardware.report import HostInfo
from wizard.model import load_model_spec
from wizard.planner import calibration as cal
from wizard.planner.finetune import trainable_params
from wizard.planner.throughput import CPU_ADAM_PART, estimate_throughput
from wizard.strategy import Strategy

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"


def test_the_committed_page_is_what_the_readings_give_now(
    bench_script: Callable[[str], ModuleType], tmp_path: Path
) -> None:
    fit = bench_script("fit_cpu_offload_cores")
    fit.run(tmp_path)
    name = f"{fit.STEM}.md"
    assert (tmp_path / name).read_text() == (RESULTS / name).read_text()
    doc = json.loads((tmp_path / f"{fit.STEM}.json").read_text())
    # the calibration's slope is the two configs' mean
    assert doc["mean_slope"] == pytest.approx(cal.CPU_ADAM_CORE_SECONDS_PER_PARAM, rel=0.01)


def test_the_step_follows_the_cores_where_the_per_core_rule_did_not(
    bench_script: Callable[[str], ModuleType],
) -> None:
    fit = bench_script("fit_cpu_offload_cores")
    rows = fit.readings()
    assert sorted({r["cores"] for r in rows}) == [2, 4, 8, 16] and len(rows) == 8
    errors = [r["predicted_s"] / r["measured_s"] - 1 for r in rows]
    assert abs(statistics.median(errors)) < 0.05 and max(abs(e) for e in errors) < 0.2
    two = [r for r in rows if r["cores"] == 2]
    # the per-core rule said more than twice the step on two cores
    assert all(fit.earlier_step(r) > 2 * r["measured_s"] for r in two)
    assert all(abs(r["predicted_s"] / r["measured_s"] - 1) < 0.05 for r in two)


def test_cpu_adam_falls_with_cores_toward_a_floor_and_keeps_the_16_core_calibration() -> None:
    hw = describe("1xH200")
    spec = load_model_spec("llama-7b")
    s = Strategy(zero_stage=2, offload_optimizer="cpu", micro_batch_size=4, activation_checkpointing=True)

    def adam(cores: int) -> float:
        host = HostInfo(physical_cores=cores, logical_cores=cores)
        return dict(estimate_throughput(replace(hw, host=host), spec, s, 1024).parts)[CPU_ADAM_PART]

    times = [adam(c) for c in (1, 2, 4, 8, 16, 32, 64, 256)]
    assert all(a > b for a, b in itertools.pairwise(times))
    params = 1 / (cal.CPU_ADAM_SECONDS_PER_PARAM + cal.CPU_ADAM_CORE_SECONDS_PER_PARAM / 16)
    assert params == pytest.approx(1.49e8 * 16)  # the rate the 16-core hosts' rows were fit with
    assert times[-1] > trainable_params(spec) * cal.CPU_ADAM_SECONDS_PER_PARAM  # cores never make it free
    # two GPUs on the node share its cores: each rank's step is the step of a host with half the cores
    two = replace(hw, gpus=hw.gpus * 2, host=HostInfo(physical_cores=16, logical_cores=16))
    s2 = replace(s, gpus_per_node=2)
    per_rank = dict(estimate_throughput(two, spec, s2, 1024).parts)[CPU_ADAM_PART]
    assert per_rank == pytest.approx(adam(8) / 2)
