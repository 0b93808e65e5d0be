"""The monitor-cost benchmark runs in smoke mode and writes its results (figures are reported, not asserted)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def test_smoke_writes_results(tmp_path: Path, bench_smoke: Callable[..., Any]) -> None:
    proc = bench_smoke("monitor_cost", tmp_path)
    (result_file,) = tmp_path.glob("monitor_cost-smoke-*.json")
    r = json.loads(result_file.read_text())
    assert r["cpu_1hz"]["polls"] >= 3 and r["cpu_1hz"]["last_step"] is not None
    # attaching reads the backfill, not the whole log
    assert r["big_log"]["bytes_read"] < r["big_log"]["log_bytes"] / 4
    assert r["history"]["kept_points"] <= 512 and r["history"]["last_step"] == 9_999
    assert (tmp_path / result_file.name.replace(".json", ".md")).exists()
    assert "target" in proc.stdout
