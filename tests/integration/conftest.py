"""Integration tests: no test may leave (or start under) a stale JIT-build lock, nor leave DeepSpeed's all-reduce
files in /dev/shm.

A DeepSpeed job stopped while a rank loads a compiled op leaves torch's build lock file, and every later DeepSpeed
job waits on it for ever (runner/build_locks.py). In the suite that turns one failure into every later real-process
test hanging until its timeout (CI ran out of time that way). So each integration test checks, with dswiz's own
preflight reader, that no lock is stale before it starts, and that it left none: a lock it left is removed (its
builder is dead: nobody holds it) and the test fails, naming it.

Every DeepSpeed CPU job also leaves ~66 MB per rank in /dev/shm, which is memory (runner/reaper.py,
``orphaned_shm_buffers``): a suite of such jobs filled CI's 24 GiB machine until its builds and launches crawled
and timed out. A test that leaves files no process holds fails, naming them (they are removed), and so does one
that finds some before it starts (a fixture of its module ran a job: fixtures run before this check).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner import reaper
from runner.build_locks import find_build_locks, remove_stale
from runner.preflight import check_build_locks


def _stale() -> list[Path]:
    return [lock.path for lock in find_build_locks(os.environ, Path.home()) if not lock.held_by]


@pytest.fixture(autouse=True)
def no_stale_build_lock() -> Iterator[None]:
    # A stuck build: every DeepSpeed job would wait behind it until its timeout. Say so at once, as dswiz launch does.
    stuck = [f for f in check_build_locks(os.environ, Path.home()) if f.code == "op-build-stuck"]
    if stuck:
        pytest.fail(f"{stuck[0].what}: {stuck[0].why}. Fix: {stuck[0].fix}")
    before = _stale()
    if before:
        pytest.fail(
            f"a stale JIT-build lock, {before[0]}, would make every DeepSpeed job here wait for ever: "
            f"remove it (rm {before[0]}) or run scripts/setup.sh, which does"
        )
    yield
    left = [lock for lock in find_build_locks(os.environ, Path.home()) if not lock.held_by]
    kept = [why for why in map(remove_stale, left) if why]
    if left:
        pytest.fail(
            f"this test stopped a job during a JIT build and left its lock file {left[0].path} ("
            + (f"not removed: {kept[0]}" if kept else "removed now, so the tests after it do not hang")
            + "); run scripts/setup.sh first, which builds DeepSpeed's CPU op"
        )


# a job's ranks may still be exiting when its test returns: their files are held until then
_SHM_SETTLE_S = 10.0


@pytest.fixture(autouse=True)
def no_all_reduce_files_left() -> Iterator[None]:
    # set up by now: this module's fixtures ran; an earlier test's ranks may have ended after its own check
    found = reaper.orphaned_shm_buffers()
    if found:
        reaper.remove_orphaned_shm_buffers(min_age_s=0.0)
        where = (
            "were in /dev/shm before this test ran (left by a fixture of this module, an earlier test or run)"
        )
        pytest.fail(_left(found, where))
    before = set(reaper.own_shm_buffers())
    yield
    deadline = time.monotonic() + _SHM_SETTLE_S
    while True:
        new = set(reaper.own_shm_buffers()) - before
        left = [(p, n) for p, n in reaper.orphaned_shm_buffers() if os.path.basename(p) in new]
        if left or not new or time.monotonic() > deadline:
            break
        time.sleep(0.5)  # new files still held: wait for their ranks to end
    if left:
        reaper.remove_orphaned_shm_buffers(min_age_s=0.0)
        pytest.fail(_left(left, "were left in /dev/shm by this test"))
    if new:
        pytest.fail(
            f"{len(new)} DeepSpeed all-reduce file(s) this test's job made are still held {_SHM_SETTLE_S:.0f} s after "
            f"it ended (e.g. {reaper.SHM_DIR}/{sorted(new)[0]}): its ranks are still running"
        )


def _left(files: list[tuple[str, int]], where: str) -> str:
    return (
        f"{len(files)} DeepSpeed all-reduce file(s) that no process holds {where} ({sum(n for _, n in files) >> 20} "
        f"MiB of memory, e.g. {files[0][0]}; removed now): whatever runs DeepSpeed must remove its job's files when "
        "the job ends (dswiz launch, bench/_common.run_in_group and tests/integration/launch_support.run_deepspeed do)"
    )
