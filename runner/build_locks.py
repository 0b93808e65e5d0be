"""Stale JIT-build locks: a DeepSpeed op build that was killed leaves a lock file, and the next job waits on it for
ever.

Why: DeepSpeed builds its ops (cpu_adam for CPU offload, fused_adam, aio for NVMe, ...) with
torch.utils.cpp_extension, which takes ``<build dir>/lock`` with ``FileBaton``: it creates the file with O_EXCL,
keeps it open for the whole build and deletes it at the end (torch/utils/file_baton.py, torch 2.x). A build killed
half-way (Ctrl-C at the wrong moment, the OOM killer, a job stopped by a scheduler) never deletes it, and every later
build of that op spins in ``FileBaton.wait()`` while the file exists: the job hangs before its first step with no
error. A lock that no process holds open is therefore stale; one that a process holds is a build in progress.

Where: ``$TORCH_EXTENSIONS_DIR/<op>/lock`` when that is set, else ``<cache>/torch_extensions/<py>_<cu>/<op>/lock``
with ``<cache>`` = ``$XDG_CACHE_HOME`` or ``~/.cache`` (cpp_extension.py ``_get_build_directory`` and
``get_default_build_root``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from runner.reaper import processes_holding

LOCK_NAME = "lock"


# A build holding its lock longer than this is stuck, not slow: DeepSpeed's ops build in 1-2 min on two cores (5 when
# other jobs share them; docs/cpu-testing.md), a GPU op (fused_adam, cpu_adam with CUDA) in a few minutes.
STUCK_AFTER_S = 20 * 60


@dataclass(frozen=True)
class BuildLock:
    path: Path
    op: str  # the extension's folder name (e.g. cpu_adam)
    held_by: tuple[int, ...]  # PIDs with the file open (a build running now); empty: stale
    age_s: float | None = None  # since the lock was taken (the file's mtime: FileBaton creates it then)

    @property
    def stuck(self) -> bool:
        """Held, for longer than any build takes: its holder waits on something else (a full pipe nobody reads,
        a stopped process, a machine out of memory), and every job that needs the op waits behind it."""
        return bool(self.held_by) and self.age_s is not None and self.age_s > STUCK_AFTER_S


def build_roots(environ: Mapping[str, str], home: Path) -> list[Path]:
    """The folders whose ``*/lock`` (or, for the default root, ``*/*/lock``) torch's JIT builds use."""
    explicit = environ.get("TORCH_EXTENSIONS_DIR")
    if explicit:
        return [Path(explicit)]
    cache = Path(environ.get("XDG_CACHE_HOME") or home / ".cache")
    return [cache / "torch_extensions"]


def find_build_locks(environ: Mapping[str, str], home: Path, proc: Path = Path("/proc")) -> list[BuildLock]:
    """Every lock file under the build roots, with the processes that hold it open (read from /proc)."""
    found: list[Path] = []
    for root in build_roots(environ, home):
        pattern = f"*/{LOCK_NAME}" if environ.get("TORCH_EXTENSIONS_DIR") else f"*/*/{LOCK_NAME}"
        try:
            found += sorted(
                root.glob(pattern)
            )  # a folder named lock blocks FileBaton.wait too (os.path.exists)
        except OSError:
            continue
    if not found:
        return []
    holders = processes_holding({str(p) for p in found}, str(proc))
    return [BuildLock(p, p.parent.name, tuple(sorted(holders.get(str(p), ()))), _age(p)) for p in found]


def _age(p: Path) -> float | None:
    try:
        return max(0.0, time.time() - p.stat().st_mtime)
    except OSError:
        return None


def remove_stale(lock: BuildLock, proc: Path = Path("/proc")) -> str | None:
    """Delete a lock file found stale, after checking again that it is the same file and that no process holds it
    now, nor could hold it unseen (a process whose open files we may not read: another user's). None when removed,
    else why it was left (a folder named lock is the user's to remove)."""
    try:
        before = lock.path.lstat()
    except FileNotFoundError:
        return None  # its build ended meanwhile
    if not lock.path.is_file() or lock.path.is_symlink():
        return f"{lock.path} is not a plain file: remove it yourself if no build runs (rm -r {lock.path})"
    unseen: list[int] = []
    if processes_holding({str(lock.path)}, str(proc), unseen=unseen) or unseen:
        return f"{lock.path} may be held by a build (processes {unseen[:3]} could not be read)"
    try:
        if lock.path.lstat().st_ino != before.st_ino:
            return f"{lock.path} was taken again meanwhile"
        lock.path.unlink()
    except FileNotFoundError:
        pass
    return None
