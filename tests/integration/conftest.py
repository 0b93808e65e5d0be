"""Integration tests: no test may leave (or start under) a stale JIT-build lock.

A DeepSpeed job stopped while a rank loads a compiled op leaves torch's build lock file, and every later DeepSpeed
job waits on it for ever (runner/build_locks.py). In the suite that turns one failure into every later real-process
test hanging until its timeout (CI ran out of time that way). So each integration test checks, with dswiz's own
preflight reader, that no lock is stale before it starts, and that it left none: a lock it left is removed (its
builder is dead: nobody holds it) and the test fails, naming it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.build_locks import find_build_locks, remove_stale


def _stale() -> list[Path]:
    return [lock.path for lock in find_build_locks(os.environ, Path.home()) if not lock.held_by]


@pytest.fixture(autouse=True)
def no_stale_build_lock() -> Iterator[None]:
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
