"""bench/comm_volume.py --repredict without ranks: a committed result file's readings beside today's planner."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_repredict_keeps_the_readings_and_sets_todays_planner_beside_them(
    bench_script: Callable[[str], ModuleType], tmp_path: Path
) -> None:
    cv = bench_script("comm_volume")
    src = ROOT / "bench" / "results" / "comm_volume-2026-12-05-neox-moe.json"
    out = cv.repredict(src, tmp_path)
    before, after = json.loads(src.read_text()), json.loads(out.read_text())
    assert after["repredicted"]["from"] == src.name
    assert [r["case"] for r in after["rows"]] == [r["case"] for r in before["rows"]]
    for old, new in zip(before["rows"], after["rows"], strict=True):
        assert (new["sent_bytes"], new["kept"], new["peak_gathered"]) == (
            old["sent_bytes"],
            old["kept"],
            old["peak_gathered"],
        )
        assert new["predicted_bytes"] > 0 and abs(new["error"]) <= cv.TOLERANCE, new["case"]
        assert abs(new["kept_error"]) <= cv.KEPT_TOLERANCE, new["case"]
    assert "re-predicted by the planner of" in out.with_suffix(".md").read_text()


def test_repredict_names_a_case_that_no_longer_exists(
    bench_script: Callable[[str], ModuleType], tmp_path: Path
) -> None:
    cv = bench_script("comm_volume")
    doc = json.loads((ROOT / "bench" / "results" / "comm_volume-2026-12-05-neox-moe.json").read_text())
    doc["rows"][0]["case"] = "gone z3 ga1"
    (tmp_path / "old.json").write_text(json.dumps(doc))
    with pytest.raises(SystemExit, match="no case is labelled 'gone z3 ga1'"):
        cv.repredict(tmp_path / "old.json", tmp_path)
