"""Where each figure comes from (``Snapshot.sources``), speed from the first progress lines, and the dashboard's
plan-vs-measured comparison, on recorded logs (tests/fixtures/logs) and the panels' own drawing."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from runner.metrics.aggregate import SOURCE_DS_CURR, SOURCE_DS_LOG, SOURCE_PRINTS, Aggregator
from runner.metrics.csvmon import read_csv_monitor_dir
from runner.metrics.parse import LogEvent, parse_line
from runner.metrics.plan import PlanInfo
from runner.metrics.snapshot import GpuState, Snapshot
from runner.monitor.widgets.charts import ThroughputPanel, titled
from runner.monitor.widgets.gpus import GpuPanel
from runner.verdict import JobObserver, decide
from wizard.units import GiB

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


def events_until(name: str, count: int) -> tuple[list[LogEvent], list[LogEvent]]:
    """The recorded log's events up to (and including) its ``count``-th throughput line; and those lines."""
    out, throughput = [], []
    for line in (LOGS / name / "combined.log").read_text(encoding="utf-8").splitlines():
        e = parse_line(line)
        if e is None:
            continue
        out.append(e)
        if e.kind == "throughput":
            throughput.append(e)
            if len(throughput) == count:
                break
    return out, throughput


def test_speed_shows_from_the_first_throughput_line_then_the_wall_rate() -> None:
    # cpu_zero2_ok: steps_per_print 5, global batch 8 (2 ranks x 4): the first throughput line is at step 5.
    plan = PlanInfo(global_batch_size=8)
    first, (tp5,) = events_until("cpu_zero2_ok", 1)
    agg = Aggregator(plan)
    agg.add_events(first, received_at=0.0)
    snap = agg.snapshot(0.0)
    assert snap.step == 5
    assert snap.samples_per_sec == tp5.values["curr_samples_per_sec"]
    assert snap.sources["samples_per_sec"] == SOURCE_DS_CURR
    both, _ = events_until("cpu_zero2_ok", 2)
    agg = Aggregator(plan)
    agg.add_events(both, received_at=0.0)
    snap = agg.snapshot(0.0)
    # A step is observed at the first of its lines (step= or throughput) with a timestamp.
    first_seen: dict[int, float] = {}
    for e in both:
        step = e.values.get("step", e.values.get("global_step")) if e.kind in ("step", "throughput") else None
        if step and e.timestamp is not None:
            first_seen.setdefault(step, e.timestamp)
    assert snap.samples_per_sec == pytest.approx(5 * 8 / (first_seen[10] - first_seen[5]))
    assert snap.sources["samples_per_sec"] == SOURCE_DS_LOG and snap.sources["step"] == SOURCE_DS_LOG


def test_speed_from_printed_steps_as_they_arrive() -> None:
    agg = Aggregator(PlanInfo(global_batch_size=4, seq_len=16))
    agg.add_events([parse_line("step 1 loss 5.0")], received_at=100.0)  # type: ignore[list-item]
    assert agg.snapshot(100.0).samples_per_sec is None
    agg.add_events([parse_line("step 3 loss 4.0")], received_at=101.0)  # type: ignore[list-item]
    snap = agg.snapshot(101.0)
    assert snap.samples_per_sec == pytest.approx(2 * 4) and snap.tokens_per_sec == pytest.approx(2 * 4 * 16)
    assert snap.step_time_s == pytest.approx(0.5)
    assert snap.sources == {
        "loss": SOURCE_PRINTS,
        "step": SOURCE_PRINTS,
        "samples_per_sec": SOURCE_PRINTS,
        "step_time_s": SOURCE_PRINTS,
    }
    assert Snapshot.from_json(snap.to_json()).sources == snap.sources


def test_measured_peak_is_the_most_any_gpu_held_beside_the_plans() -> None:
    agg = Aggregator(PlanInfo(predicted_peak_gpu_bytes=20 * GiB))
    agg.set_gpus([GpuState(0, memory_used_bytes=18 * GiB, memory_total_bytes=80 * GiB)])
    agg.set_gpus([GpuState(0, memory_used_bytes=21 * GiB, memory_total_bytes=80 * GiB)])
    agg.set_gpus([GpuState(0, memory_used_bytes=5 * GiB, memory_total_bytes=80 * GiB)])
    snap = agg.snapshot(0.0)
    assert snap.measured_peak_gpu_bytes == 21 * GiB and snap.predicted_peak_gpu_bytes == 20 * GiB
    text = GpuPanel().draw(snap, 60, 6).plain
    assert text.splitlines()[0] == "peak 21.0G measured · plan 20.0G (+5%)"


def test_throughput_panel_puts_measured_tokens_beside_the_plan_and_titles_name_the_source() -> None:
    snap = Snapshot(
        time=0.0,
        samples_per_sec=8.0,
        tokens_per_sec=900.0,
        predicted_tokens_per_sec=1000.0,
        sources={"samples_per_sec": "csv monitor"},
    )
    head = ThroughputPanel().draw(snap, 46, 6).plain.splitlines()[0]
    assert head == "samples/s 8.00  tokens/s 900 (plan 1.00k -10%)"
    assert titled("Throughput", snap, "samples_per_sec") == "Throughput · csv monitor"
    assert titled("Loss", snap, "loss") == "Loss"


def test_csv_monitor_rows_give_a_silent_job_its_phase_steps_and_verdict_speed() -> None:
    """An accelerate script that prints nothing while it trains: the csv monitor's rows (the recorded plain run's,
    8 samples per step) end "setting up" and give the status line and the verdict steps and speed."""
    obs = JobObserver(started=0.0)
    obs.feed(
        "[2026-12-01 13:32:06,620] [INFO] [stage_1_and_2.py:150:__init__] Creating ZeRO stage 2 optimizer",
        1.0,
    )
    assert obs.phases.current.name == "setting up ZeRO stage 2"
    points = read_csv_monitor_dir(LOGS / "cpu_plain_prints" / "csv" / "dswiz")["lr"]
    assert obs.add_csv([], 2.0) is None  # nothing written yet
    phase = obs.add_csv(points[:1], 3.0)
    assert phase is not None and phase.name == "training"
    assert obs.add_csv(points[1:], 8.0) is None  # the phase starts once
    assert obs.status(8.0).line().startswith(f"step {len(points)} · ")
    rate = (points[-1].samples - points[0].samples) / (8.0 - 3.0)
    verdict = decide(obs, launcher_returncodes=[0], elapsed=9.0)
    assert verdict.summary == f"success: {len(points)} steps in 0:09, {rate:,.1f} samples/s (csv monitor)"
    # A restart writes the header again and the counter starts over: the steps are the last segment's.
    obs.add_csv([replace(p, segment=1) for p in points[:3]], 20.0)
    assert obs.csv_steps == 3
