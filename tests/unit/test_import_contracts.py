"""The import direction is enforced, not a convention: pyproject's import-linter contracts hold on this tree, and
they do break when a core module imports what it must not (checked on a copy of the tree with one bad import)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    if not LINT_IMPORTS.exists():
        pytest.fail(f"{LINT_IMPORTS} missing: install the test extra (scripts/setup.sh)")
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=tree,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_the_contracts_hold_on_this_tree() -> None:
    proc = _lint_imports(ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "6 kept, 0 broken" in proc.stdout


def _copy_tree(dst: Path) -> Path:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "examples")
    for pkg in ("wizard", "runner"):
        shutil.copytree(ROOT / pkg, dst / pkg, ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", dst / "pyproject.toml")
    return dst


@pytest.mark.parametrize(
    ("module", "bad_import", "contract"),
    [
        ("wizard/planner/search.py", "import runner.rundir", "The wizard core never imports the runner"),
        ("wizard/config/render.py", "import textual", "know no terminal"),
        ("wizard/strategy.py", "import wizard.planner", "Layers"),
        ("runner/verdict.py", "import wizard.service", "Layers"),
        ("wizard/config/build.py", "import wizard.planner", "Layers"),  # independent siblings
        ("wizard/planner/explain.py", "import wizard.planner.search", "Planner"),
        ("wizard/planner/feasibility.py", "import wizard.planner.explain", "Planner"),
        ("runner/metrics/parse.py", "import pynvml", "NVML is read only in wizard.hardware"),
        ("runner/consolidate_worker.py", "import wizard.errors", "training environment"),
    ],
)
def test_a_wrong_import_breaks_a_contract(
    tmp_path: Path, module: str, bad_import: str, contract: str
) -> None:
    tree = _copy_tree(tmp_path)
    path = tree / module
    path.write_text(path.read_text(encoding="utf-8") + f"\n{bad_import}  # the violation under test\n")
    proc = _lint_imports(tree)
    assert proc.returncode != 0
    broken = [line for line in proc.stdout.splitlines() if line.endswith("BROKEN")]
    assert any(contract in line for line in broken), proc.stdout
