"""The aggregator on recorded logs (numbers derived from the log's own timestamps) and the alert rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.metrics.aggregate import Aggregator
from runner.metrics.alerts import AlertFacts, AlertThresholds, Failure, evaluate
from runner.metrics.host import HostSample, ProcessSample
from runner.metrics.parse import LogEvent, parse_line
from runner.metrics.plan import PlanInfo
from runner.metrics.snapshot import GpuState
from wizard.units import GiB

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


def log_events(name: str) -> list[LogEvent]:
    lines = (LOGS / name / "combined.log").read_text(encoding="utf-8").splitlines()
    return [e for e in (parse_line(line) for line in lines) if e is not None]


def host(
    used: int = 4 * GiB, total: int = 16 * GiB, alive: bool = True, procs: tuple[ProcessSample, ...] = ()
) -> HostSample:
    return HostSample(
        time=0.0, ram_total_bytes=total, ram_used_bytes=used, swap_total_bytes=0, swap_used_bytes=0,
        job_alive=alive, processes=procs,
    )  # fmt: skip


def test_recorded_run_gives_step_rate_loss_lr_and_finished() -> None:
    evs = log_events("cpu_zero2_ok")
    agg = Aggregator(PlanInfo(seq_len=64, flops_per_token=3e6, total_steps=40, peak_tflops_per_gpu=1.0))
    end = max(e.timestamp for e in evs if e.timestamp)
    agg.add_events(evs, received_at=end)
    snap = agg.snapshot(end)
    steps = {e.values["step"]: e.timestamp for e in evs if e.kind == "step" and e.values["step"] > 0}
    # wall-clock rate over the step lines (step 0 is the init report, not a step): global batch 8 from the config dump
    expected = (20 - 5) / (steps[20] - steps[5]) * 8
    assert snap.step == 20 and snap.world_size == 2
    assert snap.samples_per_sec == pytest.approx(expected)
    assert snap.tokens_per_sec == pytest.approx(expected * 64)
    assert snap.tflops_per_gpu == pytest.approx(expected * 64 * 3e6 / 2 / 1e12)
    assert snap.mfu == pytest.approx(snap.tflops_per_gpu / 1.0)
    assert snap.step_time_s == pytest.approx((steps[20] - steps[5]) / 15)
    assert snap.loss == 5.3095 and snap.lr == 0.001
    assert snap.job_state == "finished" and snap.exit_code == 0 and snap.alerts == ()
    assert snap.eta_s is None  # finished: no ETA


def test_eta_while_running() -> None:
    evs = [e for e in log_events("cpu_zero2_ok") if e.kind != "exit"]
    agg = Aggregator(PlanInfo(total_steps=100))
    agg.add_events(evs, received_at=0.0)
    snap = agg.snapshot(0.0)
    assert snap.job_state == "running"
    assert snap.eta_s == pytest.approx(80 * snap.step_time_s)


def test_killed_rank_is_a_host_oom_kill_alert_with_the_ram_peak() -> None:
    agg = Aggregator()
    agg.set_host(host(used=15 * GiB))
    agg.add_events(log_events("cpu_killed_rank1"), received_at=0.0)
    snap = agg.snapshot(0.0)
    assert snap.job_state == "failed" and snap.exit_code == -9
    (alert,) = [a for a in snap.alerts if a.code == "host_oom_kill"]
    assert alert.severity == "error" and "15.0 GiB of 16.0 GiB" in alert.message


def test_injected_failure_names_the_first_failing_rank() -> None:
    agg = Aggregator()
    agg.add_events(log_events("cpu_fail_rank1"), received_at=0.0)
    snap = agg.snapshot(0.0)
    codes = [a.code for a in snap.alerts]
    assert codes == ["exception", "exit"]  # one exception alert: the first (the cause), not rank 0's echo
    assert snap.alerts[0].rank == 1 and "injected failure at step 7" in snap.alerts[0].message


def test_restart_resets_the_rate_window() -> None:
    agg = Aggregator(PlanInfo(global_batch_size=8))
    line = "[2026-11-30 01:00:{:02d},000] [INFO] [logging.py:123:log_dist] [Rank 0] step={}, skipped=0, lr=[0.1], mom=[]"
    for t, s in ((0, 10), (10, 20), (20, 30), (30, 5), (40, 15)):
        e = parse_line(line.format(t, s))
        assert e is not None
        agg.add_events([e], received_at=0.0)
    snap = agg.snapshot(0.0)
    assert snap.step == 15 and snap.samples_per_sec == pytest.approx(10 / 10 * 8)


# ------------------------------------------------------------------------------------------ alert rules
def gpu(index: int, used: float, util: float = 90.0, predicted: float | None = None) -> GpuState:
    return GpuState(
        index=index, memory_used_bytes=int(used * GiB), memory_total_bytes=int(100 * GiB), utilization=util,
        predicted_peak_bytes=int(predicted * GiB) if predicted else None,
    )  # fmt: skip


def codes(facts: AlertFacts, t: AlertThresholds | None = None) -> list[str]:
    return [a.code for a in evaluate(facts, t)]


def test_oom_risk_and_above_prediction() -> None:
    facts = AlertFacts(
        now=0, running=True, gpus=(gpu(0, 96), gpu(1, 50, predicted=40), gpu(2, 41, predicted=40))
    )
    alerts = evaluate(facts)
    assert [(a.code, a.gpu) for a in alerts] == [("above_prediction", 1), ("oom_risk", 0)]


def test_stall_versus_hang_depends_on_gpu_utilisation() -> None:
    base = {
        "now": 1000.0,
        "running": True,
        "step": 50,
        "last_progress_at": 900.0,
        "median_progress_gap_s": 10.0,
    }
    assert codes(AlertFacts(**base, gpus=(gpu(0, 10, util=99),))) == ["hang"]
    assert codes(AlertFacts(**base, gpus=(gpu(0, 10, util=0),))) == ["stall"]
    assert codes(AlertFacts(**base)) == ["stall"]  # no GPU visible: cannot tell a hang
    # not yet: 100 s < max(60, 5 x 30 s)
    assert codes(AlertFacts(**{**base, "median_progress_gap_s": 30.0})) == []
    assert codes(AlertFacts(**{**base, "running": False})) == []


def test_overflow_storm_from_events_from_skipped_steps_and_minimum_scale() -> None:
    assert codes(AlertFacts(now=100, running=True, overflow_times=(10, 20, 30, 40, 50))) == ["overflow_storm"]
    assert codes(AlertFacts(now=1000, running=True, overflow_times=(10, 20, 30, 40, 50))) == []  # old news
    assert codes(AlertFacts(now=0, running=True, skipped_recent=(5, 20))) == ["overflow_storm"]
    assert codes(AlertFacts(now=0, running=True, skipped_recent=(1, 20))) == []
    (alert,) = evaluate(AlertFacts(now=0, running=True, min_loss_scale_hit=True))
    assert alert.severity == "error"


def test_straggler_needs_consecutive_samples() -> None:
    slow = {0: 95.0, 1: 96.0, 2: 20.0, 3: 94.0}
    even = {0: 95.0, 1: 96.0, 2: 93.0, 3: 94.0}
    alerts = evaluate(AlertFacts(now=0, running=True, rank_activity=(slow, slow, slow)))
    assert [(a.code, a.rank) for a in alerts] == [("straggler", 2)]
    assert codes(AlertFacts(now=0, running=True, rank_activity=(slow, even, slow))) == []
    idle = {0: 5.0, 1: 6.0, 2: 0.0}
    assert (
        codes(AlertFacts(now=0, running=True, rank_activity=(idle, idle, idle))) == []
    )  # all idle: no straggler


def test_host_ram_and_failures() -> None:
    facts = AlertFacts(
        now=0,
        running=True,
        host_ram_used_bytes=int(15.5 * GiB),
        host_ram_total_bytes=16 * GiB,
        failures=(
            Failure("oom", 3, "tried to allocate 2.0 GiB on GPU 3", 3),
            Failure("nccl_timeout", 0, "ALLREDUCE"),
        ),
    )
    alerts = evaluate(facts)
    assert [(a.code, a.severity) for a in alerts] == [
        ("nccl_timeout", "error"),
        ("oom", "error"),
        ("host_ram", "warning"),
    ]
    assert alerts[1].rank == 3 and "micro-batch" in alerts[1].message


def test_aggregator_straggler_from_rank_cpu_when_no_gpus() -> None:
    agg = Aggregator()
    agg.add_events([LogEvent("step", {"step": 5, "skipped": 0, "lr": (0.1,), "mom": ()})], received_at=0.0)
    procs = (
        ProcessSample(10, GiB, 100.0, 0),
        ProcessSample(11, GiB, 20.0, 1),
        ProcessSample(12, GiB, 98.0, 2),
    )
    for _ in range(3):
        agg.set_host(host(procs=procs))
    assert [(a.code, a.rank) for a in agg.snapshot(1.0).alerts] == [("straggler", 1)]
    # a data loader worker of rank 1 (its local rank, inherited) adds to rank 1: it no longer reads as the rank
    # (the last process of a local rank took the rank's place), and rank 1 is busy now
    agg = Aggregator()
    agg.add_events([LogEvent("step", {"step": 5, "skipped": 0, "lr": (0.1,), "mom": ()})], received_at=0.0)
    with_worker = (*procs, ProcessSample(13, GiB, 80.0, 1), ProcessSample(14, GiB, 0.0, 0))
    for _ in range(3):
        agg.set_host(host(procs=with_worker))
    assert agg.snapshot(1.0).alerts == ()


def test_a_card_the_plan_filled_is_not_an_oom_risk_while_within_the_predicted_peak() -> None:
    planned = AlertFacts(now=0, running=True, gpus=(gpu(0, 97, predicted=97),))
    assert codes(planned) == []  # dswiz's own recommendation fills the card on purpose
    over = AlertFacts(now=0, running=True, gpus=(gpu(0, 97, predicted=90),))
    assert codes(over) == ["above_prediction", "oom_risk"]  # beyond the plan: both warnings


def test_throughput_below_the_plan_past_the_warm_up() -> None:
    slow = {"now": 0, "running": True, "tokens_per_sec": 600.0, "predicted_tokens_per_sec": 1000.0}
    assert codes(AlertFacts(**slow, step=50)) == ["below_prediction"]
    assert codes(AlertFacts(**slow, step=3)) == []  # warm-up: compilation and allocator growth
    assert codes(AlertFacts(**{**slow, "tokens_per_sec": 900.0}, step=50)) == []  # within the margin
    assert codes(AlertFacts(**{**slow, "running": False}, step=50)) == []
