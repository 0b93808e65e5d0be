"""scripts/build_cpu_ops.py (run by scripts/setup.sh) on this machine: the DeepSpeed CPU op is ready afterwards, and
the all-reduce files that ended DeepSpeed CPU jobs left in /dev/shm (memory) are gone, while one a live process
holds stays."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from tests.integration.launch_support import run_in_session

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(650)  # a first build, on a busy machine
def test_setup_builds_the_op_and_removes_the_all_reduce_files_jobs_left() -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("no /dev/shm here")
    tag = f"dswiz-test-{os.getpid()}-{time.monotonic_ns()}"
    left, held = (shm / f"deepspeed_allreduce_buffer_{os.getuid()}_{tag}_2950{r}_0" for r in (1, 2))
    left.write_bytes(b"x" * (1 << 20))
    ended = time.time() - 600  # its job ended ten minutes ago
    os.utime(left, (ended, ended))
    try:
        with open(held, "wb") as holder:  # a job still running: this test holds its file
            holder.write(b"x")
            holder.flush()
            proc = run_in_session([sys.executable, "scripts/build_cpu_ops.py"], cwd=ROOT, timeout=600)
            assert proc.returncode == 0, proc.stderr
            assert "deepspeed_shm_comm: ready" in proc.stdout or "no CPU op to build" in proc.stdout, (
                proc.stdout
            )
            assert "DeepSpeed all-reduce file(s) from /dev/shm" in proc.stdout, proc.stdout
            assert not left.exists() and held.exists()
    finally:
        for p in (left, held):
            p.unlink(missing_ok=True)
