"""bench/probe_calibration.py without a GPU: its scoring from the committed H200 raw file, and the held-out pick."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from wizard.config.sidecar import load_sidecar

ROOT = Path(__file__).resolve().parents[2]
RAW = ROOT / "bench" / "results" / "probe_calibration-2026-12-01-1gpu.json"


@pytest.fixture(scope="module")
def pc(bench_script: Callable[[str], ModuleType]) -> ModuleType:
    return bench_script("probe_calibration")


def test_the_raw_file_scores_again_to_what_it_recorded(pc: ModuleType) -> None:
    doc = json.loads(RAW.read_text())
    again = pc.analyze(doc)
    assert again["summary"] == pytest.approx(doc["score"]["summary"])
    scored = [r for r in again["rows"] if r["scored"]]
    assert len(scored) == len(doc["held_out"]) == 4
    # the probe's 3 runs corrected tokens/s upwards (the physics was pessimistic) and moved every held-out run
    for r in scored:
        assert r["after"]["tokens_per_sec"] > r["before"]["tokens_per_sec"]
    s = again["summary"]
    assert s["tokens_err_after_median"] < s["tokens_err_before_median"]
    assert s["memory_err_after_median"] <= s["memory_err_before_median"]


def test_the_held_out_runs_are_strategies_the_probe_did_not_measure(pc: ModuleType) -> None:
    doc = json.loads(RAW.read_text())
    sidecar = load_sidecar(doc["sidecar"])
    probed = [pc.Strategy.from_dict(c["strategy"]) for c in doc["probe"]["result"]["candidates"]]
    probed.insert(
        0, probed.pop(doc["probe"]["result"]["chosen"])
    )  # the winner first, as the bench orders them
    picks = pc.held_out_strategies(sidecar, probed, 3)
    assert [s.to_dict() for _, s in picks] == [
        h["strategy"] for h in doc["held_out"]
    ]  # what the run measured
    kinds = {s.kind for s in probed}
    assert [s.kind in kinds for _, s in picks] == [False, False, False, True]
    assert picks[-1][1].micro_batch_size == probed[0].micro_batch_size // 2


def test_the_report_names_the_wall_time_and_the_medians(pc: ModuleType) -> None:
    doc = json.loads(RAW.read_text())
    text = pc.markdown(doc)
    assert f"Probe wall time: {doc['probe']['wall_s']:.0f} s" in text
    assert "tokens/s: 14.5 % -> 8.1 %" in text
