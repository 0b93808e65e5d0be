"""bench/plan_accuracy.py --smoke: the real DeepSpeed launcher, 2 gloo ranks on CPU, a tiny GPT-2, two configs run
in one process per rank -- the same code path the GPU run takes, proven before it goes to the GPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_smoke_runs_two_ranks_and_writes_raw_rows_and_the_report(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "bench/plan_accuracy.py",
            "--smoke",
            "--out",
            str(tmp_path),
            "--master-port",
            "29561",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=230,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (raw,) = tmp_path.glob("plan_accuracy-*-smoke.json")
    doc = json.loads(raw.read_text())
    assert doc["world"] == 2 and doc["smoke"] is True
    rows = doc["rows"]
    assert [r["status"] for r in rows] == ["ok", "ok"], rows
    for r in rows:
        assert len(r["step_s"]) == 2 and r["tokens_per_sec"] > 0
        assert r["predicted"]["allocated"] > 0 and r["predicted"]["tokens_per_sec"] > 0
    assert rows[1]["config"]["zero_stage"] == 2 and rows[1]["config"]["checkpointing"] is True
    report = (tmp_path / raw.name.replace(".json", ".md")).read_text()
    assert "Targets (issue 3)" in report and "tiny z2+ckpt mbs2" in report
