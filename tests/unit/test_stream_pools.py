"""ZeRO-3 with parameters to gather: the side streams' pools (memory.stream_pools) held whole beside the default
stream's peak, against the readings of one H100 (bench/plan_accuracy.py --family phases, 2026-12-06/07): device memory
with both offloads, and the capped runs that say what a card must hold."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest

from wizard.model import ModelSpec
from wizard.planner import calibration as cal
from wizard.planner.buffers import DEFAULT_BUFFERS
from wizard.planner.memory import estimate_memory, fragmentation, phases_for, reserved_at, stream_pools
from wizard.planner.zero3 import FETCH_STREAM_ITEMS, REDUCE_STREAM_ITEMS
from wizard.strategy import Strategy

RESULTS = Path(__file__).parent.parent.parent / "bench" / "results"
GiB = 1024**3


@pytest.fixture(scope="module")
def pa(bench_script: Callable[[str], ModuleType]) -> ModuleType:
    return bench_script("plan_accuracy")


def _rows(pattern: str) -> list[dict]:
    paths = [p for p in sorted(RESULTS.glob(pattern)) if not p.name.endswith("-summary.json")]
    return [r for path in paths for r in json.loads(path.read_text())["rows"]]


def _side(phase_fixed: tuple[tuple[str, int], ...]) -> int:
    return sum(v for k, v in phase_fixed if k in (*FETCH_STREAM_ITEMS, *REDUCE_STREAM_ITEMS))


@pytest.mark.parametrize("offload_optimizer", ["cpu", "none"])
@pytest.mark.parametrize("gpus", [1, 4])
def test_each_side_pool_is_reserved_at_its_own_peak_beside_the_default_streams(
    offload_optimizer: str, gpus: int
) -> None:
    """Reserved = the default stream's peak (its items and cache) + each side stream's own peak, whichever moment
    sets each: the gathered parameters peak at the forward's end, the reduce stream's blocks at a flush, and neither
    pool gives the default stream anything back."""
    from wizard.model import load_model_spec

    model = load_model_spec("llama-7b")
    s = Strategy(
        zero_stage=3,
        offload_optimizer=offload_optimizer,
        offload_param="cpu" if gpus == 1 else "none",
        activation_checkpointing=True,
        micro_batch_size=2,
        gpus_per_node=gpus,
    )
    phases = phases_for(model, s, 2048)
    frag = fragmentation(model, s, 2048)
    fetch = max(sum(v for k, v in p.fixed if k in FETCH_STREAM_ITEMS) for p in phases)
    reduce = max(sum(v for k, v in p.fixed if k in REDUCE_STREAM_ITEMS) for p in phases)
    flat = 2 * min(DEFAULT_BUFFERS.reduce_bucket_elements, model.total_params)
    assert fetch > 0 and frag.pools == fetch + max(reduce, flat)
    # what a phase's side items hold is in the pools already: only the default stream's part picks the moment
    without = replace(frag, pools=0)
    default_peak = max(p.at(2) - _side(p.fixed) + without.at(2, p) for p in phases)
    assert reserved_at(phases, frag, 2)[1] == default_peak + frag.pools
    # and the pools are not counted twice: at the moment of the most gathered, reserved exceeds its own items by
    # the default stream's cache and the reduce stream's free blocks only
    gathered_at_most = max(phases, key=lambda p: sum(v for k, v in p.fixed if k in FETCH_STREAM_ITEMS))
    assert frag.at(2, gathered_at_most) - without.at(2, gathered_at_most) <= max(reduce, flat)


def test_the_pools_are_each_side_streams_peak_and_only_where_a_training_step_gathers(pa: ModuleType) -> None:
    """stream_pools: (all-gather, reduce), each its stream's peak over the phases, the reduce stream's at least one
    flattened bucket; none where nothing is gathered (ZeRO-3 with the parameters on the one GPU, stages 0-2) and none
    for inference, whose gathered layers its own cache share counts. llama-1b with both offloads: 1.96 / 1.54 GiB
    (its streams read 2.01 / 1.65 on an H100)."""
    model = pa.bench_spec("llama-1b")
    both = Strategy(zero_stage=3, offload_optimizer="cpu", offload_param="cpu", activation_checkpointing=True)
    phases = phases_for(model, both, 1024)
    fetch, reduce = stream_pools(model, both, 1024)
    assert fetch == max(sum(v for k, v in p.fixed if k in FETCH_STREAM_ITEMS) for p in phases)
    items = max(sum(v for k, v in p.fixed if k in REDUCE_STREAM_ITEMS) for p in phases)
    flat = 2 * min(DEFAULT_BUFFERS.reduce_bucket_elements, model.total_params)
    assert reduce == max(items, flat)
    assert (fetch / GiB, reduce / GiB) == (pytest.approx(1.96, abs=0.01), pytest.approx(1.54, abs=0.01))
    assert stream_pools(model, both, 1024, phases=phases) == (fetch, reduce)
    assert fragmentation(model, both, 1024).pools == fetch + reduce
    # the parameters alone offloaded: no host copies on the reduce stream, its one flattened bucket
    alone = replace(both, offload_optimizer="none")
    assert stream_pools(model, alone, 1024)[1] == flat
    # several GPUs gather too, with the parameters on them
    assert all(stream_pools(model, replace(both, offload_param="none", gpus_per_node=4), 1024))
    for nothing in (
        replace(both, offload_param="none"),
        replace(both, zero_stage=2, offload_param="none"),
        replace(both, mode="inference", offload_optimizer="none"),
    ):
        assert stream_pools(model, nothing, 1024) == (0, 0)


def test_smaller_deepspeed_buffers_shrink_the_pools_and_nothing_else() -> None:
    """stage3_max_live_parameters bounds the all-gather stream's pool (llama-1b 2.01 -> 0.85 GiB at 1e9 -> 3e8 on
    an H100), reduce_bucket_size the reduce stream's (1.65 -> 1.12 GiB at 5e8 -> 2e8)."""
    from wizard.model import load_model_spec

    model = load_model_spec(
        "type=llama,layers=22,hidden=2048,heads=32,kv_heads=4,ffn=5632,vocab=32000,seq=2048"
    )
    s = Strategy(zero_stage=3, offload_optimizer="cpu", offload_param="cpu", activation_checkpointing=True)
    base = fragmentation(model, s, 1024)
    live = fragmentation(model, s, 1024, replace(DEFAULT_BUFFERS, max_live_parameters=300_000_000))
    bucket = fragmentation(model, s, 1024, replace(DEFAULT_BUFFERS, reduce_bucket_elements=200_000_000))
    assert live.pools < base.pools and bucket.pools < base.pools
    assert live.per_sample == base.per_sample and live.step_per_sample == base.step_per_sample
    # the waiting buckets' share counts only where there is no reduce stream's pool to count
    assert base.fixed == cal.RESERVED_FIXED_BYTES + int(
        cal.STEP_BLOCK_SHARE_CHECKPOINTING * base.blocks_fixed
    )


def _both_offload_errors(pa: ModuleType) -> dict[tuple[str, int], list[float]]:
    """Device memory (reserved + outside the allocator), predicted / measured - 1, of every uncapped ZeRO-3 reading
    with both offloads counted from the end of deepspeed.initialize (the model's build kept apart), by (model,
    micro-batch)."""
    out: dict[tuple[str, int], list[float]] = {}
    for r in _rows("plan_accuracy-2026-12-0[67]-1gpu-phases-*.json"):
        c = pa._cfg(r)
        if (
            r["status"] != "ok"
            or c.cap_gib
            or c.offload_param == "none"
            or c.offload_optimizer == "none"
            or r.get("init_allocated") is None
        ):
            continue
        mem = estimate_memory(pa.bench_spec(c.model), c.strategy(1), r["seq_len"], pa.row_buffers(c))
        measured = r["max_reserved"] + r["outside_allocator"]
        out.setdefault((c.model, c.micro_batch), []).append(mem.device / measured - 1)
    return out


def test_device_memory_with_both_offloads_centres_on_the_readings(pa: ModuleType) -> None:
    """The share of the gathered working set the pools replaced put these readings +46 % over at the median (up to
    +93 %). Now centred: most models within 7 %, llama-1b +3 ... +20 % (its default stream caches less than the
    shares say), and llama-3b's shape under at micro-batch 1-2 (-21 ... -31 %: its default stream keeps adding
    weight- and activation-sized segments in the third step's backward, 3-4 GiB a roomy card caches and a capped
    one gives back; see the capped test below)."""
    errors = _both_offload_errors(pa)
    flat = [e for es in errors.values() for e in es]
    assert len(flat) >= 35
    assert abs(statistics.median(flat)) < 0.05
    assert max(flat) < 0.25
    others = [e for (model, _), es in errors.items() if not model.startswith("llama-") for e in es]
    assert len(others) >= 10 and max(abs(e) for e in others) < 0.08, others


def test_a_card_with_both_offloads_holds_what_the_planner_asks(pa: ModuleType) -> None:
    """Allocator caps with both offloads (one H100, 2026-12-07): llama-3b at 2 ran under 7.2 and 6.8 GiB (roomy it
    reserved 10.5) and ran out of memory under 6.0; at 1 it ran under 6.6; llama-1b at 1 under 6.2 and 4.6. The
    planner's need (the side pools held whole, the default stream's unreclaimable share) is never short of a cap
    that failed, and never asks more than a cap that ran by more than 1.2 GiB (llama-1b at 1: 1.17 over the 4.6 GiB cap)."""
    rows = _rows("plan_accuracy-2026-12-07-1gpu-phases-capped-*.json")
    assert len(rows) == 6 and {r["status"] for r in rows} == {"ok", "oom"}
    for r in rows:
        c = pa._cfg(r)
        s = c.strategy(1)
        mem = estimate_memory(pa.bench_spec(c.model), s, r["seq_len"], pa.row_buffers(c))
        card = pa.card_for_cap(0, c.cap_gib, 1, s)
        label = pa._describe(c.__dict__)
        if r["status"] == "oom":
            assert mem.needed > card, label  # predicted not to fit: safe
        else:
            assert mem.needed - card < 1.2 * GiB, label
    # the fit with the planner's margin: llama-3b at 2 on the 7.2 GiB cap is where the planner's margin puts it
    fits = [
        r
        for r in rows
        if estimate_memory(pa.bench_spec(r["config"]["model"]), pa._cfg(r).strategy(1), r["seq_len"]).needed
        <= pa.card_for_cap(0, pa._cfg(r).cap_gib, 1, pa._cfg(r).strategy(1)) * (1 - cal.DEFAULT_SAFETY_MARGIN)
    ]
    assert fits and all(r["status"] == "ok" for r in fits)


def test_the_parameters_offloaded_alone_pay_a_pageable_write_back_in_the_step(pa: ModuleType) -> None:
    """ZeRO-3 with the parameters on the CPU and the optimizer on the GPU writes the updated fp32 partition into the
    pinned 16-bit parameters with one blocking cross-device, cross-dtype copy_: PyTorch stages it in a pageable host
    temporary and converts there, at a rate its host sets. llama-1b at micro-batch 4 (one H100): a 2.60 s optimizer
    step where the update is 0.06 s; the planner said 7,282 tokens/s for 1,378 measured, and put the strategy first
    for llama-7b on one H200. Pythia-1B at 34, `dswiz probe`'s third candidate on one H200: 15,501 tokens/s where it
    said 71,238. One rate for both hosts: -20 % and +19 %."""
    from wizard.hardware.report import HardwareReport
    from wizard.planner.throughput import PARAM_WRITE_BACK_PART, estimate_throughput

    doc = json.loads((RESULTS / "plan_accuracy-2026-12-07-1gpu-phases-heldout-pools.json").read_text())
    hw = HardwareReport.from_dict(doc["hardware"])
    (row,) = [r for r in doc["rows"] if r["config"]["offload_optimizer"] == "none"]
    predicted = pa._repredict(row, hw)
    assert predicted["tokens_per_sec"] / row["tokens_per_sec"] - 1 == pytest.approx(-0.2, abs=0.03)
    assert predicted["optimizer_s"] / statistics.median(row["phase_s"]["step"]) - 1 == pytest.approx(
        0.2, abs=0.05
    )
    probe = json.loads((RESULTS / "probe_calibration-2026-12-02-1gpu-pythia-1b.json").read_text())
    sidecar = json.loads(probe["sidecar"])
    (third,) = [c for c in probe["probe"]["result"]["candidates"] if c["strategy"]["offload_param"] == "cpu"]
    on_h200 = estimate_throughput(
        HardwareReport.from_dict(sidecar["hardware"]["report"]),
        ModelSpec.from_dict(sidecar["model"]["spec"]),
        Strategy(**third["strategy"]),
        2048,
    )
    assert on_h200.tokens_per_sec / third["measured"]["tokens_per_sec"] - 1 == pytest.approx(0.19, abs=0.03)
    # only there: with the optimizer offloaded too the host holds the fp32 partition and converts it in place
    c = pa._cfg(row)
    both = estimate_throughput(
        hw, pa.bench_spec(c.model), replace(c.strategy(1), offload_optimizer="cpu"), 1024
    )
    alone = estimate_throughput(hw, pa.bench_spec(c.model), c.strategy(1), 1024)
    assert PARAM_WRITE_BACK_PART in dict(alone.parts) and PARAM_WRITE_BACK_PART not in dict(both.parts)
