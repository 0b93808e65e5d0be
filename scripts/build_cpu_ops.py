"""Build DeepSpeed's shared-memory all-reduce op for the CPU once, at setup, rather than inside the first job.

DeepSpeed 0.19.8 on its CPU accelerator loads the op ``deepspeed_shm_comm`` in every process that starts its
communication backend (deepspeed/comm/torch.py: ``TorchBackend.__init__`` calls ``build_shm_op``). The first load
compiles it with torch's JIT extension loader, about a minute on two cores, holding the build's lock file
(``<torch_extensions>/<py>_cpu/deepspeed_shm_comm/lock``, torch/utils/file_baton.py). A job stopped during that
minute (a test's timeout, Ctrl-C) leaves the file, and every later DeepSpeed job then waits on it for ever, silently
(docs/reliability.md). Built here, a job's load takes a tenth of a second.

Every build lock that no process holds open is removed first, this op's or another's: it is what a killed build
leaves (the rule of ``dswiz launch``'s preflight, runner/build_locks.py), and a machine that was copied or stopped
mid-build keeps it. So are this user's DeepSpeed all-reduce files in /dev/shm that no process holds: every CPU job
leaves ~66 MB per rank there, in memory, and DeepSpeed never removes them (runner/reaper.py,
``orphaned_shm_buffers``); on a machine that ran many, the next builds and jobs crawl for want of memory. On a machine whose DeepSpeed accelerator is not the CPU there
is nothing to build. Exit 1, with the compiler's last lines, when the build fails (setup.sh then warns and goes on:
the first DeepSpeed job will try the build again).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from runner.build_locks import find_build_locks, remove_stale
from runner.reaper import SHM_DIR, remove_orphaned_shm_buffers

OP = "deepspeed_shm_comm"


def main() -> int:
    for lock in find_build_locks(os.environ, Path.home()):
        if lock.held_by:
            continue
        left = remove_stale(lock)
        print(left or f"removed {lock.path}: a killed build of {lock.op} left it, and no process holds it")
    files, freed = remove_orphaned_shm_buffers()
    if files:
        print(f"removed {files} DeepSpeed all-reduce file(s) from {SHM_DIR} ({freed / 2**30:.1f} GiB of memory) that "
              "ended CPU jobs left and no process holds")  # fmt: skip
    try:
        from deepspeed.accelerator import get_accelerator
        from deepspeed.comm.torch import build_shm_op
    except ImportError as e:
        print(f"DeepSpeed is not importable here ({e}): pip install -e '.[deepspeed]'", file=sys.stderr)
        return 1
    if get_accelerator().device_name() != "cpu":
        print(f"DeepSpeed's accelerator here is {get_accelerator().device_name()}: no CPU op to build")
        return 0
    started = time.monotonic()
    try:
        op = build_shm_op()
    except Exception as e:  # the compiler's error, from torch.utils.cpp_extension
        last = "\n".join(str(e).splitlines()[-15:])
        print(
            f"building DeepSpeed's {OP} op failed:\n{last}\n"
            "it needs a C++ compiler and the Python headers (Debian: apt-get install g++ python3-dev)",
            file=sys.stderr,
        )
        return 1
    took = time.monotonic() - started
    if op is None:
        print(f"DeepSpeed does not use {OP} on this platform: nothing to build")
    else:
        print(f"DeepSpeed's CPU op {OP}: ready ({took:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
