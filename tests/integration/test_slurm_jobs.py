"""job.sbatch against a real Slurm: Debian's slurm-wlm 22.05 and munge on this machine, started by
scripts/slurm-up.sh (one slurmctld, two slurmd "n1" and "n2" on this host) and stopped by scripts/slurm-down.sh.

Each job is a real DeepSpeed 0.19.8 job on CPU (gloo), runner/examples/train_tiny.py, written by `dswiz config`
and submitted with `sbatch`; what each job left is read from its run directory (run.json) and Slurm's output
file. Where Slurm cannot be installed or started here, every test is skipped with the reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from runner import rundir
from runner.metrics.target import target_from_run_dir

# A job costs 30-60 s on an idle 2-core machine; a busy one took 5 min for the two-node job (JIT build).
pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "runner" / "examples" / "train_tiny.py"
SLURM_DIR = Path(os.environ.get("DSWIZ_SLURM_DIR", "/tmp/dswiz-slurm"))
NOT_RUN = "SLURM TESTS NOT RUN"


def _daemons_up() -> bool:
    return subprocess.run(["sinfo", "-h"], capture_output=True, check=False).returncode == 0


@pytest.fixture(scope="module")
def slurm() -> Iterator[dict[str, str]]:
    """A running Slurm and the environment to reach it. Stopped at the end when this fixture started it."""
    if sys.platform != "linux":
        pytest.skip(f"{NOT_RUN}: Slurm runs on Linux only")
    env = {**os.environ, "SLURM_CONF": str(SLURM_DIR / "slurm.conf"), "DSWIZ_SLURM_DIR": str(SLURM_DIR)}
    already = shutil.which("sinfo") is not None and (SLURM_DIR / "slurmctld.pid").is_file()
    up = subprocess.run(
        ["bash", str(ROOT / "scripts" / "slurm-up.sh")], env=env, capture_output=True, text=True, check=False
    )
    print(up.stderr.strip())  # the install and start times
    if up.returncode != 0:
        pytest.skip(f"{NOT_RUN}: scripts/slurm-up.sh failed: {up.stderr.strip()[-400:]}")
    try:
        yield env
    finally:
        if not already:
            subprocess.run(["bash", str(ROOT / "scripts" / "slurm-down.sh")], env=env, check=False)


def _job_env(slurm: dict[str, str], tmp: Path) -> dict[str, str]:
    dswiz = Path(sys.executable).parent / "dswiz"
    if not dswiz.is_file():
        pytest.skip(f"{NOT_RUN}: no dswiz entry point beside {sys.executable} (pip install -e .)")
    return {
        **slurm,
        "DSWIZ": str(dswiz),
        "PYTHON": sys.executable,
        "PYTHONPATH": str(ROOT),
        "XDG_STATE_HOME": str(tmp / "state"),
    }


def write_configs(env: dict[str, str], out: Path, *flags: str) -> Path:
    argv = [sys.executable, "-m", "wizard", "config", "--yes", "--no-slurm-gpus", "--torch-adam"]
    argv += ["--precision", "fp32", "--micro-batch", "4", "--out", str(out), *flags]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (out / "job.sbatch").is_file()
    return out / "job.sbatch"


def submit(env: dict[str, str], cwd: Path, sbatch: Path, *script_args: str) -> str:
    proc = subprocess.run(
        ["sbatch", "--parsable", str(sbatch), str(TRAIN), *script_args],
        env=env, cwd=cwd, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().split(";")[0]


def job_state(env: dict[str, str], job: str) -> str:
    proc = subprocess.run(
        ["squeue", "-h", "-j", job, "-o", "%T"], env=env, capture_output=True, text=True, check=False
    )
    return proc.stdout.strip()  # "" once the job has left the queue


def wait_until_gone(env: dict[str, str], job: str, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while job_state(env, job) and time.monotonic() < deadline:
        time.sleep(2)
    if job_state(env, job):
        subprocess.run(["scancel", job], env=env, check=False)
        raise AssertionError(f"job {job} still {job_state(env, job)} after {timeout} s")


def processes_of_job(job: str) -> list[psutil.Process]:
    """Every process Slurm started for the job (they carry SLURM_JOB_ID in their environment)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("SLURM_JOB_ID") == job:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def output(cwd: Path, job: str) -> str:
    return (cwd / f"dswiz-{job}.out").read_text(errors="replace")


def run_dir_of(tmp: Path, job: str, node: str = "") -> Path:
    """The run directory dswiz launch made for the job (``<time>-slurm<job>[-node<K>]``, runner/slurm_env.py)."""
    found = sorted((tmp / "state" / "dswiz" / "runs").glob(f"*-slurm{job}{node}"))
    assert len(found) == 1, found
    return found[0]


def record(tmp: Path, job: str, node: str = "") -> rundir.RunRecord:
    return rundir.read_run_record(run_dir_of(tmp, job, node))


def test_sbatch_of_a_two_rank_job_runs_to_a_success_verdict(slurm: dict[str, str], tmp_path: Path) -> None:
    env = _job_env(slurm, tmp_path)
    sbatch = write_configs(env, tmp_path / "cfg", "--gpus-per-node", "2", "--sbatch")
    for _attempt in range(2):  # DeepSpeed's rare abort at exit on CPU (docs/cpu-testing.md): once more
        job = submit(env, tmp_path, sbatch, "--steps", "6")
        wait_until_gone(env, job)
        final = record(tmp_path, job)
        if final.verdict is not None and final.verdict.kind == "success":
            break
    out = output(tmp_path, job)
    assert "[dswiz] verdict: success: 6 steps in" in out, out[-3000:]
    assert final.world_size == 2 and sorted(final.rank_pids) == [0, 1]
    assert processes_of_job(job) == []


def test_scancel_mid_run_leaves_no_process_and_a_verdict(slurm: dict[str, str], tmp_path: Path) -> None:
    env = _job_env(slurm, tmp_path)
    sbatch = write_configs(env, tmp_path / "cfg", "--gpus-per-node", "2", "--sbatch")
    job = submit(env, tmp_path, sbatch, "--steps", "100000", "--sleep-per-step", "0.05")
    runs = tmp_path / "state" / "dswiz" / "runs"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        found = list(runs.glob(f"*-slurm{job}/run.json"))
        run_dir = found[0].parent if found else runs / "not-yet"
        started = bool(found) and len(rundir.read_run_record(run_dir).rank_pids) == 2
        if started and "'loss'" in output(tmp_path, job):
            break
        time.sleep(1)
    else:
        subprocess.run(["scancel", job], env=env, check=False)
        raise AssertionError("the job did not start training in time:\n" + output(tmp_path, job)[-3000:])
    ranks = [psutil.Process(pid) for pid in rundir.read_run_record(run_dir).rank_pids.values()]
    t0 = time.monotonic()
    subprocess.run(["scancel", job], env=env, check=True)
    wait_until_gone(env, job, timeout=60)
    while processes_of_job(job) and time.monotonic() - t0 < 30:
        time.sleep(0.2)
    print(f"scancel: job {job} gone, no process left after {time.monotonic() - t0:.1f} s")
    assert processes_of_job(job) == []
    assert not any(r.is_running() and r.status() != psutil.STATUS_ZOMBIE for r in ranks)
    final = rundir.read_run_record(run_dir)
    assert final.verdict is not None and final.verdict.kind == "interrupted", output(tmp_path, job)[-3000:]
    assert final.interrupted_by == "SIGTERM"
    assert "[dswiz] verdict: stopped by SIGTERM" in output(tmp_path, job)


def test_two_node_ranks_on_two_slurmd_of_this_host(slurm: dict[str, str], tmp_path: Path) -> None:
    """scripts/slurm-up.sh runs two slurmd (n1, n2) on this host: a real 2-node allocation, one rank per node,
    DeepSpeed's runner with --no_ssh on each node, rendezvous on the first host."""
    env = _job_env(slurm, tmp_path)
    sbatch = write_configs(
        env, tmp_path / "cfg", "--nodes", "2", "--gpus-per-node", "1", "--launcher-mode", "nossh"
    )
    for _attempt in range(2):  # the abort at exit is more frequent with two nodes (docs/cpu-testing.md)
        job = submit(env, tmp_path, sbatch, "--steps", "6")
        wait_until_gone(env, job)
        node0, node1 = record(tmp_path, job, "-node0"), record(tmp_path, job, "-node1")
        if all(r.verdict is not None and r.verdict.kind == "success" for r in (node0, node1)):
            break
    out = output(tmp_path, job)
    assert "0: [dswiz] verdict: success: 6 steps in" in out, out[-3000:]
    assert "1: [dswiz] verdict: success" in out
    assert "nnodes=2, num_local_procs=1, node_rank=0" in out and "node_rank=1" in out
    hostfile = Path(f"{run_dir_of(tmp_path, job, '-node1')}.hostfile")
    assert hostfile.read_text().splitlines()[1:] == ["n1 slots=1", "n2 slots=1"]  # from SLURM_JOB_NODELIST
    assert "--node_rank" in node1.command and node1.command[node1.command.index("--node_rank") + 1] == "1"
    # run.json says where each part ran; the monitor's header shows it (runner/metrics/target.py)
    assert node1.hosts == ("n1", "n2") and node1.scheduler_job == f"slurm {job}"
    assert rundir.placement_words(node1) == f"node 1 of 2 (n1, n2), slurm job {job}"
    assert target_from_run_dir(run_dir_of(tmp_path, job, "-node0")).source.endswith(
        f"node 0 of 2 (n1, n2), slurm job {job}"
    )
    assert processes_of_job(job) == []
