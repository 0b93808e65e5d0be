"""`dswiz consolidate` on a real ZeRO-3 checkpoint: a 2-rank CPU DeepSpeed job (the real `deepspeed` launcher)
trains runner/examples/train_tiny.py for a few steps, saves a checkpoint and makes rank 0 dump the full trained
weights; the consolidated weights must load strictly into a fresh model and equal them exactly (fp32).
One launch for the whole module."""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.integration.launch_support import free_port, run_deepspeed
from wizard.checkpoints import checkpoint_hint, inspect_checkpoint

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TRAIN_TINY = ROOT / "runner" / "examples" / "train_tiny.py"
MODEL_ARGS = {"vocab": 64, "hidden": 32, "layers": 2, "heads": 4, "seq_len": 16}
DS_CONFIG = """{
  "train_micro_batch_size_per_gpu": 2,
  "gradient_accumulation_steps": 1,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.001, "torch_adam": true}},
  "zero_optimization": {"stage": 3},
  "steps_per_print": 1,
  "log_level": "info"
}
"""


def train_tiny_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("train_tiny", TRAIN_TINY)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """Run the job once: {"dir": job cwd, "log": its output, "weights": the dumped full state dict}."""
    import torch

    job = tmp_path_factory.mktemp("job")
    (job / "ds_config.json").write_text(DS_CONFIG)
    launcher = Path(sys.executable).with_name("deepspeed")
    argv = [str(launcher)] if launcher.exists() else [sys.executable, "-m", "deepspeed.launcher.runner"]
    port = free_port()
    argv += ["--num_gpus", "2", "--master_port", str(port), str(TRAIN_TINY)]
    argv += ["--deepspeed_config", "ds_config.json", "--steps", "3", "--save-dir", "ckpt"]
    argv += ["--dump-weights", "full.pt"]
    argv += [f"--{k.replace('_', '-')}={v}" for k, v in MODEL_ARGS.items()]
    proc = run_deepspeed(argv, master_port=port, cwd=job, timeout=300)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    return {"dir": job, "log": log, "weights": torch.load(job / "full.pt")}


def dswiz(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wizard", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def assert_equal_to_trained(state: dict, trained_weights: dict) -> None:
    import torch

    tiny = train_tiny_module()
    fresh = tiny.TinyCausalLM(**MODEL_ARGS)
    fresh.load_state_dict(state, strict=True)  # every key present, no extra
    assert sorted(state) == sorted(trained_weights)
    for name, tensor in trained_weights.items():
        assert state[name].dtype == torch.float32
        assert torch.equal(state[name], tensor), name
        assert torch.equal(fresh.state_dict()[name], tensor), name


def test_hint_command_consolidates_weights_equal_to_the_trained_ones(trained: dict) -> None:
    import torch

    job: Path = trained["dir"]  # type: ignore[assignment]
    hint = checkpoint_hint(log_text=str(trained["log"]), cwd=job)
    root = (job / "ckpt").resolve()
    assert hint.splitlines()[0].startswith(f"checkpoint {root / 'final'} (ZeRO-3, 2 shard(s), ")
    command = shlex.split(hint.splitlines()[1].split("full fp32 weights: ", 1)[1])
    assert command[:2] == ["dswiz", "consolidate"]

    proc = dswiz(*command[1:], cwd=job)  # exactly the command the verdict prints
    assert proc.returncode == 0, proc.stderr
    out = Path(command[3])
    assert out == Path(f"{root}-fp32") and sorted(p.name for p in out.iterdir()) == ["pytorch_model.bin"]
    assert_equal_to_trained(torch.load(out / "pytorch_model.bin"), trained["weights"])  # type: ignore[arg-type]
    # The progress display names DeepSpeed's phases with their counts and times.
    assert "Loading checkpoint shards: done (2/2, " in proc.stderr
    n_params = len(trained["weights"])  # type: ignore[arg-type]
    assert f"Gathering sharded weights: done ({n_params}/{n_params}, " in proc.stderr
    assert "deepspeed 0." in proc.stderr and "wrote full fp32 weights" in proc.stdout
    assert not [p for p in job.iterdir() if p.name.startswith(".")]  # no temp folder left


def test_safetensors_replaces_an_existing_out_only_with_force(trained: dict, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    job: Path = trained["dir"]  # type: ignore[assignment]
    out = tmp_path / "weights"
    out.mkdir()
    (out / "old.txt").write_text("previous result")
    refused = dswiz("consolidate", str(job / "ckpt"), str(out), "--safe-serialization", cwd=tmp_path)
    assert refused.returncode == 2 and "already exists" in refused.stderr
    proc = dswiz("consolidate", str(job / "ckpt"), str(out), "--safe-serialization", "--force", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["model.safetensors"]
    backups = [p for p in tmp_path.iterdir() if p.name.startswith("weights.bak-")]
    assert len(backups) == 1 and (backups[0] / "old.txt").read_text() == "previous result"
    assert_equal_to_trained(load_file(out / "model.safetensors"), trained["weights"])  # type: ignore[arg-type]


def test_sharded_output_loads_with_the_printed_loader(trained: dict, tmp_path: Path) -> None:
    from accelerate.utils import load_checkpoint_in_model

    job: Path = trained["dir"]  # type: ignore[assignment]
    out = tmp_path / "sharded"
    proc = dswiz("consolidate", str(job / "ckpt"), str(out), "--max-shard-size", "20KB", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    names = sorted(p.name for p in out.iterdir())
    assert "pytorch_model.bin.index.json" in names and len(names) > 2
    assert f"load: accelerate.utils.load_checkpoint_in_model(model, {str(out)!r}, strict=True)" in proc.stdout
    model = train_tiny_module().TinyCausalLM(**MODEL_ARGS)
    load_checkpoint_in_model(model, str(out), strict=True)
    assert_equal_to_trained(model.state_dict(), trained["weights"])  # type: ignore[arg-type]


def test_a_corrupt_shard_fails_cleanly(trained: dict, tmp_path: Path) -> None:
    job: Path = trained["dir"]  # type: ignore[assignment]
    broken = tmp_path / "ckpt"
    shutil.copytree(job / "ckpt", broken)
    shard = broken / "final" / "zero_pp_rank_1_mp_rank_00_optim_states.pt"
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])  # a save cut short by a full disk
    assert inspect_checkpoint(broken).world_size == 2  # the layout is complete; the content is not
    proc = dswiz("consolidate", str(broken), str(tmp_path / "out"), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr.split("error: ")[-1]
    assert f"error: cannot read {shard}: " in proc.stderr
    assert "  fix: the file is damaged or incomplete" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no OUT, no temp folder


def test_a_missing_last_rank_is_caught_by_deepspeeds_own_check(trained: dict, tmp_path: Path) -> None:
    # File names cannot show that the *last* rank is missing; zero_to_fp32 compares with the saved world size.
    job: Path = trained["dir"]  # type: ignore[assignment]
    partial = tmp_path / "ckpt"
    shutil.copytree(job / "ckpt", partial)
    for name in ("zero_pp_rank_1_mp_rank_00_optim_states.pt", "zero_pp_rank_1_mp_rank_00_model_states.pt"):
        (partial / "final" / name).unlink()
    proc = dswiz("consolidate", str(partial), str(tmp_path / "out"), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "error: " + str(partial / "final") + " is incomplete: Expected 2 of" in proc.stderr
    assert "  fix: every rank must finish engine.save_checkpoint()" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_ctrl_c_stops_the_worker_and_leaves_nothing(trained: dict, tmp_path: Path) -> None:
    job: Path = trained["dir"]  # type: ignore[assignment]
    proc = subprocess.Popen(
        [sys.executable, "-m", "wizard", "consolidate", str(job / "ckpt"), str(tmp_path / "out")],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        # A test run started in the background (`cmd &`) inherits SIGINT ignored, and Python keeps it ignored
        # until dswiz installs its own handler: give the child the interactive default, as a terminal would.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stderr is not None
    for line in proc.stderr:  # wait until the worker is being started (importing torch takes a second)
        if "starting python" in line:
            break
    proc.send_signal(signal.SIGINT)
    rest = proc.stderr.read()
    assert proc.wait(timeout=60) == 130, rest
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no OUT, no temp folder
    workers = [
        pid for pid in os.listdir("/proc") if pid.isdigit() and str(tmp_path).encode() in _cmdline(pid)
    ]
    assert workers == []


def _cmdline(pid: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
