"""The plan-speed benchmark runs in smoke mode and writes its results (no timing is asserted)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def test_smoke_writes_results(tmp_path: Path, bench_smoke: Callable[..., Any]) -> None:
    proc = bench_smoke("plan_speed", tmp_path, timeout=120)
    (result_file,) = tmp_path.glob("plan_speed-*-smoke.json")
    result = json.loads(result_file.read_text())
    target = result["cases"]["target"]
    assert target["gpus"] == 1024 and target["params"] > 1e12 and target["runs"] == 3
    assert target["candidates"] >= 30  # every stage, offload, checkpointing and ZeRO++ variant
    assert result["cases"]["no-fit"]["best"] is None and result["cases"]["no-fit"]["advice"]
    assert (tmp_path / result_file.name.replace(".json", ".md")).exists()
    assert "median" in proc.stdout
