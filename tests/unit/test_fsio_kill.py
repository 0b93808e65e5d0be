"""Kill-at-every-write-step: the real config-set writer (wizard.service.files.write_files, which every front door
calls) runs in a forked child that SIGKILLs itself at its k-th file-system change, for every k until it finishes.
After each kill the folder, read the way dswiz reads it (runner.configdir.find_configs), holds exactly the old set
or exactly the new one; the user's own file is untouched; the next write leaves the new set, no temp file, no
staging folder, and the old content in a backup."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from runner.configdir import ConfigChoice, find_configs
from wizard.errors import DswizError
from wizard.fsio import COMMIT_PREFIX, STAGING_PREFIX
from wizard.service.files import write_files

ROOT = Path(__file__).resolve().parents[2]
# Every call that changes the file system on the writer's path (tempfile and shutil look these up on `os` too).
MUTATING = ("open", "write", "fsync", "fchmod", "mkdir", "rename", "replace", "link", "unlink", "rmdir")

OLD = {
    "ds_config.json": '{"train_micro_batch_size_per_gpu": 4}\n',
    "accelerate.yaml": "deepspeed_config:\n  deepspeed_config_file: ds_config.json\n",
    "hostfile": "localhost slots=2\n",
    "launch.sh": "#!/bin/sh\nexec deepspeed --num_gpus 2 train.py\n",
    "dswiz-plan.json": '{"old": true}\n',
}
NEW = {
    **OLD,
    "ds_config.json": '{"train_micro_batch_size_per_gpu": 8}\n',
    "launch.sh": "#!/bin/sh\nexec deepspeed --num_gpus 2 --master_port 29511 train.py\n",
    "dswiz-plan.json": '{"new": true}\n',
    ".deepspeed_env": "NCCL_DEBUG=WARN\n",
}
NAMES = {**OLD, **NEW}
USER_FILE = ("train.py", "print('the user wrote this')\n")


def set_on_disk(folder: Path, names: Mapping[str, str]) -> dict[str, str]:
    return {n: (folder / n).read_text() for n in names if (folder / n).is_file()}


def leftovers(folder: Path) -> list[str]:
    return sorted(
        e for e in os.listdir(folder) if e.startswith((STAGING_PREFIX, COMMIT_PREFIX)) or e.endswith(".tmp")
    )


def run_killed_at(step: int, target: Callable[[], Any], counted: tuple[str, ...] = MUTATING) -> bool:
    """Run ``target`` in a forked child that SIGKILLs itself at its ``step``-th call of the ``counted`` os
    functions; True when the child was killed (False: it finished before reaching that step). The child failing
    otherwise fails the test."""
    pid = os.fork()
    if pid == 0:  # the child: count, then die exactly as the OOM killer would make it
        code = 1
        try:
            calls = [0]

            def counting(real: Callable[..., Any]) -> Callable[..., Any]:
                def wrapper(*args: Any, **kwargs: Any) -> Any:
                    calls[0] += 1
                    if calls[0] == step:
                        os.kill(os.getpid(), signal.SIGKILL)
                    return real(*args, **kwargs)

                return wrapper

            for name in counted:
                setattr(os, name, counting(getattr(os, name)))
            target()
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return os.WTERMSIG(status) == signal.SIGKILL
    assert os.WEXITSTATUS(status) == 0, f"the writer failed before step {step} (its traceback is above)"
    return False


def kill_every_step(folder: Path, old: Mapping[str, str] | None) -> list[str]:
    """Write OLD (when given), then NEW with --force semantics killed at each step; returns "old"/"new" per kill."""
    seen: list[str] = []
    mixed: list[int] = []
    names = NAMES
    for step in range(1, 500):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        (folder / USER_FILE[0]).write_text(USER_FILE[1])
        if old is not None:
            write_files(folder, old, force=False)
        if not run_killed_at(step, lambda: write_files(folder, NEW, force=True)):
            break
        raw = set_on_disk(folder, names)
        if raw not in (
            {} if old is None else dict(old),
            dict(NEW),
        ):  # mid-move: the commit marks it as decided
            assert any(e.startswith(COMMIT_PREFIX) for e in os.listdir(folder)), f"step {step}: unmarked mix"
            mixed.append(step)
        try:
            choice: ConfigChoice | None = find_configs(
                folder
            )  # the reader: finishes or undoes what the kill left
        except DswizError:
            choice = None  # nothing written yet: no config in the folder
        on_disk = set_on_disk(folder, names)
        assert (choice is None) == (on_disk == {})
        assert on_disk in ({} if old is None else dict(old), dict(NEW)), f"kill at step {step}: a mixed set"
        seen.append("new" if on_disk == dict(NEW) else "old")
        assert leftovers(folder) == [], f"kill at step {step}: left {leftovers(folder)}"
        assert (folder / USER_FILE[0]).read_text() == USER_FILE[1]
        if choice is not None and on_disk == dict(NEW):
            assert (
                choice.launcher == "deepspeed" and choice.master_port == 29511
            )  # launch.sh read is the new one
        results = write_files(folder, NEW, force=True)  # the next write
        assert set_on_disk(folder, names) == dict(NEW) and leftovers(folder) == []
        assert stat.S_IMODE((folder / "launch.sh").stat().st_mode) == 0o755
        if old is not None:  # nothing lost: every replaced file's old content is in a backup
            for name, text in old.items():
                if NEW[name] != text:
                    kept = [p.read_text() for p in folder.glob(f"{name}.bak-*")]
                    assert kept == [text], f"kill at step {step}: {name} backups {kept}"
        assert all(r.path.read_text() == NEW[r.path.name] for r in results)
    else:
        pytest.fail("the writer never finished")
    print(
        f"{len(seen)} kill points: {seen.count('old')} old, {seen.count('new')} new; mixed until read: {mixed}"
    )
    return seen


@pytest.fixture
def folder(tmp_path: Path) -> Iterator[Path]:
    """A folder on tmpfs where there is one: fsync costs nothing there, and what is tested is the order of the
    steps, not the disk (~50 kills per test: 2 s instead of 10 s)."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path / "out"
        return
    base = Path(tempfile.mkdtemp(prefix="dswiz-kill-", dir=shm))
    try:
        yield base / "out"
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_a_kill_at_any_step_of_a_first_write_leaves_nothing_or_the_new_set(folder: Path) -> None:
    seen = kill_every_step(folder, old=None)
    assert len(seen) > 20 and seen[0] == "old" and seen[-1] == "new"
    # once new, always new: the commit is one step, later kills only finish it
    assert seen == sorted(seen, key=("old", "new").index)


def test_a_kill_at_any_step_of_a_forced_rewrite_leaves_the_old_or_the_new_set(folder: Path) -> None:
    seen = kill_every_step(folder, old=OLD)
    assert len(seen) > 20 and "old" in seen and "new" in seen
    assert seen == sorted(seen, key=("old", "new").index)


KILLED_CLI = """
import os, signal, sys
from wizard.cli import main
real, calls = os.replace, [0]
def replace(*args, **kwargs):
    calls[0] += 1
    if calls[0] == int(os.environ["KILL_AT_REPLACE"]):
        os.kill(os.getpid(), signal.SIGKILL)
    return real(*args, **kwargs)
os.replace = replace
sys.argv = ["dswiz", *sys.argv[1:]]
main()
"""


def dswiz(*args: str, kill_at_replace: int = 0) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KILL_AT_REPLACE": str(kill_at_replace)}
    argv = [sys.executable, "-c", KILLED_CLI, *args]
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_dswiz_config_killed_mid_move_then_launch_reads_the_new_set(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert dswiz("config", "--yes", "--out", str(out)).returncode == 0
    (out / USER_FILE[0]).write_text(USER_FILE[1])
    before = (out / "ds_config.json").read_text()
    old_set = set_on_disk(out, NAMES)
    new = ("config", "--yes", "--micro-batch", "8", "--master-port", "29511", "--out", str(out), "--force")
    killed = dswiz(*new, kill_at_replace=2)  # the first file is in place, the others are not
    assert killed.returncode == -signal.SIGKILL
    assert any(e.startswith(COMMIT_PREFIX) for e in os.listdir(out))
    raw = set_on_disk(out, NAMES)
    dry = dswiz("launch", "--dry-run", "--config", str(out), "train.py")  # the reader finishes the move
    assert dry.returncode == 0, dry.stderr
    assert leftovers(out) == [] and "Traceback" not in dry.stderr
    assert json.loads((out / "ds_config.json").read_text())["train_micro_batch_size_per_gpu"] == 8
    assert "--master_port 29511" in (out / "launch.sh").read_text() and "29511" in dry.stdout
    assert raw not in (
        old_set,
        set_on_disk(out, NAMES),
    )  # on disk, a mix (marked by the commit folder) till read
    again = dswiz(*new)  # the same command again: the set is already there
    assert again.returncode == 0, again.stderr
    assert leftovers(out) == [] and (out / USER_FILE[0]).read_text() == USER_FILE[1]
    assert [p.read_text() for p in out.glob("ds_config.json.bak-*")] == [before]


def test_a_half_moved_set_stops_launch_sh_and_dswiz_check_finishes_it(tmp_path: Path) -> None:
    """`bash launch.sh` never runs on a mix of old and new files; `dswiz check DIR` finishes the move first."""
    out = tmp_path / "out"
    assert dswiz("config", "--yes", "--out", str(out)).returncode == 0
    new = ("config", "--yes", "--micro-batch", "8", "--master-port", "29511", "--out", str(out), "--force")
    assert dswiz(*new, kill_at_replace=2).returncode == -signal.SIGKILL
    assert any(e.startswith(COMMIT_PREFIX) for e in os.listdir(out))
    script = out / "launch.sh"
    refused = subprocess.run(["bash", str(script), "train.py"], capture_output=True, text=True, timeout=30)
    assert refused.returncode == 2 and "interrupted config write" in refused.stderr, refused.stderr
    assert f"dswiz check {out}" in refused.stderr
    checked = dswiz("check", str(out), "--no-consumer-check")
    assert "Traceback" not in checked.stderr and leftovers(out) == []
    assert "held an interrupted config write; it is finished" in checked.stderr
    assert json.loads((out / "ds_config.json").read_text())["train_micro_batch_size_per_gpu"] == 8
    usage = subprocess.run(["bash", str(out / "launch.sh")], capture_output=True, text=True, timeout=30)
    assert usage.returncode == 2 and "usage: bash" in usage.stderr  # past the guard: the set is whole again
