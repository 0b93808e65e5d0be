"""What the integration tests share when they start DeepSpeed or a launcher themselves: a free port, and the
``deepspeed`` launcher run as a user runs it without dswiz. DeepSpeed's CPU all-reduce leaves one ~66 MB file per
rank in /dev/shm (memory) and never removes it (runner/reaper.py), so ``run_deepspeed`` removes its job's files after,
as ``dswiz launch`` does for its own (the suite's guard, tests/integration/conftest.py, fails a test that leaves
any)."""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from runner import reaper

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_in_group() -> Callable[..., subprocess.CompletedProcess[str]]:
    """bench/_common.run_in_group (the bench scripts are files, not a package; loaded once, as tests/conftest.py's
    bench_script loads them)."""
    if "_common" not in sys.modules:
        spec = importlib.util.spec_from_file_location("_common", ROOT / "bench" / "_common.py")
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules["_common"] = module
        spec.loader.exec_module(module)
    return sys.modules["_common"].run_in_group  # type: ignore[no-any-return]


def run_in_session(
    argv: Sequence[str], *, timeout: float, cwd: Path, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(argv, capture_output=True, text=True, timeout=...)`` through the benches' run_in_group: in a
    session of its own, and nothing it starts outlives the call (subprocess.run's timeout kills the child only: a
    launcher's ranks or a build's compilers would stay, holding their files, perhaps a build lock, the output pipe).
    A timeout raises ``TimeoutExpired`` with the output so far."""
    return _run_in_group()(list(argv), timeout=timeout, capture=True, cwd=cwd, env=env)


def run_deepspeed(
    argv: Sequence[str], *, master_port: int, timeout: float, cwd: Path, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``run_in_session`` for a launch on ``master_port``; its ranks' /dev/shm files are removed after, however it
    ended."""
    try:
        return run_in_session(argv, timeout=timeout, cwd=cwd, env=env)
    finally:
        reaper.remove_shm_buffers([master_port])
