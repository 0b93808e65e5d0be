"""psutil sampling of this machine and of a real process tree (this test's children)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from runner.metrics.host import (
    LOCAL_RANK_VARIABLES,
    HostSampler,
    device_of_path,
    local_rank_of,
    process_tree,
)

SPIN = "import subprocess, sys, time\nc = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\nt = time.time()\nwhile time.time() - t < 60: pass\n"


@contextmanager
def spinner(*args: str, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """SPIN with its child started; both killed at the end."""
    proc = subprocess.Popen([sys.executable, "-c", SPIN, *args], env=env)
    try:
        deadline = time.monotonic() + 10
        while len(process_tree([proc.pid])) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        yield proc
    finally:
        for p in process_tree([proc.pid]):
            p.kill()
        proc.wait()


def test_tree_rss_cpu_and_local_rank() -> None:
    with spinner("--local_rank=3") as proc:
        sampler = HostSampler(lambda: [proc.pid])
        first = sampler.sample()
        time.sleep(0.5)
        second = sampler.sample()
        assert first.job_alive and len(second.processes) == 2  # the spinner and its sleeping child
        spinning = next(p for p in second.processes if p.pid == proc.pid)
        assert spinning.local_rank == 3 and spinning.cpu_percent > 20  # it spins; CPU % needs two readings
        assert second.job_rss_bytes == sum(p.rss_bytes for p in second.processes) > 0
        assert 0 < second.ram_used_bytes < second.ram_total_bytes
    assert not HostSampler(lambda: [proc.pid]).sample().job_alive


def test_disk_of_a_path(tmp_path: Path) -> None:
    device = device_of_path(tmp_path)
    sampler = HostSampler(None, nvme_path=tmp_path)
    sampler.sample(now=1.0)
    (tmp_path / "f").write_bytes(os.urandom(1 << 20))
    second = sampler.sample(now=2.0)
    assert second.disk_device == device
    if device is not None:  # a block device psutil counts: rates after two samples
        assert second.disk_write_bytes_per_sec is not None and second.disk_write_bytes_per_sec >= 0
    assert not second.job_alive and second.job_rss_bytes is None


def test_a_rank_without_local_rank_on_its_command_line_is_known_by_its_environment() -> None:
    """DeepSpeed's launcher with --no_local_rank, torchrun and accelerate give a rank LOCAL_RANK and no argument;
    a process it starts inherits it and counts with it; a launcher's own process is never a rank."""
    with spinner(env={**os.environ, "LOCAL_RANK": "2"}) as proc:
        sample = HostSampler(lambda: [proc.pid]).sample()
        assert [p.local_rank for p in sample.processes] == [2, 2]  # the rank and the child it started
    assert local_rank_of(["python", "-m", "torch.distributed.run", "train.py"], {"LOCAL_RANK": "0"}) is None
    assert (
        local_rank_of(["python", "train.py", "--local_rank", "5"], {"LOCAL_RANK": "1"}) == 5
    )  # argument first
    assert local_rank_of(["python", "train.py"], {"LOCAL_RANK": "x"}) is None


def test_a_rank_under_an_mpi_or_slurm_backend_is_known_by_its_own_variable() -> None:
    """DeepSpeed's Open MPI, MVAPICH, MPICH and Slurm backends start the script with no --local_rank and no
    LOCAL_RANK (DeepSpeed sets that inside the process, which a process's environment file never shows): each
    launcher's own variable names the rank; LOCAL_RANK, where also set, comes first."""
    for name in (
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "MV2_COMM_WORLD_LOCAL_RANK",
        "MPI_LOCALRANKID",
        "SLURM_LOCALID",
    ):
        env = {k: v for k, v in os.environ.items() if k not in LOCAL_RANK_VARIABLES}
        with spinner(env={**env, name: "1"}) as proc:
            sample = HostSampler(lambda: [proc.pid]).sample()
            assert [p.local_rank for p in sample.processes] == [1, 1], name
    assert local_rank_of(["python", "train.py"], {"LOCAL_RANK": "3", "SLURM_LOCALID": "0"}) == 3
    # the first that is a number: a blank LOCAL_RANK hides nothing
    assert local_rank_of(["python3", "train.py"], {"LOCAL_RANK": "", "OMPI_COMM_WORLD_LOCAL_RANK": "1"}) == 1
    assert local_rank_of(["/usr/bin/srun", "python", "train.py"], {"SLURM_LOCALID": "0"}) is None
    # everything in a Slurm allocation has SLURM_LOCALID (the batch script's shell, `srun bash -c`), every MPI
    # daemon its launcher's variables: only a Python process is a rank by them
    for program in ("/bin/bash", "orted", "hydra_pmi_proxy", "ssh"):
        assert local_rank_of([program, "x"], {"SLURM_LOCALID": "0", "MPI_LOCALRANKID": "0"}) is None
    assert local_rank_of(["/venv/bin/python3.11", "-u", "train.py"], {"SLURM_LOCALID": "2"}) == 2


def test_a_launcher_is_known_by_what_it_runs_not_by_a_word_in_its_arguments() -> None:
    from runner.metrics.host import is_launcher

    for argv in (
        ["python", "-u", "-m", "deepspeed.launcher.launch", "--world_info=x"],
        ["/venv/bin/python", "/venv/bin/deepspeed", "train.py"],
        ["/venv/bin/torchrun", "--nproc_per_node", "2", "train.py"],
        ["python", "/venv/bin/accelerate", "launch", "train.py"],
        ["python", "-mtorch.distributed.run", "train.py"],
        ["/usr/bin/mpirun", "-n", "2", "python", "train.py"],
        ["srun", "--ntasks-per-node=2", "python", "train.py"],
    ):
        assert is_launcher(argv), argv
    for argv in (
        ["python", "-u", "/home/u/torchrun-demo/train.py"],
        ["python", "train.py", "--output_dir", "runs/accelerate-vs-torchrun"],
        ["python", "-c", "...", "torch.distributed.run"],
        ["python", "-m", "torch._inductor.compile_worker"],
    ):
        assert not is_launcher(argv), argv
    # a rank whose path names a launcher is still a rank
    assert local_rank_of(["python", "-u", "/home/u/torchrun-demo/train.py"], {"LOCAL_RANK": "1"}) == 1
