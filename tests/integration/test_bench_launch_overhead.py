"""bench/launch_overhead.py --smoke: one plain-DeepSpeed run and one `dswiz launch` run on CPU, results written.
(The figure itself is the GPU machine's to measure; here only that the script works end to end.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_smoke_mode_measures_both_arms_and_writes_results(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "bench/launch_overhead.py",
            "--smoke",
            "--steps",
            "8",
            "--warmup",
            "2",
            "--out",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    [result_file] = tmp_path.glob("launch_overhead-*-smoke.json")
    result = json.loads(result_file.read_text())
    assert [r["arm"] for r in result["runs"]] == ["plain", "dswiz"]
    # (exit codes are recorded, not required: DeepSpeed on CPU can abort a rank at exit after the last step)
    assert all(r["steps_measured"] == 6 and r["median_step_s"] > 0 for r in result["runs"])
    assert result["summary"]["overhead"] is not None
    assert "overhead" in proc.stdout and result_file.with_suffix(".md").exists()
