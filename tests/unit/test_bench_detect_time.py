"""The detect-time benchmark runs in smoke mode and writes its results (no timing is asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_smoke_writes_results(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "bench/detect_time.py", "--smoke", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    (result_file,) = tmp_path.glob("detect_time-*-smoke.json")
    result = json.loads(result_file.read_text())
    assert len(result["detect_s"]) == 3 and result["median_s"] == sorted(result["detect_s"])[1]
    assert set(result["phases_s"]) >= {"import_s", "nvml_s", "host_s", "software_s"}
    assert (tmp_path / result_file.name.replace(".json", ".md")).exists()
    assert "median" in proc.stdout
