"""The dashboard on run directories whose files were edited or damaged: one wrong-typed value in metrics.jsonl,
run.json or a csv row (the values that used to kill it) and mutated recordings; it renders and leaves on `q`."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given

from runner import rundir
from runner.metrics.target import target_from_run_dir
from runner.monitor.factory import build_live_app, build_replay_app
from tests.fakes.fake_nvml import FakeNvml
from tests.unit import fuzz_support as fz
from tests.unit.test_fuzz_metrics import BASE as SNAPSHOT
from tests.unit.test_fuzz_metrics import SNAPSHOT_KEYS
from tests.unit.test_fuzz_runjson import BASE as RUN_JSON
from wizard.hardware.gpu_sampler import GpuSampler

SIZE = (100, 32)


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()


def _drive(app: Any) -> None:
    async def drive() -> None:
        async with app.run_test(size=SIZE) as pilot:
            for _ in range(100):
                await pilot.pause(0.05)
                if app.snapshot is not None:
                    break
            assert app.snapshot is not None
            await pilot.press("q")

    asyncio.run(drive())
    assert app.return_value == "left"


def test_live_dashboard_on_the_issue_values(tmp_path: Path) -> None:
    run_dir = rundir.make_run_dir(tmp_path / "run")
    (run_dir / rundir.RUN_JSON).write_text(json.dumps({**RUN_JSON, "launchers": 5}), encoding="utf-8")
    bad = {**SNAPSHOT, "notes": 1, "host_ram_used_bytes": "5"}
    (run_dir / rundir.METRICS_JSONL).write_text(json.dumps(bad) + "\n", encoding="utf-8")
    csv_dir = run_dir / rundir.CSV_DIR / rundir.CSV_JOB_NAME
    csv_dir.mkdir(parents=True)
    (csv_dir / "Train_Samples_lr.csv").write_text("step,lr\ninf,0.001\n8,0.001\n", encoding="utf-8")
    (run_dir / rundir.COMBINED_LOG).write_text("[Rank " + fz.HUGE_DIGITS + "] hello\n", encoding="utf-8")
    _drive(build_live_app(target_from_run_dir(run_dir), interval=0.05, gpu_sampler=GpuSampler(FakeNvml([]))))


@fz.fuzz_settings(25)
@given(snapshots=fz.batch(fz.mutated(SNAPSHOT, SNAPSHOT_KEYS), 3))
def test_replay_dashboard_on_mutated_recordings(tmp_path_factory: Any, snapshots: list[Any]) -> None:
    path = tmp_path_factory.mktemp("m") / "metrics.jsonl"
    lines = [json.dumps(s, default=str) for s in snapshots] + [json.dumps(SNAPSHOT)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    _drive(build_replay_app(path))
