"""Suite-wide: no test writes the user's own run history or state (every `dswiz launch` records one entry)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable
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
