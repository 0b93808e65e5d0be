"""`dswiz consolidate` refuses bad input with a message and a fix, exit 2, no traceback, and leaves nothing
behind. These cases stop before (or right at) the worker; the real conversion is in
tests/integration/test_consolidate.py."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import venv
from pathlib import Path

from tests.unit.test_checkpoints import make_checkpoint

ROOT = Path(__file__).resolve().parents[2]


def dswiz(*args: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wizard", "consolidate", *map(str, args)],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def assert_refused(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    # The message comes last (after any progress lines): "error: ...", then "  fix: ...".
    message = proc.stderr[proc.stderr.rindex("error: ") :]
    assert "\n  fix: " in message, proc.stderr
    for needle in needles:
        assert needle in message, proc.stderr


def test_not_a_checkpoint(tmp_path: Path) -> None:
    assert_refused(dswiz(tmp_path, tmp_path / "out"), "not a DeepSpeed checkpoint directory")
    assert_refused(dswiz(tmp_path / "missing", tmp_path / "out"), "does not exist")
    assert not (tmp_path / "out").exists()


def test_no_latest_no_tag_and_unknown_tag(tmp_path: Path) -> None:
    root = make_checkpoint(tmp_path / "ckpt", latest=False)
    assert_refused(dswiz(root, tmp_path / "out"), "no `latest` file", "--tag with one of: global_step10")
    assert_refused(dswiz(root, tmp_path / "out", "--tag", "x"), "tag 'x' not found")


def test_stage0_and_missing_shards(tmp_path: Path) -> None:
    stage0 = make_checkpoint(tmp_path / "s0", layout=[], ranks=0, extra=("mp_rank_00_model_states.pt",))
    assert_refused(dswiz(stage0, tmp_path / "out"), "stage 0", "['module']")
    partial = make_checkpoint(tmp_path / "partial", ranks=3)
    (partial / "global_step10" / "zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()
    assert_refused(dswiz(partial, tmp_path / "out"), "rank(s) 1 are missing")


def test_existing_out_needs_force_and_out_cannot_be_the_checkpoint(tmp_path: Path) -> None:
    root = make_checkpoint(tmp_path / "ckpt")
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert_refused(dswiz(root, out), "already exists", "--force")
    assert (out / "keep.txt").read_text() == "mine"
    assert_refused(dswiz(root, root, "--force"), "is (or contains) the checkpoint itself")
    assert_refused(dswiz(root, tmp_path, "--force"), "is (or contains) the checkpoint itself")
    assert root.exists() and (root / "latest").exists()


def test_refuses_when_free_ram_is_below_twice_the_checkpoint(tmp_path: Path) -> None:
    # Sparse 1 TiB shards: far more than this machine's RAM, no disk used.
    root = make_checkpoint(tmp_path / "ckpt", sizes=1024**4)
    assert_refused(dswiz(root, tmp_path / "out"), "needs about 8.0 TiB of free RAM", "--skip-memory-check")
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]  # no temp folder left behind


def test_option_errors(tmp_path: Path) -> None:
    root = make_checkpoint(tmp_path / "ckpt")
    assert_refused(dswiz(root, tmp_path / "out", "--max-shard-size", "huge"), "--max-shard-size", "5GB")
    assert_refused(dswiz(root, tmp_path / "out", "--python", tmp_path / "no-python"), "no such executable")


def test_a_python_without_deepspeed_is_named_with_the_fix(tmp_path: Path) -> None:
    env_dir = tmp_path / "bare-env"
    venv.create(env_dir, with_pip=False)  # a real interpreter with no torch / deepspeed
    root = make_checkpoint(tmp_path / "ckpt")
    proc = dswiz(root, tmp_path / "out", "--python", env_dir / "bin" / "python")
    assert_refused(proc, "cannot import torch and DeepSpeed", "No module named", "--python")
    assert not (tmp_path / "out").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bare-env", "ckpt"]  # temp output removed


def test_worker_imports_nothing_from_dswiz() -> None:
    # It runs in the training environment's python, which need not have dswiz installed.
    tree = ast.parse((ROOT / "runner" / "consolidate_worker.py").read_text())
    imported = {
        (node.module or "").split(".")[0] if isinstance(node, ast.ImportFrom) else alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    }
    assert not imported & {"wizard", "runner", "tests"}
    assert imported <= set(sys.stdlib_module_names) | {"torch", "deepspeed", "safetensors", "huggingface_hub"}


def test_help_lists_the_options() -> None:
    proc = dswiz("--help")
    assert proc.returncode == 0
    for option in ("--tag", "--force", "--python", "--safe-serialization", "--skip-memory-check"):
        assert option in proc.stdout
