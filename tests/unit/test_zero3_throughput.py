"""ZeRO-3's step time by cause (wizard.planner.throughput.stage3_micro_step_seconds and the stage-3 weight
copy-back): the physics each term claims, the committed H200 rows it is fit to, and bench/fit_zero3.py's contract
(calibration.py holds what it fits; held-out errors per model)."""

from __future__ import annotations

import importlib
import itertools
import json
import math
import sys
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wizard.hardware.report import HardwareReport
from wizard.model import load_model_spec
from wizard.planner import calibration as cal
from wizard.planner.throughput import estimate_throughput, stage3_micro_step_seconds
from wizard.strategy import Strategy

ROOT = Path(__file__).resolve().parents[2]
# The H200 the committed rows were measured on, as the bench recorded it (16 host cores, PCIe 5, 4.8 TB/s).
ONE_H200 = HardwareReport.from_dict(
    json.loads((ROOT / "bench/results/plan_accuracy-2026-12-01-1gpu-zero3-a.json").read_text())["hardware"]
)
LLAMA_1B = load_model_spec(
    "type=llama,name=llama-1b,layers=22,hidden=2048,heads=32,kv_heads=4,ffn=5632,vocab=32000,seq=2048"
)
MODELS = {
    "gpt2-medium": load_model_spec("gpt2-medium"),
    "llama-1b": LLAMA_1B,
    "llama-7b": load_model_spec("llama-7b"),
}
SEQ = 1024


def _parts(model: Any, s: Strategy) -> dict[str, float]:
    return dict(estimate_throughput(ONE_H200, model, s, SEQ).parts)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    name=st.sampled_from(sorted(MODELS)),
    mbs=st.integers(1, 64),
    ckpt=st.booleans(),
    offload=st.sampled_from(["none", "cpu"]),
)
def test_stage3_never_beats_stage2_on_one_gpu(name: str, mbs: int, ckpt: bool, offload: str) -> None:
    """One GPU shards nothing: stage 3 does stage 2's work plus its fetches, so it is never faster."""
    base = Strategy(
        zero_stage=2,
        micro_batch_size=mbs,
        activation_checkpointing=ckpt,
        offload_optimizer=offload,  # type: ignore[arg-type]
    )
    z2 = estimate_throughput(ONE_H200, MODELS[name], base, SEQ)
    z3 = estimate_throughput(ONE_H200, MODELS[name], replace(base, zero_stage=3), SEQ)
    assert z3.tokens_per_sec < z2.tokens_per_sec


def test_hooks_hide_behind_compute_as_the_micro_batch_grows() -> None:
    """The hooks are host time: exposed in full when the GPU has nothing queued, less and less as each micro-step's
    compute grows; never more than the hooks themselves, never negative."""
    hooks = cal.STAGE3_SECONDS_PER_LAYER * LLAMA_1B.layers
    exposed = [
        stage3_micro_step_seconds(LLAMA_1B, Strategy(zero_stage=3, micro_batch_size=1), compute, 4.8e12)[
            "ZeRO-3 fetch hooks"
        ]
        for compute in (0.0, 0.01, 0.1, 0.3, 1.0, 3.0)
    ]
    assert exposed[0] == pytest.approx(hooks)
    assert all(0.0 <= b <= a <= hooks for a, b in itertools.pairwise(exposed))
    assert exposed[-1] < 0.01 * hooks


def test_recompute_fires_the_forward_hooks_again() -> None:
    plain = stage3_micro_step_seconds(LLAMA_1B, Strategy(zero_stage=3), 0.0, 4.8e12)["ZeRO-3 fetch hooks"]
    ckpt = Strategy(zero_stage=3, activation_checkpointing=True)
    again = stage3_micro_step_seconds(LLAMA_1B, ckpt, 0.0, 4.8e12)["ZeRO-3 fetch hooks"]
    assert again == pytest.approx(plain * (1 + cal.STAGE3_RECOMPUTE_HOOK_SHARE))


def test_gather_copies_grow_with_parameters_and_shrink_with_bandwidth() -> None:
    s = Strategy(zero_stage=3)
    small = stage3_micro_step_seconds(LLAMA_1B, s, 1.0, 4.8e12)["ZeRO-3 gather/partition copies"]
    big = stage3_micro_step_seconds(MODELS["llama-7b"], s, 1.0, 4.8e12)["ZeRO-3 gather/partition copies"]
    slow_hbm = stage3_micro_step_seconds(LLAMA_1B, s, 1.0, 2.4e12)["ZeRO-3 gather/partition copies"]
    assert big / small == pytest.approx(MODELS["llama-7b"].total_params / LLAMA_1B.total_params, rel=0.05)
    assert slow_hbm == pytest.approx(2 * small)


def test_pageable_copy_back_only_with_the_optimizer_offloaded_and_the_weights_on_the_gpu() -> None:
    """Stage 3 writes the updated weights back with a blocking fp32 -> 16-bit copy_: pageable into a GPU partition,
    host-only into offloaded parameters; stages 1-2 go through a pinned buffer (their PCIe copies)."""
    opt = Strategy(zero_stage=3, offload_optimizer="cpu", micro_batch_size=16, activation_checkpointing=True)
    both = replace(opt, offload_param="cpu")
    z2 = replace(opt, zero_stage=2)
    key = "16-bit weights back (pageable)"
    assert _parts(LLAMA_1B, opt)[key] == pytest.approx(
        2 * LLAMA_1B.total_params / cal.STAGE3_PAGEABLE_COPY_BYTES_PER_SECOND
    )
    assert key not in _parts(LLAMA_1B, both)
    assert key not in _parts(LLAMA_1B, z2)
    assert key not in _parts(LLAMA_1B, replace(opt, offload_optimizer="none"))
    # What the H200 rows show: offloading the parameters too makes stage 3 + optimizer offload faster.
    fast = estimate_throughput(ONE_H200, LLAMA_1B, both, SEQ).tokens_per_sec
    assert fast > estimate_throughput(ONE_H200, LLAMA_1B, opt, SEQ).tokens_per_sec


@settings(max_examples=30, deadline=None, derandomize=True)
@given(name=st.sampled_from(sorted(MODELS)), mbs=st.integers(1, 63), ckpt=st.booleans())
def test_stage3_tokens_per_second_never_fall_with_the_micro_batch(name: str, mbs: int, ckpt: bool) -> None:
    s = Strategy(zero_stage=3, micro_batch_size=mbs, activation_checkpointing=ckpt)
    a = estimate_throughput(ONE_H200, MODELS[name], s, SEQ).tokens_per_sec
    b = estimate_throughput(ONE_H200, MODELS[name], replace(s, micro_batch_size=mbs + 1), SEQ).tokens_per_sec
    assert b >= a * (1 - 1e-9)


# ---- the committed H200 rows and bench/fit_zero3.py


@pytest.fixture(scope="module")
def fz() -> ModuleType:
    sys.path.insert(0, str(ROOT / "bench"))  # a script, not a package: imported as bench/ runs it
    return importlib.import_module("fit_zero3")


@pytest.fixture(scope="module")
def refit(fz: ModuleType) -> dict[str, Any]:
    return fz.run()


# Rows the model does not reach within 10 %: llama-1b z3 + checkpointing (its four timed steps spread 0.53-0.67 s,
# the fastest still ~10 % slower than predicted; the sweep's second reading at seq 2048 is over-predicted too), and
# since the three-family refit of the stage 0-2 constants the two gpt2-xl rows without offload (-10.4 %, -10.9 %:
# predicted slow, they were -7.5 % and -7.7 % before); bench/results/zero3_refit-2026-12-01-replay.md.
NOT_REACHED = {"llama-1b z3+ckpt mbs16", "gpt2-xl z3 mbs16", "gpt2-xl z3+ckpt mbs16"}


def test_committed_h200_zero3_rows_within_ten_percent(refit: dict[str, Any]) -> None:
    errs = {k: v["error"] for k, v in refit["rows"].items()}
    assert len(errs) >= 12
    assert {k for k, e in errs.items() if abs(e) > 0.10} <= NOT_REACHED
    assert refit["overall_now"]["median_abs"] <= 0.06  # 5.3-5.5 % since the three-family refit (4.9 % before)


def test_calibration_holds_what_the_fit_finds(refit: dict[str, Any]) -> None:
    """calibration.py is the fit, rounded: refitting from it moves no constant by more than a few per cent."""
    for name, committed in refit["constants_committed"].items():
        assert refit["constants_fit"][name] == pytest.approx(committed, rel=0.05), name


def test_held_out_fit_per_model_and_stage_0_2_untouched(refit: dict[str, Any]) -> None:
    """Every model is held out once (its rows scored with constants fit on the others), and the stage 3 terms do
    not move a single stage 0-2 prediction."""
    models = {label.split(" ")[0] for label in refit["rows"]}
    assert set(refit["held_out"]) == models
    for h in refit["held_out"].values():
        assert h["errors"] and all(math.isfinite(e) for e in h["errors"].values())
    assert refit["stage0_2_rows"] > 50
    assert refit["stage0_2_max_change"] == 0.0
