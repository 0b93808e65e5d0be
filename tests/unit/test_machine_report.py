"""What a failing run prints about the machine (tests/conftest.py ``machine_lines``): a build lock's holder with its
state, age and command line (a stuck build is told from a slow one), and DeepSpeed's all-reduce files in /dev/shm."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.conftest import machine_lines
from tests.unit.test_build_locks import _lock, holding


def test_a_held_build_lock_names_its_holder_and_the_all_reduce_files_are_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    lock = _lock(tmp_path / "ext", "deepspeed_shm_comm")
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("no /dev/shm here")
    orphan = (
        shm / f"deepspeed_allreduce_buffer_{os.getuid()}_dswiz-test-{os.getpid()}-{time.monotonic_ns()}_1_0"
    )
    orphan.write_bytes(b"x")
    try:
        with holding(lock) as holder:
            lines = machine_lines()
    finally:
        orphan.unlink()
    [held] = [line for line in lines if line.startswith(f"JIT-build lock {lock}")]
    assert f"held by {holder.pid} (sleeping, " in held and "time.sleep(60)" in held
    [files] = [
        line for line in lines if line.startswith("this user's DeepSpeed all-reduce files in /dev/shm: ")
    ]
    assert int(files.split(": ")[1].split(" (")[0]) >= 1 and files.endswith(" held by no process")
