"""Stale JIT-build locks, found with real files and real processes: a lock no process holds is a warning with the
`rm` that fixes it; one a running build holds open is only a note; none at all is silence. The same for DeepSpeed's
CPU all-reduce files in /dev/shm that ended jobs left."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from runner.build_locks import STUCK_AFTER_S, build_roots, find_build_locks, remove_stale
from runner.preflight import check_build_locks, check_shm_buffers
from wizard.findings import Severity


def _lock(root: Path, *parts: str) -> Path:
    path = root.joinpath(*parts, "lock")
    path.parent.mkdir(parents=True)
    path.write_text("")
    return path


@contextmanager
def holding(path: Path) -> Iterator[subprocess.Popen[str]]:
    """A process that holds ``path`` open, as a build holds its lock, until the block ends (then it is killed)."""
    code = "import sys, time; f = open(sys.argv[1]); print('open', flush=True); time.sleep(60)"
    holder = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
        yield holder
    finally:
        holder.kill()
        holder.wait()


def test_the_default_root_is_the_users_cache_and_torch_extensions_dir_wins(tmp_path: Path) -> None:
    assert build_roots({}, tmp_path) == [tmp_path / ".cache" / "torch_extensions"]
    assert build_roots({"XDG_CACHE_HOME": "/c"}, tmp_path) == [Path("/c/torch_extensions")]
    assert build_roots({"TORCH_EXTENSIONS_DIR": "/x", "XDG_CACHE_HOME": "/c"}, tmp_path) == [Path("/x")]


def test_a_lock_nobody_holds_is_stale_and_the_fix_removes_exactly_it(tmp_path: Path) -> None:
    stale = _lock(tmp_path / ".cache" / "torch_extensions", "py311_cu130", "cpu_adam")
    (tmp_path / ".cache" / "torch_extensions" / "py311_cu130" / "fused_adam").mkdir()  # built, no lock: fine
    [finding] = check_build_locks({}, tmp_path)
    assert finding.severity is Severity.WARNING and finding.code == "op-build-lock-stale"
    assert "cpu_adam" in finding.what and "hangs before its first step" in finding.why
    subprocess.run(
        shlex.split(finding.fix.split("  (")[0]), check=True
    )  # the fix, as the user would paste it
    assert not stale.exists() and check_build_locks({}, tmp_path) == []


def test_a_lock_a_running_build_holds_open_is_a_note_with_its_pid(tmp_path: Path) -> None:
    lock = _lock(tmp_path / "ext", "aio")
    env = {"TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    with holding(lock) as holder:
        [found] = find_build_locks(env, tmp_path)
        assert found.op == "aio" and holder.pid in found.held_by
        [finding] = check_build_locks(env, tmp_path)
        assert finding.severity is Severity.INFO and str(holder.pid) in finding.what
    deadline = time.monotonic() + 5
    while find_build_locks(env, tmp_path)[0].held_by and time.monotonic() < deadline:
        time.sleep(0.05)
    assert check_build_locks(env, tmp_path)[0].severity is Severity.WARNING  # its builder died: now stale


def test_a_lock_held_for_longer_than_any_build_takes_is_a_stuck_build_with_how_to_check_and_end_it(
    tmp_path: Path,
) -> None:
    """CI once waited behind a build lock whose holder never let go: every DeepSpeed job hung to its timeout."""
    lock = _lock(tmp_path / "ext", "deepspeed_shm_comm")
    env = {"TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    with holding(lock) as holder:
        [finding] = check_build_locks(env, tmp_path)
        assert finding.code == "op-build-running"  # just taken
        taken = time.time() - STUCK_AFTER_S - 120
        os.utime(lock, (taken, taken))  # FileBaton created it then
        [found] = find_build_locks(env, tmp_path)
        assert found.stuck and found.age_s is not None and found.age_s > STUCK_AFTER_S
        [finding] = check_build_locks(env, tmp_path)
        assert finding.severity is Severity.WARNING and finding.code == "op-build-stuck"
        assert (
            f"process {holder.pid} has held" in finding.what
            and f"for {STUCK_AFTER_S // 60 + 2} min" in finding.what
        )
        assert (
            f"ps -o pid,stat,etime,args -p {holder.pid}" in finding.fix
            and f"kill {holder.pid}" in finding.fix
        )
    assert not find_build_locks(env, tmp_path)[0].stuck  # nobody holds it: stale, not stuck


def test_no_cache_folder_at_all_is_silence(tmp_path: Path) -> None:
    assert check_build_locks({}, tmp_path / "nobody") == []
    assert check_build_locks({"TORCH_EXTENSIONS_DIR": str(tmp_path / "missing")}, tmp_path) == []


def test_a_folder_named_lock_blocks_the_build_too_and_the_fix_removes_it(tmp_path: Path) -> None:
    folder = tmp_path / "ext" / "fused_adam" / "lock"
    folder.mkdir(parents=True)
    [finding] = check_build_locks({"TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}, tmp_path)
    assert finding.code == "op-build-lock-stale" and finding.fix.startswith(f"rm -r {folder}")


def test_remove_stale_removes_a_lock_nobody_holds_and_leaves_one_taken_meanwhile(tmp_path: Path) -> None:
    """scripts/build_cpu_ops.py and the integration tests' guard remove stale locks with remove_stale: it checks
    again, just before, that no process holds the file."""
    env = {"TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    stale = _lock(tmp_path / "ext", "deepspeed_shm_comm")
    [found] = find_build_locks(env, tmp_path)
    assert remove_stale(found) is None and not stale.exists()
    assert remove_stale(found) is None  # already gone: nothing to do
    # Found stale, then a build takes the lock before the removal: it stays.
    stale.write_text("")
    [found] = find_build_locks(env, tmp_path)
    with holding(stale):
        assert found.held_by == ()
        why = remove_stale(found)
        assert why is not None and "may be held" in why and stale.exists()


def test_remove_stale_leaves_a_folder_named_lock_with_the_command_that_removes_it(tmp_path: Path) -> None:
    folder = tmp_path / "ext" / "fused_adam" / "lock"
    folder.mkdir(parents=True)
    [found] = find_build_locks({"TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}, tmp_path)
    why = remove_stale(found)
    assert why is not None and f"rm -r {folder}" in why and folder.is_dir()


def test_all_reduce_files_no_process_holds_are_a_warning_whose_rm_removes_exactly_them(
    tmp_path: Path,
) -> None:
    uid = os.getuid()
    files = [tmp_path / f"deepspeed_allreduce_buffer_{uid}_127.0.0.1_2950{r}_0" for r in range(3)]
    for f in files:
        f.write_bytes(b"x" * 1024)
    assert check_shm_buffers(str(tmp_path / "none")) == []
    with holding(files[0]):  # a running job's file: not counted
        [finding] = check_shm_buffers(str(tmp_path))
    assert finding.severity is Severity.WARNING and finding.code == "shm-buffers-left"
    assert finding.what.startswith("2 DeepSpeed all-reduce file(s)") and "2.0 KiB" in finding.what
    assert finding.fix == "rm " + " ".join(shlex.quote(str(f)) for f in files[1:])
    subprocess.run(finding.fix, shell=True, check=True)
    assert [f.exists() for f in files] == [True, False, False]
    assert len(check_shm_buffers(str(tmp_path))) == 1  # its holder is gone: an orphan now


def test_many_left_all_reduce_files_are_removed_by_a_command_that_takes_exactly_them(tmp_path: Path) -> None:
    """Past four files the fix is the reaper's own removal, which spares a running job's files (a pattern would
    not); run here on /dev/shm itself, it must leave this test's held file and another user's alone."""
    uid = os.getuid()
    for r in range(6):
        (tmp_path / f"deepspeed_allreduce_buffer_{uid}_127.0.0.1_2960{r}_0").write_bytes(b"x")
    [finding] = check_shm_buffers(str(tmp_path))
    assert finding.what.startswith("6 DeepSpeed") and finding.fix.endswith(" --remove-orphaned-shm")
    shm = Path("/dev/shm")
    if not shm.is_dir():
        return
    held = shm / f"deepspeed_allreduce_buffer_{uid}_dswiz-test-{os.getpid()}-{time.monotonic_ns()}_29600_0"
    held.write_bytes(b"x")
    try:
        with holding(held):
            done = subprocess.run(shlex.split(finding.fix), capture_output=True, text=True, check=True)
            assert done.stdout.startswith("removed ") and held.exists()
    finally:
        held.unlink()
