"""The rank death watch on real processes: ranks are the launcher's children, not dswiz's, so how each ended is read
from its zombie before the launcher reaps it. A stand-in launcher (a Python process that starts four children and
reaps them only when told, as DeepSpeed's does on its next once-a-second poll) plays the launcher."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import psutil

from runner.job.watchers import DeathWatch, zombie_returncode

LAUNCHER = """
import subprocess, sys
code = "import sys, time; time.sleep(float(sys.argv[1])); sys.exit(int(sys.argv[2]))"
kids = [subprocess.Popen([sys.executable, "-c", code, *a]) for a in (("0.2", "3"), ("60", "0"), ("60", "0"), ("0.2", "0"))]
print(" ".join(str(k.pid) for k in kids), flush=True)
sys.stdin.readline()
for k in kids:
    k.kill()
    k.wait()
"""


def _zombie(pid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, f"{pid} did not end"
        time.sleep(0.01)


def test_deaths_seen_in_one_pass_tie_and_say_how_each_rank_ended() -> None:
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert launcher.stdout is not None and launcher.stdin is not None
        ranks = [int(p) for p in launcher.stdout.readline().split()]
        ticks = iter(range(1000))
        watch = DeathWatch(clock=lambda: float(next(ticks)))  # a new time each time it is asked
        for pid in ranks:
            watch.add(pid)
        assert zombie_returncode(ranks[1]) is None  # running
        psutil.Process(ranks[1]).kill()
        psutil.Process(ranks[2]).terminate()
        for pid in ranks:
            _zombie(pid)
        watch.stop()  # never started: its last pass sees all four
        # rank 0 exits with code 3 and rank 3 with 0 by themselves (this user's processes: a 0 is a real 0)
        assert [watch.died[pid].returncode for pid in ranks] == [3, -signal.SIGKILL, -signal.SIGTERM, 0]
        # one time for the pass: the order the pids are checked in (rank 0 first) is not the order they died in
        assert len({watch.died[pid].at for pid in ranks}) == 1
        launcher.stdin.write("\n")
        launcher.stdin.flush()
        assert launcher.wait(timeout=10) == 0
        assert [zombie_returncode(pid) for pid in ranks] == [None] * 4  # reaped: nothing left to read
    finally:
        launcher.kill()
        launcher.wait()
