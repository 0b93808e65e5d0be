"""What a launch records in the run history: steady-state figures from a real metrics.jsonl, the outcome, and a
history that cannot be written never breaks the launch."""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from runner.metrics.history import MetricsLog
from runner.metrics.snapshot import GpuState, Snapshot
from runner.run_history import entry_at_end, entry_at_start, measured, outcome, record
from runner.rundir import STATUS_FINISHED, STATUS_INTERRUPTED, RunRecord, RunVerdict
from wizard.config.sidecar import PlanSidecar, read_sidecar
from wizard.hardware.described import describe
from wizard.history.record import Figures, Measurement, hardware_fingerprint
from wizard.history.store import HistoryStore
from wizard.planner.calibration import physics_version


def _snap(step: int | None, tps: float | None, mem: int, t: float) -> Snapshot:
    return Snapshot(
        time=t,
        step=step,
        tokens_per_sec=tps,
        step_time_s=(1000 / tps) if tps else None,
        gpus=(GpuState(index=0, memory_used_bytes=mem), GpuState(index=1, memory_used_bytes=mem // 2)),
        host_ram_used_bytes=mem // 4,
    )


def test_steady_state_skips_the_warm_up() -> None:
    # steps 1-3 are slow warm-up (compilation, first optimizer step); 4-20 run at ~1000 tokens/s
    snaps = [
        _snap(s, 100.0 if s <= 3 else 1000.0 + s % 3, 8 << 30 if s < 10 else 9 << 30, s) for s in range(1, 21)
    ]
    snaps.insert(0, _snap(None, None, 1 << 30, 0.0))  # before the first step
    f = measured(snaps)
    assert f.tokens_per_sec is not None and 1000 <= f.tokens_per_sec <= 1002
    assert f.peak_gpu_bytes == 9 << 30 and f.peak_gpu_bytes_per_rank == (9 << 30, (9 << 30) // 2)
    assert f.host_ram_peak_bytes == (9 << 30) // 4 and f.steps == 20


def test_a_run_without_steps_measures_memory_only() -> None:
    f = measured([_snap(None, None, 3 << 30, 0.0)])
    assert f.tokens_per_sec is None and f.peak_gpu_bytes == 3 << 30


def _run(tmp_path: Path, **kw: object) -> RunRecord:
    base = dict(
        run_id="20261201-120000",
        run_dir=str(tmp_path),
        status=STATUS_FINISHED,
        started_at=1.0,
        command=("deepspeed", "train.py"),
        command_line="deepspeed train.py",
        script="train.py",
    )
    return RunRecord(**{**base, **kw})  # type: ignore[arg-type]


def test_outcomes(tmp_path: Path) -> None:
    ok = RunVerdict("success", "finished")
    assert outcome(_run(tmp_path, verdict=ok, ended_at=2.0)) == "success"
    assert outcome(_run(tmp_path, verdict=RunVerdict("cuda_oom", "x"), ended_at=2.0)) == "oom"
    assert outcome(_run(tmp_path, verdict=RunVerdict("rank_failed", "x"), ended_at=2.0)) == "failed"
    assert outcome(_run(tmp_path, status=STATUS_INTERRUPTED, ended_at=2.0)) == "interrupted"
    assert outcome(_run(tmp_path, status="running")) == "running"


def _sidecar(tmp_path: Path, hardware: str, model: str = "gpt2") -> PlanSidecar:
    out = tmp_path / "cfg"
    proc = subprocess.run(
        [sys.executable, "-m", "wizard", "config", "--yes", "--model", model, "--hardware", hardware,
         "--out", str(out)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    sidecar = read_sidecar(out)
    assert sidecar is not None and sidecar.predicted is not None
    return sidecar


def test_start_then_end_is_one_entry_with_prediction_and_measurement(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    log = MetricsLog(run_dir / "metrics.jsonl")
    for s in range(1, 11):
        log.append(_snap(s, 500.0, 4 << 30, float(s)))
    log.close()
    hw = hardware_fingerprint(describe("2xA100-80GB"))
    assert hw.gpus_per_node == 2 and "A100" in hw.gpu_name and hw.key.endswith("1x2")
    sidecar = _sidecar(tmp_path, "2xA100-80GB")
    start = entry_at_start(run_id="r1", run_dir=run_dir, hardware=hw, sidecar=sidecar, applies=True)
    assert (
        start.strategy["stage"] == sidecar.strategy.zero_stage and start.model["name"] == sidecar.model.name
    )
    # the physics of this dswiz for the plan's strategy: the plan's own figure (written rounded), and its version
    assert start.predicted.tokens_per_sec == pytest.approx(sidecar.predicted.tokens_per_sec, abs=0.1)  # type: ignore[union-attr]
    assert start.physics == physics_version() and start.model_spec == sidecar.model.to_dict()
    other = entry_at_start(run_id="r2", run_dir=run_dir, hardware=hw, sidecar=sidecar, applies=False)
    assert other.predicted == Figures()  # a plan for other hardware predicts nothing about this run
    db = tmp_path / "h.sqlite3"
    assert record(start, db) is None
    assert HistoryStore(db).get("r1").outcome == "running"  # type: ignore[union-attr]
    end = entry_at_end(
        start, _run(run_dir, run_dir=str(run_dir), verdict=RunVerdict("success", "ok"), ended_at=9.0)
    )
    assert record(end, db) is None
    got = HistoryStore(db).get("r1")
    assert got is not None and got.outcome == "success" and got.measured.tokens_per_sec == 500.0
    assert len(HistoryStore(db).runs()) == 1


def test_a_broken_history_is_a_warning_not_a_failure(tmp_path: Path) -> None:
    bad = tmp_path / "not-a-db"
    bad.write_bytes(b"x" * 4096)
    start = entry_at_start(
        run_id="x", run_dir=tmp_path, hardware=hardware_fingerprint(describe("1xH100-80GB"))
    )
    warning = record(start, bad)
    assert warning is not None and warning.startswith("warning: run history not updated")


def test_a_killed_launch_entry_gets_its_end_from_run_json(tmp_path: Path) -> None:
    from runner.run_history import reconcile
    from runner.rundir import STATUS_SUPERVISOR_LOST, write_run_record

    hw = hardware_fingerprint(describe("1xH100-80GB"))
    store = HistoryStore(tmp_path / "h.sqlite3")
    runs = {}
    for name, status in (("lost", STATUS_SUPERVISOR_LOST), ("alive", "running"), ("gone", "running")):
        run_dir = tmp_path / name
        run_dir.mkdir()
        runs[name] = run_dir
        store.put(entry_at_start(run_id=name, run_dir=run_dir, hardware=hw))
        if name != "gone":  # "gone": its run dir holds no run.json any more
            verdict = RunVerdict("supervisor_lost", "dswiz died") if name == "lost" else None
            write_run_record(run_dir, _run(run_dir, run_id=name, run_dir=str(run_dir), status=status,
                                           verdict=verdict, ended_at=5.0 if verdict else None))  # fmt: skip
    # "alive": run.json says running and names no supervisor pid: dswiz cannot tell it is dead, so it stays
    assert reconcile(store) == 1
    assert {e.id: e.outcome for e in store.runs()} == {"lost": "lost", "alive": "running", "gone": "running"}
    assert reconcile(store) == 0  # nothing more to learn


def test_the_monitor_records_a_job_it_watched_whole_and_not_one_it_joined_late() -> None:
    from runner.run_history import WatchedJob

    hw = hardware_fingerprint(describe("1xH100-80GB"))

    def watch(steps: range, end: str) -> Measurement | None:
        job = WatchedJob(lambda: hw)
        job.observe(Snapshot(time=0.0, job_state="starting"))
        for k in steps:
            job.observe(Snapshot(time=float(k), step=k, tokens_per_sec=1000.0 + k, job_state="running"))
        job.observe(Snapshot(time=99.0, step=steps[-1], job_state=end))
        return job.measurement()

    whole = watch(range(1, 21), "finished")
    assert whole is not None and whole.source == "monitor" and whole.outcome == "success"
    assert whole.measured.steps == 20 and whole.hardware == hw
    assert whole.measured.tokens_per_sec == statistics.median(1000.0 + k for k in range(6, 21))  # warm-up cut
    assert watch(range(12, 21), "finished") is None  # joined at step 12: its warm-up and start unseen
    assert watch(range(1, 21), "running") is None  # left before the end
    unknown = watch(range(1, 5), "ended")
    assert unknown is not None and unknown.outcome == "ended"


def test_an_edited_config_records_what_ran_and_the_prediction_of_exactly_that(tmp_path: Path) -> None:
    """A user halves the micro-batch in ds_config.json after `dswiz config`: the history must compare the run with
    the prediction of what ran, not with the plan's (which would teach the calibration a wrong factor)."""
    from wizard.planner import PlanRequest, evaluate

    hw = hardware_fingerprint(describe("2xA100-80GB"))
    sidecar = _sidecar(tmp_path, "2xA100-80GB")
    planned = sidecar.strategy
    edited = {
        "train_micro_batch_size_per_gpu": max(1, planned.micro_batch_size // 2),
        "gradient_accumulation_steps": planned.gradient_accumulation_steps,
        "zero_optimization": {"stage": planned.zero_stage},
    }
    entry = entry_at_start(
        run_id="r", run_dir=tmp_path, hardware=hw, sidecar=sidecar, applies=True, ds_config=edited
    )
    ran = planned.with_(micro_batch_size=edited["train_micro_batch_size_per_gpu"])
    want = evaluate(sidecar.hardware, sidecar.model, ran, PlanRequest(seq_len=sidecar.seq_len)).predicted
    assert entry.strategy["micro_batch"] == ran.micro_batch_size != planned.micro_batch_size
    assert entry.predicted == Figures(
        tokens_per_sec=want.tokens_per_sec, peak_gpu_bytes=want.gpu_bytes, host_bound=want.host_bound
    )
    assert entry.predicted.peak_gpu_bytes < sidecar.predicted.peak_gpu_bytes  # type: ignore[union-attr,operator]
    # the config as written: the plan's own prediction
    same = {**edited, "train_micro_batch_size_per_gpu": planned.micro_batch_size}
    kept = entry_at_start(
        run_id="r", run_dir=tmp_path, hardware=hw, sidecar=sidecar, applies=True, ds_config=same
    )
    assert kept.predicted.tokens_per_sec == pytest.approx(sidecar.predicted.tokens_per_sec, abs=0.1)  # type: ignore[union-attr]


def test_a_run_the_planner_puts_on_the_host_is_recorded_so(tmp_path: Path) -> None:
    """A LLaMA-style 1.1B model at micro-batch 1 on one H200 waits on the host for over 40 % of its step: its record
    says host-bound (the history then learns it only from its own host CPU); at the plan's micro-batch it is not."""
    hw = hardware_fingerprint(describe("1xH200"))
    llama_1b = (
        "type=llama,name=llama-1b,layers=22,hidden=2048,heads=32,kv_heads=4,ffn=5632,vocab=32000,seq=2048"
    )
    sidecar = _sidecar(tmp_path, "1xH200", llama_1b)
    planned = sidecar.strategy
    one = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": planned.zero_stage},
    }
    small = entry_at_start(
        run_id="r", run_dir=tmp_path, hardware=hw, sidecar=sidecar, applies=True, ds_config=one
    )
    kept = entry_at_start(run_id="r", run_dir=tmp_path, hardware=hw, sidecar=sidecar, applies=True)
    assert small.predicted.host_bound is True and small.host_bound
    assert kept.predicted.host_bound is False and not kept.host_bound
    assert Measurement.from_json(small.to_json()).host_bound


def test_a_launch_without_a_plan_records_the_strategy_its_config_states(tmp_path: Path) -> None:
    hw = hardware_fingerprint(describe("1xH100-80GB"))
    ds = {
        "train_micro_batch_size_per_gpu": 8,
        "gradient_accumulation_steps": "auto",  # filled in by accelerate / the Trainer: unknown here
        "bf16": {"enabled": True},
        "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
    }
    entry = entry_at_start(run_id="r", run_dir=tmp_path, hardware=hw, script="train.py", ds_config=ds)
    assert entry.strategy == {
        "stage": 2, "offload_optimizer": "cpu", "offload_param": "none", "micro_batch": 8, "precision": "bf16",
    }  # fmt: skip
    assert entry.family == "z2-opt:cpu-param:none" and entry.predicted == Figures()
    assert entry_at_start(run_id="r", run_dir=tmp_path, hardware=hw, ds_config=None).strategy == {}


def test_the_host_ram_peak_is_the_jobs_own_where_it_was_sampled() -> None:
    """The machine's RAM in use counts other jobs; the job's processes' resident memory is what it needed."""
    from dataclasses import replace

    from runner.metrics.summary import Summary

    snaps = [
        replace(_snap(s, 500.0, 8 << 30, float(s)), job_rss_bytes=(s % 3 + 1) << 30) for s in range(1, 9)
    ]
    assert measured(snaps).host_ram_peak_bytes == 3 << 30  # the job's, not the machine's 2 GiB
    summary = Summary()
    for s in snaps:
        summary.add(s)
    out = summary.to_json()
    assert out["peak_job_rss_bytes"] == 3 << 30 and out["peak_host_ram_bytes"] == 2 << 30
    assert (
        measured([_snap(1, 500.0, 8 << 30, 1.0)]).host_ram_peak_bytes == 2 << 30
    )  # no job sample: the host's
