"""SDPA's padded head dims in the activation memory (memory.sdpa_padding_bytes_per_token): held to what one H200
measured per layer (bench/attention_memory.py, committed under bench/results/), and its rules where no GPU is
needed."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from wizard.hardware.described import describe
from wizard.model import load_model_spec, spec_from_config
from wizard.planner import calibration as cal
from wizard.planner import memory
from wizard.planner.memory import (
    activation_bytes_per_sample,
    sdpa_padded_head_dim,
    sdpa_padding_bytes_per_token,
)
from wizard.planner.search import plan
from wizard.planner.types import PlanRequest
from wizard.units import fmt_bytes

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"
H200 = RESULTS / "attention_memory-2026-12-04-b16.json"


def test_every_measured_layer_within_one_percent(bench_script: Callable[[str], ModuleType]) -> None:
    # Batch 16 x seq 1024 (the tokens of the llama-3b ZeRO-3 rows of bench/plan_accuracy.py): what stayed allocated
    # across each layer, head dims 64-128 aligned and not, MHA and GQA, the KV cache on and off.
    am = bench_script("attention_memory")
    doc = json.loads(H200.read_text())
    assert doc["device"].startswith("NVIDIA") and not doc["smoke"]
    unaligned = [r for r in doc["rows"] if r["head_dim"] % cal.SDPA_HEAD_DIM_MULTIPLE]
    assert len(unaligned) >= 8 and {r["use_cache"] for r in unaligned} == {True, False}
    for r in doc["rows"]:
        predicted = am.planner_per_token(r, doc["seq"])
        assert predicted == pytest.approx(r["retained_per_token"], rel=0.01), r


def test_the_padding_is_what_an_aligned_head_dim_would_not_keep(
    bench_script: Callable[[str], ModuleType],
) -> None:
    # Measured: head dim 100 kept 2.3*h more for backward than 128 at the same width, and the cache 4*h more (MHA).
    doc = json.loads(H200.read_text())
    by = {(r["head_dim"], r["kv_heads"], r["use_cache"]): r for r in doc["rows"]}
    aligned, padded, padded_cache = by[(128, 16, False)], by[(100, 32, False)], by[(100, 32, True)]
    cfg = bench_script("attention_memory").llama_config(100, 32, 32, 2, True)
    saved, cache = sdpa_padding_bytes_per_token(spec_from_config(cfg, name="l", source="test"))
    h = 3200
    measured_saved = padded["saved_per_token"] / h - aligned["saved_per_token"] / (16 * 128)
    measured_cache = (padded_cache["retained_per_token"] - padded["retained_per_token"]) / h
    assert saved / h == pytest.approx(measured_saved, abs=0.1)
    assert cache / h == pytest.approx(measured_cache, abs=0.1)


def test_the_cache_holds_the_unpadded_keys_and_values_of_the_kv_heads() -> None:
    # What the cache added on the H200 per layer and token: 4*kv_dim bytes, i.e. 4.0*h with MHA and 0.5*h with 32
    # query heads over 4 KV heads -- the KV width, not the query width.
    doc = json.loads(H200.read_text())
    by = {(r["head_dim"], r["kv_heads"], r["use_cache"]): r for r in doc["rows"]}
    for kv_heads in (32, 4):
        on, off = by[(100, kv_heads, True)], by[(100, kv_heads, False)]
        measured = on["retained_per_token"] - off["retained_per_token"]
        assert measured == pytest.approx(4 * kv_heads * 100, rel=0.05)


@pytest.mark.parametrize("head_dim", [64, 80, 128, 256])
def test_aligned_head_dims_keep_nothing_more(head_dim: int) -> None:
    spec = replace(load_model_spec("llama-7b"), head_dim=head_dim)
    assert sdpa_padded_head_dim(spec) == head_dim
    assert sdpa_padding_bytes_per_token(spec) == (0.0, 0.0)


def test_padding_only_where_the_flash_kernel_pads() -> None:
    base = replace(load_model_spec("llama-7b"), head_dim=100)
    assert sdpa_padded_head_dim(base) == 104
    assert sdpa_padded_head_dim(replace(base, head_dim=90)) == 96
    # above the flash kernel's limit, and with eager attention, nothing is padded
    assert sdpa_padded_head_dim(replace(base, head_dim=cal.SDPA_FLASH_MAX_HEAD_DIM + 4)) == 260
    assert sdpa_padding_bytes_per_token(replace(base, attention="eager")) == (0.0, 0.0)


def test_the_cache_copies_count_only_for_a_decoder_with_the_cache_and_without_checkpointing() -> None:
    spec = replace(load_model_spec("llama-7b"), head_dim=100)
    seq = 1024
    _, cache = sdpa_padding_bytes_per_token(spec)
    assert cache == 4 * spec.kv_dim
    assert sdpa_padding_bytes_per_token(replace(spec, use_cache=False))[1] == 0
    assert sdpa_padding_bytes_per_token(replace(spec, encoder=True))[1] == 0
    with_cache = activation_bytes_per_sample(spec, seq, checkpointing=False)[0]
    without = activation_bytes_per_sample(replace(spec, use_cache=False), seq, checkpointing=False)[0]
    assert with_cache - without == pytest.approx(spec.layers * cache * seq, abs=spec.layers)
    # transformers turns the cache off in checkpointed layers: the same bytes either way
    assert activation_bytes_per_sample(spec, seq, checkpointing=True) == activation_bytes_per_sample(
        replace(spec, use_cache=False), seq, checkpointing=True
    )


def test_more_padding_keeps_more() -> None:
    # at one width, a head dim further from the next multiple of 8 pads more of every head
    spec = load_model_spec("llama-7b")
    extra = [
        sdpa_padding_bytes_per_token(replace(spec, heads=16, kv_heads=16, head_dim=hd))[0] / (16 * hd)
        for hd in (95, 94, 92, 90, 89)
    ]
    assert extra == sorted(extra)
    saved = [activation_bytes_per_sample(replace(spec, head_dim=hd), 1024, False)[0] for hd in (100, 104)]
    assert saved[0] > saved[1]


def test_the_plan_says_what_the_padding_costs() -> None:
    # OpenLLaMA-3B's shape (head dim 100) on one A100-80GB: every training candidate says the head dim is padded, and
    # how much more its layers keep; LLaMA-7B (head dim 128) says nothing of it.
    hw = describe("1xA100-80GB")
    padded = load_model_spec(
        "type=llama,name=openllama-3b,layers=26,hidden=3200,heads=32,ffn=8640,vocab=32000"
    )
    best = plan(hw, padded, PlanRequest(seq_len=1024)).best
    assert best is not None
    (line,) = [r for r in best.reasons if r.startswith("head dim 100 is not a multiple of 8")]
    s = best.strategy
    kept, transient = memory.sdpa_padding_bytes_per_sample(padded, 1024, s.activation_checkpointing)
    extra = (transient if s.activation_checkpointing else kept) * s.micro_batch_size
    assert f"pads it to 104 for the fused attention kernel, which keeps {fmt_bytes(extra)} more" in line
    aligned = plan(hw, load_model_spec("llama-7b"), PlanRequest(seq_len=1024)).best
    assert aligned is not None and not any("is not a multiple of 8" in r for r in aligned.reasons)


def test_a_held_out_deepspeed_step_allocates_what_the_count_says(
    bench_script: Callable[[str], ModuleType], monkeypatch: pytest.MonkeyPatch
) -> None:
    # bench/plan_accuracy.py --family phases index 34 on one H200 (after the rule was set from single layers):
    # llama-3b (head dim 100) ZeRO-2 at micro-batch 6, seq 2048, with the KV cache -- a stage, micro-batch and
    # sequence no earlier row ran. 98.22 GiB allocated at its peak; without the padding the planner said 92.7.
    pa = bench_script("plan_accuracy")
    doc = json.loads((RESULTS / "plan_accuracy-2026-12-04-1gpu-phases-phases-padding.json").read_text())
    (row,) = doc["rows"]
    assert row["status"] == "ok" and doc["use_cache"]
    s = pa._cfg(row).strategy(1)
    with pa.built_with_cache(True):
        spec = pa.bench_spec("llama-3b")
    assert memory.estimate_memory(spec, s, row["seq_len"]).allocated == pytest.approx(
        row["max_allocated"], rel=0.01
    )
    monkeypatch.setattr(memory, "sdpa_padding_bytes_per_token", lambda model: (0.0, 0.0))
    without = memory.estimate_memory(spec, s, row["seq_len"]).allocated
    assert without < row["max_allocated"] * 0.95


def test_the_bench_runs_on_cpu_and_renders_again(tmp_path: Path, bench_smoke: Callable[..., Any]) -> None:
    # --smoke: tiny layers on the CPU (where SDPA pads nothing, and no allocation is read); --analyze writes the
    # markdown again from the raw file with the planner as it is.
    bench_smoke("attention_memory", tmp_path)
    (raw,) = tmp_path.glob("attention_memory-*-smoke.json")
    doc = json.loads(raw.read_text())
    assert doc["smoke"] and [r["head_dim"] for r in doc["rows"]] == [8, 8, 10, 10]
    assert all(r["saved_per_token"] > 0 and r["retained_per_token"] is None for r in doc["rows"])
    first = raw.with_suffix(".md").read_text()
    raw.with_suffix(".md").unlink()
    proc = subprocess.run(
        [sys.executable, "bench/attention_memory.py", "--analyze", str(raw)],
        cwd=RESULTS.parents[1],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert raw.with_suffix(".md").read_text() == first
