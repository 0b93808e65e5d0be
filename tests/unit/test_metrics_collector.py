"""The Collector over a run directory (recorded logs and csv), the fake NVML, and this test's own process as the
job; and attaching by PID to a process dswiz did not start."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from runner import rundir
from runner.metrics.attach import resolve_target, target_from_pid
from runner.metrics.collector import Collector
from runner.metrics.history import iter_metrics
from runner.metrics.host import LOCAL_RANK_VARIABLES
from runner.metrics.logsource import LogSource
from tests.fakes.fake_nvml import FakeNvml, hgx_h200
from wizard.errors import DswizError
from wizard.hardware.gpu_sampler import GpuSampler
from wizard.units import GiB

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "cpu_zero2_ok"


def make_run(tmp_path: Path, plan: dict[str, object] | None = None) -> Path:
    run = tmp_path / "20261130-014135"
    (run / "logs").mkdir(parents=True)
    shutil.copy(FIXTURE / "combined.log", run / rundir.COMBINED_LOG)
    shutil.copytree(FIXTURE / "csv", run / rundir.CSV_DIR)
    record = {"run_id": run.name, "status": "running", "script_args": ["--steps", "40"], "plan": plan or {}}
    (run / rundir.RUN_JSON).write_text(json.dumps(record))
    return run


def fake_gpus(used_gib: float) -> FakeNvml:
    gpus = hgx_h200(2)
    for g in gpus:
        g.memory_used = int(used_gib * GiB)
        g.utilization = 90
        g.processes = [(os.getpid(), int((used_gib - 1) * GiB)), (1, GiB)]  # pid 1 is not the job's
    return FakeNvml(gpus)


def test_collector_snapshot_from_a_run_dir(tmp_path: Path) -> None:
    run = make_run(tmp_path, {"predicted_peak_gpu_bytes": 100 * GiB})
    c = Collector(run, pids_provider=lambda: [os.getpid()], gpu_sampler=GpuSampler(fake_gpus(120)))
    snap = c.poll_once()
    assert snap.source == "run 20261130-014135" and snap.step == 20 and snap.total_steps == 40
    assert snap.job_state == "finished"  # the recorded log ends with both ranks exiting successfully
    assert [g.job_memory_bytes for g in snap.gpus] == [119 * GiB, 119 * GiB]  # only the job's pid counted
    assert [g.predicted_peak_bytes for g in snap.gpus] == [100 * GiB] * 2
    assert {a.code for a in snap.alerts} == {"above_prediction"}
    assert snap.job_rss_bytes and snap.job_rss_bytes > 0 and snap.host_ram_total_bytes
    assert snap.log_tail[-1].endswith("Process 6011 exits successfully.")
    assert len(snap.history) == 1 and snap.history[0].gpu_utils == (90, 90)
    c.stop()
    assert [s.step for s in iter_metrics(run / rundir.METRICS_JSONL)] == [20]  # the end is recorded once


def test_one_writer_per_run_and_history_survives_reattach(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    (run / rundir.COMBINED_LOG).write_text("")  # a job that has not printed yet: state "starting"
    first = Collector(run, gpu_sampler=GpuSampler(FakeNvml([])))
    second = Collector(run, gpu_sampler=GpuSampler(FakeNvml([])))
    assert first.persisting and not second.persisting
    for _ in range(3):
        first.poll_once()
        second.poll_once()
    first.stop()
    second.stop()
    assert len(list(iter_metrics(run / rundir.METRICS_JSONL))) == 4  # 3 polls + the writer's last at stop()
    third = Collector(run, gpu_sampler=GpuSampler(FakeNvml([])))
    assert third.previous() is not None and third.history.count == 4
    snap = third.poll_once()
    assert (
        len(snap.history) == 5
        and snap.gpu_note == "no NVIDIA GPU visible: the NVIDIA driver is loaded but reports no GPUs"
    )
    third.stop()


def test_collector_thread_start_latest_stop(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    c = Collector(run, interval=0.05, gpu_sampler=GpuSampler(FakeNvml([]))).start()
    deadline = time.monotonic() + 10
    while c.latest() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    latest = c.latest()
    assert latest is not None and latest.step == 20
    assert c.stop() is not None and c.errors == 0


def test_job_end_seen_from_run_json(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    (run / rundir.COMBINED_LOG).write_text("")
    clock = [1000.0]
    c = Collector(run, gpu_sampler=GpuSampler(FakeNvml([])), clock=lambda: clock[0])
    assert c.poll_once().job_state == "starting"
    record = json.loads((run / rundir.RUN_JSON).read_text())
    record.update(status="finished", exit_code=3)
    (run / rundir.RUN_JSON).write_text(json.dumps(record))
    clock[0] += 5
    snap = c.poll_once()
    assert snap.job_state == "failed" and snap.exit_code == 3 and [a.code for a in snap.alerts] == ["exit"]
    c.stop()


def test_resolve_target_errors_and_latest(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    with pytest.raises(DswizError, match="no runs under"):
        resolve_target(None, root)
    root.mkdir()
    for name in ("20261130-010000", "20261130-020000"):
        (root / name).mkdir()
        record = rundir.RunRecord(name, str(root / name), "running", 0.0, ("python", "train.py"), "train.py")
        rundir.write_run_record(root / name, record)
    assert resolve_target(None, root).run_dir == root / "20261130-020000"
    assert resolve_target("20261130-010000", root).run_dir == root / "20261130-010000"
    with pytest.raises(DswizError, match="no run 20261130-030000"):
        resolve_target("20261130-030000", root)
    with pytest.raises(DswizError, match="not a dswiz run directory"):
        resolve_target(str(tmp_path), root)
    with pytest.raises(DswizError, match="neither a run directory"):
        resolve_target("latest-please", root)
    with pytest.raises(DswizError, match="no process with PID"):
        resolve_target("999999999", root)


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (bytes(range(128, 256)), "cannot be read"),
        (b"[1]", "holds list, not a JSON object"),
        (b'{"pid": "abc"}', "lacks run_id"),
    ],
    ids=["binary", "a-list", "not-a-record"],
)
def test_a_damaged_run_json_is_refused_before_anything_is_written(
    tmp_path: Path, content: bytes, said: str
) -> None:
    """`dswiz monitor DIR` on a run.json that is no run record: one message naming the file and what is wrong, not
    a dashboard of a job whose processes it cannot know (it would wait forever), and no metrics.jsonl left in DIR."""
    run = tmp_path / "20261130-010000"
    run.mkdir()
    (run / rundir.RUN_JSON).write_bytes(content)
    with pytest.raises(DswizError, match=said) as info:
        resolve_target(str(run), tmp_path)
    assert str(run / rundir.RUN_JSON) in info.value.problem and "logs/" in (info.value.fix or "")
    assert sorted(p.name for p in run.iterdir()) == [rundir.RUN_JSON]


RANK_SCRIPT = (
    "import sys, time\nprint('[Rank 0] step=5, skipped=0, lr=[0.01], mom=[]', flush=True)\ntime.sleep(60)\n"
)


def test_attach_by_pid_to_a_job_dswiz_did_not_start(tmp_path: Path) -> None:
    cfg = tmp_path / "ds.json"
    cfg.write_text(
        json.dumps(
            {
                "steps_per_print": 5,
                "log_level": "info",
                "csv_monitor": {"enabled": True, "output_path": "csvout", "job_name": "j"},
            }
        )
    )
    log = tmp_path / "out.log"
    argv = [
        sys.executable,
        "-c",
        RANK_SCRIPT,
        "--local_rank=0",
        "--deepspeed_config",
        "ds.json",
        "--max_steps",
        "70",
    ]
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        # a user attaches to a rank that runs: until its exec, /proc shows this test's own command line
        deadline = time.monotonic() + 10
        while psutil.Process(proc.pid).cmdline()[-1:] != ["70"] and time.monotonic() < deadline:
            time.sleep(0.01)
        target = target_from_pid(proc.pid)
        assert target.logs == (log,) and target.run_dir is None
        assert target.csv_dir == tmp_path / "csvout" / "j"  # relative to the rank's working directory
        assert target.plan.total_steps == 70 and target.plan.num_gpus == 1
        assert any(n.startswith("DeepSpeed config: ") for n in target.notes)
        assert any("history is not kept" in n for n in target.notes)
        deadline = time.monotonic() + 10
        while "step=5" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        c = Collector(target=target, gpu_sampler=GpuSampler(FakeNvml([])))
        snap = c.poll_once()
        assert snap.step == 5 and snap.job_state == "running" and snap.job_rss_bytes
        proc.kill()
        proc.wait()
        # processes gone, no error seen, and not dswiz's child: how it ended is not known (never "finished")
        assert c.poll_once().job_state == "ended"
        c.stop()
    finally:
        proc.kill()
        proc.wait()


def test_attach_by_pid_says_when_output_goes_to_a_pipe(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], stdout=subprocess.PIPE)
    try:
        target = target_from_pid(proc.pid)
        assert target.logs == ()
        assert any("terminal or a pipe" in n for n in target.notes)
        assert any("does not look like a DeepSpeed" in n for n in target.notes)
    finally:
        proc.kill()
        proc.wait()


def test_gpu_states_keep_the_jobs_gpus_and_do_not_guess_in_containers() -> None:
    from runner.metrics.collector import gpu_states
    from wizard.hardware.gpu_sampler import GpuProcess, GpuSample

    gpus = [
        GpuSample(0, processes=(GpuProcess(10, 5 * GiB), GpuProcess(99, GiB))),
        GpuSample(1, processes=(GpuProcess(99, GiB),)),  # someone else's job
        GpuSample(2, processes=(GpuProcess(11, None),)),  # MIG: the job is here, its share unknown
    ]
    states = gpu_states(gpus, {10, 11})
    assert [(g.index, g.job_memory_bytes) for g in states] == [(0, 5 * GiB), (2, None)]
    # no job pid on any GPU (PID namespaces differ): all GPUs shown, job share unknown
    assert [(g.index, g.job_memory_bytes) for g in gpu_states(gpus, {12345})] == [
        (0, None),
        (1, None),
        (2, None),
    ]


def test_log_source_attaches_to_rank_logs_once_each_and_reads_the_head_of_long_ones(tmp_path: Path) -> None:
    """The monitor's rank logs come from RankLogTail: the end of each file, the setup lines from the head of a
    long one, and a file named one by one (attach by PID) is followed once, with the rank it was given."""
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    long_log = ranks / "20261130-010000_rank1.log"
    long_log.write_text("dist_world_size=2\n" + ("filler\n" * 400_000) + "last of rank 1\n")
    named = ranks / "20261130-010000_rank0.log"
    named.write_text("first of rank 0\n")
    source = LogSource([], [ranks], ranked_files={named: 7}, attach=True, keep_lines=10**6, clock=lambda: 0.0)
    events = source.poll()
    assert [(e.kind, e.rank) for e in events] == [("world", 1)]  # from the head: the tail no longer shows it
    lines = list(source.recent_lines)
    assert lines[0] == "[r7] first of rank 0" and lines[-1] == "[r1] last of rank 1"
    assert sum(line.startswith("[r7]") for line in lines) == 1 and "[r1] dist_world_size=2" not in lines
    assert source.paths == [named, long_log] and source.bytes_read < 3 * 1024 * 1024
    assert source.poll() == [] and source.take_head_events() == []
    source.close()


RANK_WITH_WORKER = (
    "import subprocess, sys, time\n"
    "w = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])  # a data loader worker\n"
    "time.sleep(60)\n"
)
LAUNCHER = (
    "import os, subprocess, sys, time\n"
    "ranks = [subprocess.Popen([sys.executable, '-c', sys.argv[1]], env={**os.environ, 'LOCAL_RANK': str(r)})\n"
    "         for r in range(2)]\n"
    "time.sleep(60)\n"
)


@contextlib.contextmanager
def process_tree_of(
    argv: list[str], descendants: int, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """``argv`` started and given up to 15 s to have ``descendants`` processes below it; the whole tree killed at
    the end."""
    proc = subprocess.Popen(argv, env=env)
    try:
        deadline = time.monotonic() + 15
        while (
            len(psutil.Process(proc.pid).children(recursive=True)) < descendants
            and time.monotonic() < deadline
        ):
            time.sleep(0.05)
        yield proc
    finally:
        for p in psutil.Process(proc.pid).children(recursive=True):
            p.kill()
        proc.kill()
        proc.wait()


def test_attach_inside_a_slurm_allocation_counts_no_shell_as_a_rank(tmp_path: Path) -> None:
    """Inside a Slurm allocation every process has SLURM_LOCALID, the batch script's shell too: a shell that runs a
    launcher of two ranks is two GPUs, not three, and the first rank's arguments (not the shell's) name the job."""
    launcher = tmp_path / "bin" / "torchrun"
    launcher.parent.mkdir()
    launcher.write_text(LAUNCHER)
    env = {k: v for k, v in os.environ.items() if k not in LOCAL_RANK_VARIABLES}
    line = f"{shlex.quote(sys.executable)} {shlex.quote(str(launcher))} {shlex.quote(RANK_WITH_WORKER)}; true"
    with process_tree_of(["/bin/bash", "-c", line], 5, env={**env, "SLURM_LOCALID": "0"}) as proc:
        assert target_from_pid(proc.pid).plan.num_gpus == 2


def test_attach_by_pid_counts_ranks_that_have_no_local_rank_argument(tmp_path: Path) -> None:
    """A launcher that gives its ranks LOCAL_RANK only (torchrun, accelerate, DeepSpeed's with --no_local_rank):
    two ranks, each with a worker of its own, are two GPUs, not none (nor four)."""
    launcher = tmp_path / "bin" / "torchrun"  # `python .../bin/torchrun`, as the console script runs
    launcher.parent.mkdir()
    launcher.write_text(LAUNCHER)
    with process_tree_of([sys.executable, str(launcher), RANK_WITH_WORKER], 4) as proc:
        target = target_from_pid(proc.pid)
        assert target.plan.num_gpus == 2
        assert not any("does not look like a DeepSpeed" in n for n in target.notes)
        assert target_from_pid(psutil.Process(proc.pid).children()[0].pid).pids == (
            proc.pid,
        )  # a rank's PID too
