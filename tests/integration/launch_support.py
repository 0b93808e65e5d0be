"""What the integration tests share when they start DeepSpeed or a launcher themselves: a free port, and the
``deepspeed`` launcher run as a user runs it without dswiz. DeepSpeed's CPU all-reduce leaves one ~66 MB file per
rank in /dev/shm (memory) and never removes it (runner/reaper.py), so ``run_deepspeed`` removes its job's files after,
as ``dswiz launch`` does for its own (the suite's guard, tests/integration/conftest.py, fails a test that leaves
any)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from collections.abc import Mapping, Sequence
from contextlib import suppress
from pathlib import Path

from runner import reaper


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_in_session(
    argv: Sequence[str], *, timeout: float, cwd: Path, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(argv, capture_output=True, text=True, timeout=...)`` in a session of its own that is killed
    on the way out: subprocess.run's timeout kills the child only, and a launcher's ranks or a build's compilers would
    stay, holding their files, perhaps a build lock, the output pipe. A timeout raises ``TimeoutExpired`` with the
    output so far."""
    proc = subprocess.Popen(
        list(argv), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise subprocess.TimeoutExpired(proc.args, timeout, out, err) from None
    finally:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def run_deepspeed(
    argv: Sequence[str], *, master_port: int, timeout: float, cwd: Path, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``run_in_session`` for a launch on ``master_port``; its ranks' /dev/shm files are removed after, however it
    ended."""
    try:
        return run_in_session(argv, timeout=timeout, cwd=cwd, env=env)
    finally:
        reaper.remove_shm_buffers([master_port])
