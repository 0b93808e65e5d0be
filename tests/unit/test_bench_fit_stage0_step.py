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
    # fit the same way on the same rows, per tensor beats per layer: on all rows, and on each model held out

    def median_abs(errors: list[float]) -> float:
        return sorted(abs(e) for e in errors)[len(errors) // 2]

    layer, tensor = res["forms_refit"]["per layer"], res["forms_refit"]["per tensor"]
    assert median_abs(tensor["errors"]) < median_abs(layer["errors"])
    assert median_abs(tensor["held_out"]) < median_abs(layer["held_out"]) / 2
    assert max(map(abs, tensor["held_out"])) < max(map(abs, layer["held_out"]))
    assert res["fixed_cost_committed"] == cal.STAGE0_STEP_SECONDS
