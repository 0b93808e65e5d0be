"""bench/finetune_accuracy.py without a GPU: the grid it would run on an H200, the planner's recommendation for each,
the report, a --grid of its own, re-predicting a result file, and the --smoke run itself (CPU, a tiny LLaMA, real
peft; QLoRA through bitsandbytes' CPU backend)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def fa(bench_script: Callable[[str], ModuleType]) -> ModuleType:
    return bench_script("finetune_accuracy")


def test_the_h200_grid_has_a_recommendation_under_every_cap(fa: ModuleType) -> None:
    hw = fa._plan_accuracy().smoke_hardware(1)
    grid = fa.build_grid(smoke=False)
    assert {(c.model, c.finetune) for c in grid} >= {
        ("llama-7b", "lora"),
        ("llama-7b", "qlora"),
        ("llama-33b", "qlora"),
    }
    assert {c.cap_gib for c in grid} == set(fa.CAPS)
    for c in grid:
        s, predicted = fa.recommend(hw, c, fa.SEQ)
        assert s is not None and predicted["fits"], c
        assert predicted["device"] <= fa.card(c)  # what runs under the cap is what the planner sized for it
        assert s.offload_optimizer == "none"  # moot for adapters: never recommended


def test_the_report_shows_errors_against_the_prediction(fa: ModuleType) -> None:
    c = fa.Config("llama-7b", "lora", 24)
    row = fa.Row(
        config=asdict(c), strategy={"zero_stage": 1, "micro_batch_size": 4, "activation_checkpointing": True},
        predicted={"device": 22 * 2**30, "tokens_per_sec": 11000.0, "trainable_params": 8388608, "fits": True},
        status="ok", trainable_params=8388608, device_used=20 * 2**30, tokens_per_sec=10000.0,
    )  # fmt: skip
    doc = {"date": "2026-12-01", "tag": "1gpu", "seq_len": 2048, "versions": {}, "rows": [asdict(row)]}
    text = fa.markdown(doc)
    assert (
        "20.00 (22.00, +10.0 %)" in text
        and "10,000 (11,000, +10.0 %)" in text
        and "ZeRO-1 mbs 4 ckpt" in text
    )


def test_smoke_run_on_cpu(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "finetune_accuracy.py"), "--smoke", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=280, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    [path] = tmp_path.glob("finetune_accuracy-*-smoke.json")
    rows = {r["config"]["finetune"]: r for r in json.loads(path.read_text())["rows"]}
    lora = rows["lora"]
    assert lora["status"] == "ok" and lora["tokens_per_sec"] > 0, lora
    assert lora["trainable_params"] == lora["predicted"]["trainable_params"]  # PEFT's count = the planner's
    qlora = rows["qlora"]  # bitsandbytes' CPU backend: the 4-bit layers and their LoRA train here too
    assert qlora["status"] == "ok" and qlora["tokens_per_sec"] > 0, qlora
    assert qlora["trainable_params"] == qlora["predicted"]["trainable_params"]
    assert path.with_suffix(".md").read_text().startswith("# Fine-tune accuracy")


def test_a_grid_of_its_own_and_a_bad_one(fa: ModuleType) -> None:
    grid = fa.build_grid(smoke=False, only="llama-7b:lora:11, llama-33b:qlora:48")
    assert [(c.model, c.finetune, c.cap_gib) for c in grid] == [
        ("llama-7b", "lora", 11),
        ("llama-33b", "qlora", 48),
    ]
    with pytest.raises(SystemExit, match=r"is not model:lora\|qlora:GiB"):
        fa.build_grid(smoke=False, only="llama-7b:full:11")


def test_a_forced_strategy_is_run_and_predicted_as_given(fa: ModuleType) -> None:
    """A grid item's fourth field replaces the planner's pick: the row runs that strategy and carries the planner's
    prediction for it, not for its own recommendation (here one the planner would not choose under 80 GiB)."""
    hw = fa._plan_accuracy().smoke_hardware(1)
    [c] = fa.build_grid(smoke=False, only="llama-7b:lora:80:stage=3/param=cpu/mb=4/ckpt=1")
    s, predicted = fa.recommend(hw, c, fa.SEQ)
    ran = (s.zero_stage, s.offload_param, s.micro_batch_size, s.activation_checkpointing)
    assert ran == (3, "cpu", 4, True)
    own, own_predicted = fa.recommend(hw, fa.Config("llama-7b", "lora", 80), fa.SEQ)
    assert own != s and own_predicted["tokens_per_sec"] != predicted["tokens_per_sec"]
    row = fa.Row(config=asdict(c), strategy=s.to_dict(), predicted=predicted)
    doc = {"date": "2026-12-05", "tag": "1gpu", "seq_len": 2048, "versions": {}, "rows": [asdict(row)]}
    assert "ZeRO-3 param:cpu mbs 4 ckpt (forced)" in fa.markdown(doc)
    bad = "'offload=cpu' is not key=value with a key of stage, param, mb, ckpt"
    with pytest.raises(SystemExit, match=bad):
        fa.build_grid(smoke=False, only="llama-7b:lora:80:stage=3/offload=cpu")
    for bad_item, says in (("stage=x", "'x' is no value for stage"), ("param=gpu", "'gpu' is no value for param"),
                           ("ckpt=on", "'on' is no value for ckpt"), ("stage=2/param=cpu", "stage 3"),
                           ("mb=0", "at least 1")):  # fmt: skip
        with pytest.raises(SystemExit, match=says):
            fa.build_grid(smoke=False, only=f"llama-7b:lora:80:{bad_item}")


def test_repredict_sets_the_planners_figures_beside_the_measured_ones(fa: ModuleType, tmp_path: Path) -> None:
    """The H100 rows of LoRA with the parameters on the CPU: re-predicted for the card they ran on, each row keeps
    its measurements and gets the planner's figures for the very strategy it ran."""
    src = ROOT / "bench" / "results" / "finetune_accuracy-2026-12-05-1gpu-lora-offload.json"
    out = fa.repredict(src, "1xH100", tmp_path)
    before, after = json.loads(src.read_text()), json.loads(out.read_text())
    assert after["repredicted"]["from"] == src.name and len(after["rows"]) == len(before["rows"]) == 3
    for old, new in zip(before["rows"], after["rows"], strict=True):
        assert new["tokens_per_sec"] == old["tokens_per_sec"] and new["device_used"] == old["device_used"]
        assert new["strategy"] == old["strategy"] and new["predicted"]["tokens_per_sec"] > 0
    assert "Predictions: the planner of" in out.with_suffix(".md").read_text()


def test_a_grid_item_can_adapt_other_modules(fa: ModuleType) -> None:
    """A fifth field sets LoRA's targets (all-linear, or names joined by "+"): the planner predicts that model, the
    row runs it and the report says so; a name the model lacks stops the run before anything starts."""
    hw = fa._plan_accuracy().smoke_hardware(1)
    every, qv = fa.build_grid(
        smoke=False,
        only="llama-7b:lora:60:stage=3/mb=1/ckpt=1:all-linear,llama-7b:lora:60:stage=3/mb=1/ckpt=1",
    )
    assert (every.targets, qv.targets) == ("all-linear", fa.TARGETS)
    [two] = fa.build_grid(smoke=False, only="llama-7b:lora:60:stage=3/mb=1/ckpt=1:q_proj+k_proj")
    assert two.targets == "q_proj,k_proj"
    _, p_every = fa.recommend(hw, every, fa.SEQ)
    _, p_qv = fa.recommend(hw, qv, fa.SEQ)
    assert p_every["trainable_params"] > p_qv["trainable_params"]
    assert p_every["tokens_per_sec"] < p_qv["tokens_per_sec"]  # more wrapped modules: more stage-3 hooks
    row = fa.Row(config=asdict(every), strategy=fa.forced_strategy(every.force).to_dict(), predicted=p_every)
    doc = {"date": "2026-12-06", "tag": "1gpu", "seq_len": 2048, "versions": {}, "rows": [asdict(row)]}
    assert "ZeRO-3 mbs 1 ckpt (forced) on all-linear" in fa.markdown(doc)
    with pytest.raises(SystemExit, match="foo_proj not found in llama-7b"):
        fa.build_grid(smoke=False, only="llama-7b:lora:60:stage=3:foo_proj")
