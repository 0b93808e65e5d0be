"""bench/calibration_replay.py on one committed H200 result file: the contract of the replay (what it scores and
how), not its numbers -- the probe's rows calibrate, every other row is scored, none twice, and "after" is the
planner's own calibrated prediction of exactly that row."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from wizard.history.calibrate import corrections
from wizard.history.record import hardware_fingerprint

ROOT = Path(__file__).resolve().parents[2]
RAW = ROOT / "bench" / "results" / "plan_accuracy-2026-12-01-1gpu-zero3-a.json"


@pytest.fixture(scope="module")
def cr(bench_script: Callable[[str], ModuleType]) -> ModuleType:
    return bench_script("calibration_replay")


@pytest.fixture(scope="module")
def doc(cr: ModuleType) -> dict[str, Any]:
    return cr.replay([RAW])


def _measured_ids(cr: ModuleType) -> dict[str, set[str]]:
    """The rows of the raw file the replay can score (ok with GPU figures, or OOM), per model."""
    pa = cr._pa()
    out: dict[str, set[str]] = {}
    for r in json.loads(RAW.read_text())["rows"]:
        # a row whose reserved memory held the model's build is not scored (bench/plan_accuracy.py build_in_the_cache)
        if r["status"] == "oom" or (
            r["status"] == "ok" and r.get("max_reserved") and not pa.build_in_the_cache(r)
        ):
            out.setdefault(r["config"]["model"], set()).add(pa._label(r))
    return out


def test_every_measured_row_is_either_in_the_probe_or_scored_once(
    cr: ModuleType, doc: dict[str, Any]
) -> None:
    assert doc["inputs"] == [str(RAW.relative_to(ROOT))] and "no new GPU run" in doc["what"]
    (run,) = doc["runs"]
    measured = _measured_ids(cr)
    assert {m["model"] for m in run["models"]} == set(measured)
    for m in run["models"]:
        probe = [p["id"] for p in m["probe"]]
        held = [s["id"] for s in m["held_out"]]
        assert 1 <= len(probe) <= cr.PROBE_SIZE and len(set(probe)) == len(probe)
        assert len(set(held)) == len(held)  # no row counted twice
        assert not set(probe) & set(held)  # after-errors only on rows the calibration never saw
        assert set(probe) | set(held) == measured[m["model"]]
        assert all(p["rule"].startswith(("planner rank ", "fill")) for p in m["probe"])
        assert m["summary"]["rows"] == len(held)
        assert m["probe_in_sample"]["rows"] == len(probe)  # the probe's fit to itself is reported apart
    pooled = sum(len(m["held_out"]) for m in run["models"])
    assert run["all"]["rows"] == pooled
    assert sum(s["rows"] for s in run["strategy_families"].values()) == pooled
    assert sum(s["rows"] for s in run["model_families"].values()) == pooled


def test_the_probe_takes_distinct_kinds_in_the_planners_order(cr: ModuleType) -> None:
    doc = json.loads(RAW.read_text())
    hw, rows = cr.load_rows(doc, doc["rows"])
    for model in {r.model for r in rows}:
        probe = cr.choose_probe(hw, model, rows)
        kinds = [cr._kind_of(r.strategy) for r, _ in probe]
        assert len(set(kinds)) == len(kinds)
        ranks = [
            int(rule.removeprefix("planner rank ")) for _, rule in probe if rule.startswith("planner rank")
        ]
        assert ranks == sorted(ranks)


def test_after_is_the_planners_calibrated_prediction_of_that_row(cr: ModuleType) -> None:
    doc = json.loads(RAW.read_text())
    hw, rows = cr.load_rows(doc, doc["rows"])
    model = rows[0].model
    probe = [r for r, _ in cr.choose_probe(hw, model, rows)]
    records = cr.as_records(hw, probe)
    assert all(
        m.outcome == "success" and m.predicted.tokens_per_sec == r.physics_tps
        for m, r in zip(records, probe, strict=True)
    )
    calibration = corrections(records, hardware_fingerprint(hw).key)
    assert calibration.runs == len(probe)
    held = [r for r in rows if r.model == model and r not in probe]
    scored = cr.score(hw, held, calibration)
    for r, s in zip(held, scored, strict=True):
        f = calibration.for_family(r.family)
        assert s["calibrated"]["tokens_per_sec"] == pytest.approx(r.physics_tps * f.tokens_per_sec.value)
        assert abs(s["calibrated"]["device_bytes"] - r.physics_device * f.peak_gpu_bytes.value) <= 1
        assert s["physics"]["tokens_per_sec"] == pytest.approx(cr.predict(hw, r, None)[0])
        if r.measured_tps:
            err = abs(s["calibrated"]["tokens_per_sec"] / r.measured_tps - 1)
            assert s["error_after"]["tokens_per_sec"] == pytest.approx(err)
    summary = cr.summarize(scored)
    after = [
        s["error_after"]["tokens_per_sec"] for s in scored if s["error_after"]["tokens_per_sec"] is not None
    ]
    assert summary["tokens_per_sec_after"]["median"] == pytest.approx(statistics.median(after))
    assert set(summary) >= {
        "rows",
        "ok_rows",
        "device_before",
        "device_after",
        "oom_risk",
        "under_beyond_margin",
    }


def test_leave_one_model_out_stays_inside_a_model_family(doc: dict[str, Any]) -> None:
    (run,) = doc["runs"]
    family = {m["model"]: m["model_family"] for m in run["models"]}
    for x in run["leave_one_model_out"]:
        assert x["probe_model"] != x["predicted_model"]
        assert family[x["probe_model"]] == family[x["predicted_model"]] == x["model_family"]


def test_the_script_writes_both_files_and_refuses_a_file_that_is_not_a_raw_result(tmp_path: Path) -> None:
    script = str(ROOT / "bench" / "calibration_replay.py")
    ok = subprocess.run(
        [sys.executable, script, str(RAW), "--out", str(tmp_path), "--name", "r"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ok.returncode == 0, ok.stderr
    md = (tmp_path / "r.md").read_text()
    assert "replay of committed H200 measurements, not a new GPU run" in md and RAW.name in md
    assert json.loads((tmp_path / "r.json").read_text())["runs"]
    summary = tmp_path / "x-summary.json"
    summary.write_text('{"per_run": []}')
    bad = subprocess.run(
        [sys.executable, script, str(summary), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode == 2 and "not a raw plan_accuracy result" in bad.stderr
    assert "Traceback" not in bad.stderr and not (tmp_path / "out").exists()
