"""What the integration tests share when they start DeepSpeed or a launcher themselves: a free port, and the
``deepspeed`` launcher run as a user runs it without dswiz. DeepSpeed's CPU all-reduce leaves one ~66 MB file per
rank in /dev/shm (memory) and never removes it (runner/reaper.py), so ``run_deepspeed`` removes its job's files after,
as ``dswiz launch`` does for its own (the suite's guard, tests/integration/conftest.py, fails a test that leaves
any)."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Sequence
from typing import Any

from runner import reaper


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_deepspeed(argv: Sequence[str], *, master_port: int, **run: Any) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(argv, **run)`` for a launch on ``master_port``; its ranks' /dev/shm files are removed after,
    however it ended."""
    try:
        return subprocess.run(list(argv), **run)
    finally:
        reaper.remove_shm_buffers([master_port])
