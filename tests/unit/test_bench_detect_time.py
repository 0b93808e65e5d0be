"""The detect-time benchmark runs in smoke mode and writes its results (no timing is asserted)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def test_smoke_writes_results(tmp_path: Path, bench_smoke: Callable[..., Any]) -> None:
    proc = bench_smoke("detect_time", tmp_path, timeout=120)
    (result_file,) = tmp_path.glob("detect_time-*-smoke.json")
    result = json.loads(result_file.read_text())
    assert len(result["detect_s"]) == 3 and result["median_s"] == sorted(result["detect_s"])[1]
    assert set(result["phases_s"]) >= {"import_s", "nvml_s", "host_s", "software_s"}
    assert (tmp_path / result_file.name.replace(".json", ".md")).exists()
    assert "median" in proc.stdout
