"""bench/fit_stage0_step.py without a GPU: the committed page is what the committed H200 rows and calibration give."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from wizard.planner import calibration as cal

RESULT = Path(__file__).resolve().parents[2] / "bench" / "results" / "stage0_step_fit-2026-12-04.json"


def test_the_committed_stage0_fit_is_what_the_rows_give_now(
    bench_script: Callable[[str], ModuleType],
) -> None:
    fit = bench_script("fit_stage0_step")
    res = json.loads(json.dumps(fit.run()))  # as written
    committed = json.loads(RESULT.read_text())
    assert res["rows"].keys() == committed["rows"].keys() and len(res["rows"]) == 19
    for label, row in res["rows"].items():
        assert row == pytest.approx(committed["rows"][label]), label
    assert res["constants_committed"] == {
        "STAGE0_SECONDS_PER_TENSOR": cal.STAGE0_SECONDS_PER_TENSOR,
        "OPTIMIZER_SECONDS_PER_PARAM[stage 0]": cal.OPTIMIZER_SECONDS_PER_PARAM["stage 0"],
    }
    # the committed constants are the fit's, rounded
    for name, value in res["constants_fit"].items():
        assert res["constants_committed"][name] == pytest.approx(value, rel=0.03), name
    # the per-tensor form beats the per-layer form on the same rows, in the median and the worst row
    before = [abs(r["error_per_layer_form"]) for r in res["rows"].values()]
    now = [abs(r["error_now"]) for r in res["rows"].values()]
    assert sorted(now)[len(now) // 2] < sorted(before)[len(before) // 2] / 2 and max(now) < max(before) / 1.5
    assert res["fixed_cost_committed"] == cal.STAGE0_STEP_SECONDS
