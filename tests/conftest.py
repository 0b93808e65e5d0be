"""Suite-wide: no test writes the user's own run history or state (every `dswiz launch` records one entry)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import settings

# The fuzz suites (tests/unit/test_fuzz_*.py) are deterministic in the test run, so one commit passes or fails the
# same way everywhere; DSWIZ_FUZZ=explore draws fresh random cases (and 10x as many) to look for new failures:
#   DSWIZ_FUZZ=explore pytest tests/unit -k fuzz
settings.register_profile("suite", derandomize=True, print_blob=True)
settings.register_profile("explore", max_examples=1000, print_blob=True)
settings.load_profile("explore" if os.environ.get("DSWIZ_FUZZ") == "explore" else "suite")


@pytest.fixture(autouse=True)
def private_run_history(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point DSWIZ_HISTORY (inherited by the dswiz processes tests start) at a file of this test's own, and the
    state and data folders too: runs made by a test (and the index of runs made with --run-dir elsewhere) never
    land among the user's, where `dswiz monitor` would find them."""
    path = tmp_path_factory.mktemp("history") / "history.sqlite3"
    monkeypatch.setenv("DSWIZ_HISTORY", str(path))
    monkeypatch.setenv("XDG_STATE_HOME", str(path.parent / "state"))
    monkeypatch.setenv("XDG_DATA_HOME", str(path.parent / "data"))
    return path


@pytest.fixture(autouse=True)
def default_allocator(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shell's PyTorch allocator settings are a planning input (--expandable-segments' default): every test
    starts without them, so a developer's shell that sets them changes no expected plan."""
    for name in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def bench_script() -> Callable[[str], ModuleType]:
    """``bench/<name>.py`` as a module (the bench scripts are scripts, not a package), loaded once per name."""

    def load(name: str) -> ModuleType:
        if name in sys.modules:
            return sys.modules[name]
        spec = importlib.util.spec_from_file_location(
            name, Path(__file__).parent.parent / "bench" / f"{name}.py"
        )
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module

    return load


@pytest.fixture(scope="session")
def bench_smoke() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run ``bench/<name>.py --smoke --out OUT`` from the repository root (what CI can run of a GPU benchmark: the
    script end to end on tiny inputs); a non-zero exit fails the test with the script's stderr."""

    def run(name: str, out: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, f"bench/{name}.py", "--smoke", "--out", str(out)],
            cwd=Path(__file__).parent.parent,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        return proc

    return run


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int) -> None:
    """After a failing run, what about this machine could explain it (CI prints only the end of the output)."""
    if exitstatus == 0:
        return
    terminalreporter.section("the machine these tests ran on")
    for line in machine_lines():
        terminalreporter.write_line(line)


def machine_lines() -> list[str]:
    import psutil

    from runner.build_locks import find_build_locks

    mem = psutil.virtual_memory()
    lines = [
        f"cores {len(os.sched_getaffinity(0))}, load {' '.join(f'{x:.1f}' for x in os.getloadavg())}, "
        f"memory {mem.available / 2**30:.1f} of {mem.total / 2**30:.1f} GiB free",
    ]
    for label, folder in (
        ("temp", Path(os.environ.get("TMPDIR", "/tmp"))),
        ("home", Path.home()),
        ("shm", Path("/dev/shm")),
    ):
        try:
            usage = shutil.disk_usage(folder)
            lines.append(f"{label} {folder}: {usage.free / 2**30:.1f} of {usage.total / 2**30:.1f} GiB free")
        except OSError as e:
            lines.append(f"{label} {folder}: {e}")
    lines.append(f"hostname {socket.gethostname()} resolves to {_resolve(socket.gethostname())}")
    lines.append(_all_reduce_files())
    for lock in find_build_locks(os.environ, Path.home()):
        lines.append(
            f"JIT-build lock {lock.path}: "
            + (f"held by {', '.join(map(_described, lock.held_by))}" if lock.held_by else "stale")
            + (f", taken {lock.age_s:.0f} s ago" if lock.age_s is not None else "")
        )
    return lines


def _all_reduce_files() -> str:
    """This user's DeepSpeed CPU all-reduce files in /dev/shm: how many, how much memory, how many no process holds."""
    from runner import reaper

    names = reaper.own_shm_buffers()
    size = 0
    for n in names:
        with suppress(OSError):
            size += os.lstat(os.path.join(reaper.SHM_DIR, n)).st_size
    orphans = len(reaper.orphaned_shm_buffers())
    return (
        f"this user's DeepSpeed all-reduce files in {reaper.SHM_DIR}: {len(names)} ({size / 2**30:.1f} GiB), "
        f"{orphans} held by no process"
    )


def _described(pid: int) -> str:
    """``pid (state, seconds alive): command line``: what holds a build lock, and whether it is stuck."""
    import psutil

    try:
        p = psutil.Process(pid)
        with p.oneshot():
            return (
                f"{pid} ({p.status()}, {time.time() - p.create_time():.0f} s): {' '.join(p.cmdline())[:200]}"
            )
    except psutil.Error as e:
        return f"{pid} ({type(e).__name__})"


def _resolve(host: str, seconds: float = 5) -> str:
    """The addresses ``host`` resolves to, or why not (gloo resolves the hostname when a rank starts)."""
    found: list[str] = []

    def look() -> None:
        try:
            found.append(", ".join(sorted({a[4][0] for a in socket.getaddrinfo(host, None)})))
        except OSError as e:
            found.append(f"nothing ({e})")

    worker = threading.Thread(target=look, daemon=True)
    worker.start()
    worker.join(seconds)
    return found[0] if found else f"nothing within {seconds:.0f} s"
