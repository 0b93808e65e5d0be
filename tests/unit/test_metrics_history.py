"""Constant-memory history, metrics.jsonl round trips, the --json schema, plan numbers from run.json and argv."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from runner.metrics.history import Downsampler, MetricsLog, iter_metrics, load_history, merge_points
from runner.metrics.plan import PlanInfo
from runner.metrics.snapshot import Alert, GpuState, HistoryPoint, Snapshot

JSON_KEYS = {
    "time",
    "step",
    "samples_per_sec",
    "tokens_per_sec",
    "loss",
    "lr",
    "gpus",
    "host_ram_used_bytes",
    "alerts",
}


def test_downsampler_is_bounded_and_keeps_the_whole_span() -> None:
    ds = Downsampler(capacity=16)
    for i in range(100_000):
        ds.add(HistoryPoint(time=float(i), step=i, loss=float(i)))
    pts = ds.points()
    assert len(pts) <= 17 and ds.count == 100_000
    assert pts[-1].step == 99_999  # the newest sample is always visible
    assert pts[0].step is not None and pts[0].step < 100_000 // 8  # and the start is still there
    assert [p.time for p in pts] == sorted(p.time for p in pts)
    # each point is an average of what it stands for: loss == step average
    assert all(p.loss is not None and p.step is not None and p.loss <= p.step for p in pts)


@given(st.lists(st.one_of(st.none(), st.floats(-1e6, 1e6)), min_size=1, max_size=8))
def test_merge_averages_known_values(values: list[float | None]) -> None:
    merged = merge_points([HistoryPoint(time=float(i), loss=v) for i, v in enumerate(values)])
    known = [v for v in values if v is not None]
    assert merged.time == len(values) - 1
    assert merged.loss == (sum(known) / len(known) if known else None)


def test_snapshot_json_round_trip_and_schema(tmp_path: Path) -> None:
    snap = Snapshot(
        time=1.5,
        step=10,
        samples_per_sec=float("nan"),
        gpus=(GpuState(index=0, memory_used_bytes=5, memory_total_bytes=10, utilization=50.0),),
        alerts=(Alert("oom_risk", "warning", "GPU 0 …", gpu=0),),
        notes=("no csv",),
        log_tail=("not persisted",),
    )
    data = snap.to_json()
    assert set(data) >= JSON_KEYS and data["samples_per_sec"] is None  # NaN is not JSON: null
    assert set(data["gpus"][0]) >= {"index", "memory_used_bytes", "memory_total_bytes", "utilization"}
    assert "log_tail" not in data and "history" not in data
    json.dumps(data, allow_nan=False)
    back = Snapshot.from_json(json.loads(json.dumps(data)))
    assert back == Snapshot(**{**snap.__dict__, "samples_per_sec": None})


def test_metrics_log_append_and_stream_skips_torn_lines(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    log = MetricsLog(path)
    for i in range(5):
        log.append(Snapshot(time=float(i), step=i, loss=1.0 / (i + 1)))
    log.close()
    with path.open("a") as fh:
        fh.write('{"time": 9, "step": ')  # a crash mid-line
    assert [s.step for s in iter_metrics(path)] == [0, 1, 2, 3, 4]
    ds = Downsampler(8)
    last = load_history(path, ds)
    assert last is not None and last.step == 4 and len(ds.points()) == 5
    assert path.stat().st_mode & 0o777 == 0o600


def test_plan_from_run_json_and_script_args() -> None:
    run = {
        "plan": {
            "seq_len": 1024,
            "flops_per_token": 2.1e9,
            "predicted_peak_gpu_bytes": 22e9,
            "bogus": 1,
            "total_steps": "x",
        },
        "script_args": ["--deepspeed_config", "ds.json", "--max_steps=500", "--seq-len", "64"],
        "world_size": 8,
    }
    plan = PlanInfo.from_run_json(run)
    assert plan.seq_len == 1024  # the plan wins over the arguments
    assert plan.total_steps == 500 and plan.num_gpus == 8
    assert plan.predicted_peak_gpu_bytes == 22_000_000_000 and isinstance(plan.predicted_peak_gpu_bytes, int)
    assert PlanInfo.from_run_json({"plan": "nonsense"}) == PlanInfo()
    assert PlanInfo().filled_from_args(["--steps", "20", "--steps", "30"]).total_steps == 30


def test_a_huge_metrics_file_is_sampled_not_parsed_whole(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import runner.metrics.history as history

    monkeypatch.setattr(history, "SAMPLE_ABOVE_BYTES", 10_000)
    monkeypatch.setattr(history, "SAMPLED_LINES", 50)
    path = tmp_path / "metrics.jsonl"
    log = MetricsLog(path)
    for i in range(2000):
        log.append(Snapshot(time=float(i), step=i))
    log.close()
    ds = Downsampler(512)
    last = load_history(path, ds)
    assert last is not None and last.step == 1999
    steps = [p.step for p in ds.points()]
    assert len(steps) == 51 and steps == sorted(steps) and steps[0] == 0 and steps[-1] == 1999
