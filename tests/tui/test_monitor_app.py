"""The dashboard: SVG snapshots at 100x32 fed by recorded metrics, and `q` (plain, and embedded in launch)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from runner.metrics.snapshot import Snapshot
from runner.monitor.factory import build_replay_app, create_monitor_app
from runner.monitor.sources import ReplaySource

METRICS = Path(__file__).resolve().parents[1] / "fixtures" / "metrics"
SIZE = (100, 32)


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> None:
    # The status line shows the sample's clock time: pin the zone so snapshots do not depend on the machine.
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()


def replay(name: str, upto: int | None = None) -> ReplaySource:
    d = METRICS / name
    lines = (d / "combined.log").read_text(encoding="utf-8").splitlines()
    return ReplaySource(d / "metrics.jsonl", log_lines=lines, upto=upto)


def test_cpu_run_without_gpus(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(create_monitor_app(replay("cpu_2rank")), terminal_size=SIZE)


def test_run_with_gpus(snap_compare) -> None:  # type: ignore[no-untyped-def]
    # Mid-run (after 25 samples), GPUs simulated from the ranks' real RSS/CPU (tests/fixtures/metrics/README.md).
    assert snap_compare(create_monitor_app(replay("cpu_2rank_simulated_gpus", upto=25)), terminal_size=SIZE)


def test_accelerate_run_names_where_its_figures_came_from(snap_compare) -> None:  # type: ignore[no-untyped-def]
    # `dswiz launch` of an accelerate job (no DeepSpeed progress line), mid-run at step 13: samples/s from the csv
    # monitor, the loss from the script's dicts; the panel titles say so (tests/fixtures/metrics/README.md).
    assert snap_compare(create_monitor_app(replay("cpu_accelerate", upto=56)), terminal_size=SIZE)


class CountingSource(ReplaySource):
    stops = 0

    def stop(self) -> Snapshot | None:
        self.stops += 1
        return super().stop()


def test_q_leaves_without_stopping_the_job() -> None:
    source = CountingSource(METRICS / "cpu_2rank" / "metrics.jsonl")
    app = create_monitor_app(source)

    async def drive() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("q")

    asyncio.run(drive())
    assert app.return_value == "left" and source.stops == 1  # the collector stops; the job is not touched


@pytest.mark.parametrize(
    "quit_key", ["q", "ctrl+q"]
)  # Textual's own Ctrl-Q left the job running without a word
@pytest.mark.parametrize(("key", "result", "stopped"), [("s", "stopped", 1), ("l", "left", 0)])
def test_q_inside_launch_asks_whether_to_stop_the_job(
    quit_key: str, key: str, result: str, stopped: int
) -> None:
    calls: list[str] = []
    app = create_monitor_app(
        ReplaySource(METRICS / "cpu_2rank" / "metrics.jsonl"), stop_job=lambda: calls.append("stop")
    )

    async def drive() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press(quit_key)
            assert type(app.screen).__name__ == "QuitDialog"
            await pilot.press(key)

    asyncio.run(drive())
    assert app.return_value == result and len(calls) == stopped


@pytest.mark.parametrize(("launched", "result", "stopped"), [(True, "stopped", 1), (False, "left", 0)])
def test_ctrl_c_stops_a_launched_job_and_leaves_an_attached_one(
    launched: bool, result: str, stopped: int
) -> None:
    """Inside `dswiz launch` Ctrl-C stops the job as it does without the dashboard (Textual's own Ctrl-C only said
    "press ctrl+q"); attached by `dswiz monitor`, it leaves."""
    calls: list[str] = []
    stop = (lambda: calls.append("stop")) if launched else None
    app = create_monitor_app(ReplaySource(METRICS / "cpu_2rank" / "metrics.jsonl"), stop_job=stop)

    async def drive() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("ctrl+c")

    asyncio.run(drive())
    assert app.return_value == result and len(calls) == stopped


def test_escape_in_the_dialog_keeps_monitoring() -> None:
    app = create_monitor_app(ReplaySource(METRICS / "cpu_2rank" / "metrics.jsonl"), stop_job=lambda: None)

    async def drive() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("q", "escape")
            assert app.is_running and type(app.screen).__name__ != "QuitDialog"
            await pilot.press("q", "l")

    asyncio.run(drive())
    assert app.return_value == "left"


def test_the_app_renders_the_latest_snapshot() -> None:
    app = build_replay_app(METRICS / "cpu_2rank" / "metrics.jsonl")

    async def drive() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            assert (
                app.snapshot is not None and app.snapshot.step == 60 and app.snapshot.job_state == "finished"
            )
            assert str(app.query_one("#loss").border_title).startswith("Loss 3.6")

    asyncio.run(drive())


def test_live_app_polls_a_collector_in_its_thread(tmp_path: Path) -> None:
    import shutil

    from runner.metrics.target import target_from_run_dir
    from runner.monitor.factory import build_live_app
    from tests.fakes.fake_nvml import FakeNvml
    from wizard.hardware.gpu_sampler import GpuSampler

    logs = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "cpu_zero2_ok"
    (tmp_path / "logs").mkdir()
    shutil.copy(logs / "combined.log", tmp_path / "logs" / "combined.log")
    app = build_live_app(target_from_run_dir(tmp_path), interval=0.05, gpu_sampler=GpuSampler(FakeNvml([])))

    async def drive() -> None:
        async with app.run_test(size=SIZE) as pilot:
            for _ in range(100):
                await pilot.pause(0.05)
                if app.snapshot is not None:
                    break
            assert app.snapshot is not None and app.snapshot.step == 20
            await pilot.press("q")

    asyncio.run(drive())
    assert app.return_value == "left"
