"""`dswiz probe`'s choices before it runs anything: distinct strategies from the real planner, and the planning
flags handed to `dswiz config` exactly as the user gave them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click

from wizard.commands.probe import _planning_flags, probe
from wizard.hardware.described import describe
from wizard.model import load_model_spec
from wizard.planner import PlanRequest, plan
from wizard.service.probe import distinct_candidates

ROOT = Path(__file__).resolve().parents[2]


def test_distinct_candidates_are_different_strategies_in_rank_order() -> None:
    p = plan(describe("8xA100-80GB"), load_model_spec("llama-7b"), PlanRequest(seq_len=2048))
    top = distinct_candidates(p, 3)
    assert len(top) == 3 and all(c.fits for c in top)
    kinds = {(c.strategy.zero_stage, c.strategy.offload_optimizer, c.strategy.offload_param,
              c.strategy.activation_checkpointing) for c in top}  # fmt: skip
    assert len(kinds) == 3
    fitting = [c for c in p.candidates if c.fits]
    assert top[0] == fitting[0]  # the planner's best is measured first
    ranks = [p.candidates.index(c) for c in top]
    assert ranks == sorted(ranks)


def test_planning_flags_reach_dswiz_config_as_given() -> None:
    argv = ["--model", "gpt2", "--hardware", "2xA100-80GB", "--seq-len", "64", "--no-offload",
            "--gpu-memory", "24GiB", "--precision", "fp32", "--top", "2", "--for", "accelerate", "train.py",
            "--steps", "100"]  # fmt: skip
    ctx = probe.make_context("probe", argv)
    flags = _planning_flags(ctx, dict(ctx.params))
    assert flags[:2] == ["--model", "gpt2"]
    pairs = dict(zip(flags[::1], [*flags[1:], ""], strict=True))
    assert (
        pairs["--hardware"] == "2xA100-80GB" and pairs["--seq-len"] == "64" and pairs["--for"] == "accelerate"
    )
    assert pairs["--gpu-memory"] == str(24 * 1024**3) and pairs["--precision"] == "fp32"
    assert (
        "--no-offload" in flags and "--top" not in flags and "--steps" not in flags
    )  # the probe's own / script's
    assert ctx.params["script_args"] == ("--steps", "100")
    # what dswiz config accepts: the same words parse there
    from wizard.commands.config import config

    cctx = config.make_context("config", [*flags, "--yes"])
    assert isinstance(cctx, click.Context) and cctx.params["gpu_memory"] == 24 * 1024**3


def test_the_off_side_of_an_on_off_flag_reaches_dswiz_config_too() -> None:
    """--no-expandable-segments is a choice, not an absence: the child `dswiz config` must not fall back to the
    shell's allocator settings."""
    for given, passed in (("--no-expandable-segments", False), ("--expandable-segments", True)):
        ctx = probe.make_context("probe", ["--model", "gpt2", given, "train.py"])
        flags = _planning_flags(ctx, dict(ctx.params))
        assert given in flags
        from wizard.commands.config import config

        assert config.make_context("config", [*flags, "--yes"]).params["expandable_segments"] is passed
    ctx = probe.make_context("probe", ["--model", "gpt2", "train.py"])
    assert not any("expandable" in f for f in _planning_flags(ctx, dict(ctx.params)))


def test_a_probe_of_a_folder_plans_with_the_allocator_it_was_written_for(tmp_path: Path) -> None:
    from dataclasses import replace as _replace

    from wizard.replan import make_sidecar
    from wizard.service.probe import plan_for

    hw, spec = describe("1xA10-24GB"), load_model_spec("gpt2-xl")
    request = PlanRequest(seq_len=1024, expandable_segments=True)
    best = plan(hw, spec, request).best
    assert best is not None
    sidecar = make_sidecar(
        model_arg="gpt2-xl",
        model=spec,
        hardware_arg="1xA10-24GB",
        hardware=hw,
        request=request,
        candidate=best,
    )
    assert plan_for(sidecar, use_history=False).request.expandable_segments
    assert not plan_for(
        _replace(sidecar, expandable_segments=False), use_history=False
    ).request.expandable_segments


def test_on_one_gpu_the_probe_measures_more_than_one_kind_of_work() -> None:
    """One H200: ZeRO-1 and ZeRO-2 without offload do the same work there, so the probe's three runs are the
    planner's best and the best of two other groups (stage 3, checkpointing, offload), not ZeRO-1, -2 and -0."""
    from wizard.history.record import family_group, family_key

    p = plan(describe("1xH200"), load_model_spec("qwen2-7b"), PlanRequest(seq_len=2048))
    top = distinct_candidates(p, 3)
    fitting = [c for c in p.candidates if c.fits]
    assert top[0] == fitting[0] and len(top) == 3
    groups = {
        family_group(
            family_key(s.zero_stage, s.offload_optimizer, s.offload_param, s.activation_checkpointing),
            s.world_size,
        )
        for s in (c.strategy for c in top)
    }
    assert len(groups) == 3
    ranks = [p.candidates.index(c) for c in top]
    assert ranks == sorted(ranks)


def test_a_probe_that_cannot_plan_says_it_once_and_leaves_no_folder(tmp_path: Path) -> None:
    """No GPU here (CUDA_VISIBLE_DEVICES="" hides any): `dswiz config` cannot plan the base config. Its own
    "error: / fix:" is said once (it was wrapped whole inside the probe's), and the temporary folder the probe made
    is removed: nothing ran in it (each failed probe once left an empty /tmp/dswiz-probe-*)."""
    (tmp_path / "train.py").write_text("print('hello')\n")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TMPDIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "wizard", "probe", "--model", "tiny", "train.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("error:") == 1 and proc.stderr.count("fix:") == 1, proc.stderr
    assert "error: dswiz config could not plan the probe: no NVIDIA GPU on this machine" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]


def test_a_probe_of_a_script_that_is_not_there_stops_before_any_candidate(tmp_path: Path) -> None:
    """Each candidate would fail on it (launch's own preflight check): said once, up front, nothing made."""
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "wizard", "probe", "--model", "tiny", "--hardware", "1xH200", "missing.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "error: the training script missing.py does not exist" in proc.stderr and "fix:" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_candidate_dswiz_launch_refuses_is_named_with_the_launch_error(tmp_path: Path) -> None:
    """`dswiz launch` refuses each candidate before a run directory exists (here a --config-arg that is no argument
    name): the probe quotes its error and fix, not "stopped before the job started"."""
    (tmp_path / "train.py").write_text("print('hello')\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_STATE_HOME": str(tmp_path / "state")}
    proc = subprocess.run(
        [sys.executable, "-m", "wizard", "probe", "--model", "tiny", "--hardware", "1xH200", "--top", "1",
         "--config-arg=-x", "--work-dir", str(tmp_path / "work"), "train.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr  # nothing measured, nothing written
    assert (
        "dswiz launch refused it: --config-arg '-x' is not an argument name (fix: pass the name"
        in proc.stdout
    )


def test_no_local_rank_for_an_accelerate_probe_stops_before_any_candidate(tmp_path: Path) -> None:
    """--for accelerate, or --config of a folder written for accelerate: refused before anything runs."""
    (tmp_path / "train.py").write_text("print('hello')\n")
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp"), "PYTHONPATH": str(ROOT)}
    (tmp_path / "tmp").mkdir()
    folder = tmp_path / "acc"
    written = subprocess.run(
        [sys.executable, "-m", "wizard", "config", "--yes", "--model", "tiny", "--hardware", "1xH200", "--for",
         "accelerate", "--out", str(folder)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert written.returncode == 0, written.stderr
    for where in (
        ("--model", "tiny", "--hardware", "1xH200", "--for", "accelerate"),
        ("--config", str(folder)),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "wizard", "probe", *where, "--no-local-rank", "train.py"],
            cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env,
        )  # fmt: skip
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "error: --no-local-rank would change nothing: a probe for accelerate" in proc.stderr
    assert list((tmp_path / "tmp").iterdir()) == []  # no probe folder left
