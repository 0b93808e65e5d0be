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


def test_a_descendant_that_left_the_group_is_stopped_and_does_not_hold_the_call(
    common: ModuleType, tmp_path: Path
) -> None:
    """A process that escaped the group (its own session) and keeps the output pipe open: the call still ends at
    its timeout, with what was printed before, and the escaped process is stopped (it carries the call's token)."""
    pid_file = tmp_path / "pid"
    escape = (
        "import subprocess, sys, time; print('before', flush=True); "
        "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True); "
        f"open({str(pid_file)!r}, 'w').write(str(g.pid)); time.sleep(60)"
    )
    t0 = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as e:
        common.run_in_group([sys.executable, "-c", escape], timeout=3, capture=True)
    assert time.monotonic() - t0 < 3 + common.PIPE_GRACE_S + 5
    assert e.value.stdout == "before\n"
    pid = _grandchild(pid_file)
    assert _gone(pid), f"the escaped process {pid} outlived the call"


def test_a_sigkilled_bench_leaves_nothing_running(tmp_path: Path) -> None:
    """kill -9 of the bench (a test's timeout, the OOM killer): no handler runs in it, yet its child's grandchild
    and a process that left the child's session are stopped, by dswiz's reaper, which the call started."""
    pid_file, escaped_file = tmp_path / "pid", tmp_path / "escaped"
    escape = (
        "import subprocess, sys, time; "
        "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], start_new_session=True); "
        f"open({str(escaped_file)!r}, 'w').write(str(g.pid)); "
        f"subprocess.run([sys.executable, '-c', {CHILD!r}, {str(pid_file)!r}, 'sleep'])"
    )
    bench = (
        "import sys; sys.path.insert(0, 'bench'); from _common import run_in_group; "
        f"run_in_group([sys.executable, '-c', {escape!r}], timeout=120)"
    )
    proc = subprocess.Popen([sys.executable, "-c", bench], cwd=Path(__file__).resolve().parents[2])
    grandchild, escaped = _grandchild(pid_file), _grandchild(escaped_file)
    proc.kill()
    proc.wait(timeout=10)
    assert _gone(grandchild, within=20), f"grandchild {grandchild} outlived the SIGKILLed bench"
    assert _gone(escaped, within=20), f"the escaped process {escaped} outlived the SIGKILLed bench"


def test_the_all_reduce_files_a_job_left_are_removed_and_a_held_one_is_kept(common: ModuleType) -> None:
    """DeepSpeed's CPU all-reduce leaves one file per rank in /dev/shm (it never removes them): after the call,
    those no process holds are gone; one that a live process holds open stays."""
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("no /dev/shm here")
    tag = f"dswiz-test-{os.getpid()}-{time.monotonic_ns()}"
    left, held = (shm / f"deepspeed_allreduce_buffer_{os.getuid()}_{tag}_2950{r}_0" for r in (1, 2))
    code = f"open({str(left)!r}, 'wb').write(b'x' * 4096)"
    try:
        with open(held, "wb") as holder:  # a job still running: this test holds its file
            holder.write(b"x")
            holder.flush()
            done = common.run_in_group([sys.executable, "-c", code], timeout=60, capture=True)
            assert done.returncode == 0, done.stderr
            assert not left.exists(), "the file the ended job left is still in /dev/shm"
            assert held.exists(), "a file a live process holds was removed"
    finally:
        for p in (left, held):
            p.unlink(missing_ok=True)


def test_undecodable_output_is_replaced_not_lost(common: ModuleType) -> None:
    code = "import sys; sys.stdout.buffer.write(b'ok \\xff\\xfe end\\n')"
    done = common.run_in_group([sys.executable, "-c", code], timeout=60, capture=True)
    assert done.returncode == 0 and done.stdout.startswith("ok ") and done.stdout.endswith(" end\n")


def test_the_count_arguments_take_whole_numbers_of_one_or_more(
    bench_script: Callable[[str], ModuleType],
) -> None:
    import argparse

    common = bench_script("_common")
    ap = argparse.ArgumentParser(exit_on_error=False)
    ap.add_argument("--n", type=common.positive_int)
    ap.add_argument("--ns", type=common.positive_ints)
    assert ap.parse_args(["--n", "3", "--ns", "1,4,16"]) == argparse.Namespace(n=3, ns=(1, 4, 16))
    for flag, bad in (
        ("--n", "0"),
        ("--n", "-2"),
        ("--n", "x"),
        ("--ns", "1,0"),
        ("--ns", "4,"),
        ("--ns", ""),
    ):
        with pytest.raises(argparse.ArgumentError, match=flag):
            ap.parse_args([flag, bad])
