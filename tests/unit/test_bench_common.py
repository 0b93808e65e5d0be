"""bench/_common.run_in_group with real processes: what a bench starts never outlives it, neither on a timeout nor
when its child leaves a process behind."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

# A child that starts a grandchild (a sleeping Python), writes the grandchild's pid, then sleeps or exits.
CHILD = """
import subprocess, sys, time
g = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
open(sys.argv[1], "w").write(str(g.pid))
if sys.argv[2] == "sleep":
    time.sleep(120)
print("child done")
"""


@pytest.fixture(scope="module")
def common(bench_script: Callable[[str], ModuleType]) -> ModuleType:
    return bench_script("_common")


def _gone(pid: int, within: float = 10.0) -> bool:
    """The process ``pid`` has ended (or is a zombie waiting for its reaper) within ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def _grandchild(pid_file: Path) -> int:
    deadline = time.monotonic() + 20
    while not (pid_file.exists() and pid_file.read_text()):
        assert time.monotonic() < deadline, "the child never started its grandchild"
        time.sleep(0.05)
    return int(pid_file.read_text())


def test_a_timeout_kills_the_grandchildren_too(common: ModuleType, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    t0 = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        common.run_in_group([sys.executable, "-c", CHILD, str(pid_file), "sleep"], timeout=3, capture=True)
    assert time.monotonic() - t0 < 30
    pid = _grandchild(pid_file)
    assert _gone(pid), f"grandchild {pid} outlived the timeout"


def test_what_a_finished_child_left_behind_is_stopped(common: ModuleType, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    done = common.run_in_group([sys.executable, "-c", CHILD, str(pid_file), "exit"], timeout=60, capture=True)
    assert done.returncode == 0 and done.stdout.strip() == "child done"
    pid = _grandchild(pid_file)
    assert _gone(pid), f"grandchild {pid} outlived its finished parent"


def test_output_and_exit_status_come_back_as_subprocess_run_gives_them(common: ModuleType) -> None:
    code = "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"
    done = common.run_in_group([sys.executable, "-c", code], timeout=60, capture=True, env=dict(os.environ))
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n")


def test_a_sigterm_to_the_bench_stops_its_childrens_group(tmp_path: Path) -> None:
    """A bench sent SIGTERM while it waits (a device run's time limit, a cancelled CI job) still kills what its child
    started: the handler turns the signal into SystemExit and the group is killed on the way out."""
    pid_file = tmp_path / "pid"
    bench = (
        "import sys; sys.path.insert(0, 'bench'); from _common import run_in_group; "
        f"run_in_group([sys.executable, '-c', {CHILD!r}, {str(pid_file)!r}, 'sleep'], timeout=120)"
    )
    proc = subprocess.Popen([sys.executable, "-c", bench], cwd=Path(__file__).resolve().parents[2])
    pid = _grandchild(pid_file)
    proc.terminate()
    assert proc.wait(timeout=30) == 128 + 15
    assert _gone(pid), f"grandchild {pid} outlived the bench's SIGTERM"


def test_a_descendant_that_left_the_group_does_not_hold_the_call(common: ModuleType) -> None:
    """A process that escaped the group (its own session) and keeps the output pipe open: the call still ends at
    its timeout plus the pipes' grace, with what was printed before."""
    escape = (
        "import subprocess, sys, os; print('before', flush=True); "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(20)'], start_new_session=True); "
        "import time; time.sleep(20)"
    )
    t0 = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as e:
        common.run_in_group([sys.executable, "-c", escape], timeout=2, capture=True)
    assert time.monotonic() - t0 < 2 + common.PIPE_GRACE_S + 5
    assert e.value.stdout == "before\n"


def test_undecodable_output_is_replaced_not_lost(common: ModuleType) -> None:
    code = "import sys; sys.stdout.buffer.write(b'ok \\xff\\xfe end\\n')"
    done = common.run_in_group([sys.executable, "-c", code], timeout=60, capture=True)
    assert done.returncode == 0 and done.stdout.startswith("ok ") and done.stdout.endswith(" end\n")
