"""bench/fit_host_speed.py without a GPU: the committed page is what the committed rows and calibration give, and
the scaling it tries leaves the calibration as it found it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from wizard.planner import calibration as cal

RESULT = Path(__file__).resolve().parents[2] / "bench" / "results" / "host_speed_fit-2026-12-07.json"


def test_the_committed_host_speed_fit_is_what_the_rows_give_now(
    bench_script: Callable[[str], ModuleType],
) -> None:
    fit = bench_script("fit_host_speed")
    version = cal.physics_version()
    res = json.loads(json.dumps(fit.run()))  # as written
    assert cal.physics_version() == version  # every scaled constant restored
    committed = json.loads(RESULT.read_text())
    assert res["unscaled"].keys() == committed["unscaled"].keys()
    for kind, summary in res["unscaled"].items():
        assert summary == pytest.approx(committed["unscaled"][kind]), kind
    assert len(res["fits"]) == len(committed["fits"]) == 6
    for now, then in zip(res["fits"], committed["fits"], strict=True):
        assert (now["probe"], now["fit_on"], now["exponent"]) == (
            then["probe"],
            then["fit_on"],
            then["exponent"],
        )
        assert now["reference"] == pytest.approx(then["reference"])
        assert now["fit"] == pytest.approx(then["fit"]) and now["held_out"] == pytest.approx(then["held_out"])
    # what the page says: fit on the H100s' rows, every probe makes the H200s' rows (the ones the constants were fit
    # to, and the targets) worse than the planner as committed
    h200 = res["unscaled"]["H200"]["abs_median"]
    assert all(f["held_out"]["abs_median"] > h200 for f in res["fits"] if f["fit_on"] == "H100")


def test_host_scaled_multiplies_every_host_constant_and_restores_it(
    bench_script: Callable[[str], ModuleType],
) -> None:
    fit = bench_script("fit_host_speed")
    before = {n: getattr(cal, n) for n in fit.HOST_CONSTANTS}
    with fit.host_scaled(2.0):
        assert 2 * before["STAGE3_SECONDS_PER_LAYER"] == cal.STAGE3_SECONDS_PER_LAYER
        assert {k: 2 * v for k, v in before["HOST_SECONDS_PER_LAYER"].items()} == cal.HOST_SECONDS_PER_LAYER
    assert {n: getattr(cal, n) for n in fit.HOST_CONSTANTS} == before
