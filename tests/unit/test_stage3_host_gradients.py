"""ZeRO-3 with the optimizer on the host: what the backward holds while its gradients go to the host
(memory._stage3_host_gradients_phases) -- the reduce bucket's worth of gradients once more on the reduce stream, the
largest gradient on its way, and what is still gathered at that point of the backward (zero3.stage3_gathered_at) --
held to the readings of llama-3b (bench/plan_accuracy.py --family phases, one H100 and one H200) at three reduce
bucket sizes (--zero-set), and to what held the peak of llama-1b, llama-3b and qwen2-1.5b (--peak-anatomy)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest

from wizard.model import load_model_spec
from wizard.planner.buffers import DEFAULT_BUFFERS
from wizard.planner.finetune import trainable_params, trainable_tensors
from wizard.planner.memory import estimate_memory, training_phases
from wizard.planner.zero3 import (
    FLAT_BUCKET_ITEM,
    IN_FLIGHT_ITEM,
    TIED_ITEM,
    stage3_flushes,
    stage3_host_gradient_items,
)
from wizard.strategy import Strategy

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"
GiB = 1024**3
# rows whose peaks count from the end of deepspeed.initialize (Row.peak_grew_at; the model's build kept apart)
FILES = (
    "plan_accuracy-2026-12-06-1gpu-phases-bucket-default.json",  # H100: both offloads at micro-batch 1
    "plan_accuracy-2026-12-06-1gpu-phases-bucket-half.json",  # the same with reduce_bucket_size halved
    "plan_accuracy-2026-12-06-1gpu-phases-bucket-half-opt.json",  # the optimizer alone offloaded, halved, at 4
    "plan_accuracy-2026-12-06-1gpu-phases-bucket-quarter.json",  # both offloads at 1, a quarter of the bucket
    "plan_accuracy-2026-12-06-1gpu-phases-bucket-1b.json",  # H100: llama-1b, both offloads at 1
    "plan_accuracy-2026-12-06-1gpu-phases-bucket-1b-half.json",  # and at 1 and 4 with half the bucket
    "plan_accuracy-2026-12-06-1gpu-phases-heldout-pile.json",  # H100: gpt2-xl and llama-1b, both offloads at 16
    "plan_accuracy-2026-12-06-1gpu-phases-phases-3b-train.json",  # H200: both offloads at 1, 4, 16
    "plan_accuracy-2026-12-06-1gpu-phases-phases-3b.json",  # H200: at 8 (1 and 4 there: the build set the peak)
    "plan_accuracy-2026-12-06-1gpu-phases-anatomy.json",  # H100: llama-1b, llama-3b, qwen2-1.5b, both offloads at 1
    "plan_accuracy-2026-12-06-1gpu-phases-anatomy-b.json",  # H100: llama-3b at 8 (its peak: the loss), gpt2-xl at 1
    "plan_accuracy-2026-12-06-1gpu-phases-deep.json",  # H100: llama-deep (64 layers), both offloads at 1, 4, 8
    # held out (predicted before they were read, -0.5 / -0.8 %), H200: llama-deep at 4 with half the bucket, and
    # llama-3b at 1 with a quarter (its head alone in the first bucket)
    "plan_accuracy-2026-12-06-1gpu-phases-deep-halfbucket.json",
    "plan_accuracy-2026-12-06-1gpu-phases-3b-quarter.json",
)
ANATOMY = "plan_accuracy-2026-12-06-1gpu-phases-anatomy.json"


@pytest.fixture(scope="module")
def pa(bench_script: Callable[[str], ModuleType]) -> ModuleType:
    return bench_script("plan_accuracy")


def _readings(pa: ModuleType, model: str | None = "llama-3b") -> list[tuple[object, int, int]]:
    """(config, measured max-allocated, predicted) of every ZeRO-3 row of ``model`` (None: every model) with the
    optimizer offloaded whose peak counts from the end of deepspeed.initialize."""
    out = []
    for name in FILES:
        for r in json.loads((RESULTS / name).read_text())["rows"]:
            c = pa._cfg(r)
            if (model and c.model != model) or r["status"] != "ok" or pa.build_set_the_peak(r):
                continue
            mem = estimate_memory(pa.bench_spec(c.model), c.strategy(1), r["seq_len"], pa.row_buffers(c))
            out.append((c, r["max_allocated"], mem.allocated))
    return out


def test_the_backward_with_the_optimizer_on_the_host_is_predicted_within_1_5_percent(pa: ModuleType) -> None:
    """llama-3b: -4.3 ... +3.8 % before the output head's copies were counted at what the reduce stream held (10
    bytes an element, the norm's fp64 among them) and the activations held at the first flush counted from where
    the backward is then (zero3.stage3_flushes); -2.0 ... -0.6 % before cuBLAS's workspaces were counted and the
    head alone in a bucket kept a copy of its own size, not of the whole bucket; -1.1 ... +0.3 % now."""
    readings = _readings(pa)
    assert len(readings) == 12
    assert {c.micro_batch for c, _, _ in readings} == {1, 4, 8, 16}
    assert {c.offload_param for c, _, _ in readings} == {"cpu", "none"}
    for c, measured, predicted in readings:
        # without the phase, both offloads at micro-batch 1 were predicted 33 % short (3.43 of 5.09 GiB)
        assert predicted / measured - 1 == pytest.approx(0, abs=0.015), pa._describe(c.__dict__)


def test_the_smaller_models_are_predicted_within_2_percent(pa: ModuleType) -> None:
    """llama-1b, gpt2-xl and qwen2-1.5b. llama-1b's backward reaches its first full bucket with less of the model
    still to walk than the coordinator may keep gathered (1.1e9 elements, max_live_parameters 1e9): before the
    walk (stage3_gathered_at) it was predicted 20.5 % over at micro-batch 1 (6.4 % at half the bucket, 8.7 % at
    4); qwen2-1.5b's tied embedding gradient comes at the backward's end, not in its first bucket (+23.4 % before),
    and its peak is the loss head."""
    others = [
        x
        for x in _readings(pa, None)
        if x[0].model not in ("llama-3b", "llama-deep")  # type: ignore[attr-defined]
    ]
    assert {c.model for c, _, _ in others} == {"llama-1b", "gpt2-xl", "qwen2-1.5b"}  # type: ignore[attr-defined]
    errors = [predicted / measured - 1 for _, measured, predicted in others]
    # gpt2-xl at 1 (tied): -4.6 % before its bucket's own largest member was counted on its way (the 78 + 20 MiB
    # read on the reduce stream); -3.4 % before cuBLAS's two workspaces (64 MiB) were counted; -1.9 % now
    assert len(errors) == 9 and max(abs(e) for e in errors) < 0.02, errors


def test_a_deep_model_holds_the_layers_not_yet_walked_and_part_of_one_layer(pa: ModuleType) -> None:
    """llama-deep (64 layers of hidden 2048, vocabulary 8000): its first bucket overflows at the third MLP gradient of
    the eleventh layer from the top -- 54 layers' checkpoints still held, about half of that layer's transient. The
    share that stood for both before (0.2 of the activations beside a whole layer's transient) put micro-batch 4 at
    -3.0 %; counting the layers not yet walked alone (0.6 of a whole transient) at +4.2 %."""
    spec = pa.bench_spec("llama-deep")
    first, *later = stage3_flushes(spec, DEFAULT_BUFFERS.reduce_bucket_elements)
    assert not later  # the output head, its largest tensor, is in the first bucket
    tensors, _ = trainable_tensors(spec)
    layer = sum(n for n, count in tensors if count == spec.layers)
    # walked of that layer: its down and up projections (the MLP's gate is the gradient that overflows)
    assert first.held == 54 / 64 and first.left == pytest.approx(1 - 2 * 2048 * 5632 / layer)
    assert first.content[1] == spec.vocab * spec.hidden
    readings = {
        c.micro_batch: (measured, predicted)
        for c, measured, predicted in _readings(pa, "llama-deep")
        if not c.zero  # type: ignore[attr-defined]  # DeepSpeed's buffers (the half-bucket reading: elsewhere)
    }
    assert sorted(readings) == [1, 4, 8]
    s = pa.Config("llama-deep", 3, "cpu", "cpu", True, 4).strategy(1)
    host = next(p for p in training_phases(spec, s, 1024) if "gradients to the host" in p.name)
    for mb, (measured, predicted) in readings.items():
        # this moment is each reading's peak (at 8 the anatomy put it at the bucket's flush too, 6.03 GiB)
        assert host.at(mb) / measured - 1 == pytest.approx(0, abs=0.02), mb
        if mb < 8:
            assert predicted / measured - 1 == pytest.approx(0, abs=0.02), mb
        else:
            # at 8 the peak predicted is the backward's start, every checkpoint beside a whole layer's transient
            # (+4.4 %): the step never got there, the transient fitted on other shapes is too large for this one
            assert 0 < predicted / measured - 1 < 0.05


def test_a_bucket_that_never_fills_flushes_at_the_backward_s_end_only() -> None:
    """LoRA's few trained tensors (or a bucket larger than the model) never fill a reduce bucket before the input
    embedding's gradient: the backward's end is the one moment its gradients go to the host."""
    spec = load_model_spec("params=1e9")
    lora = replace(spec, finetune=replace(spec.finetune, mode="lora"))
    s = Strategy(zero_stage=3, offload_optimizer="cpu", activation_checkpointing=True, precision="bf16")
    big = replace(DEFAULT_BUFFERS, reduce_bucket_elements=10 * spec.total_params)
    for model, buf in ((lora, DEFAULT_BUFFERS), (spec, big)):
        assert stage3_flushes(model, buf.reduce_bucket_elements) == []
        phases = [p.name for p in training_phases(model, s, 2048, buf) if "gradients to the host" in p.name]
        assert phases == ["backward's end (the last gradients to the host)"]
    assert len([p for p in training_phases(spec, s, 2048) if "gradients to the host" in p.name]) > 1


def test_a_layer_tensor_larger_than_the_head_sets_a_later_flush() -> None:
    """A model whose MLP matrices outgrow its output head and the bucket (the 1T-parameter plan of ZeRO-Infinity's
    size): the head travels alone first, then each MLP matrix alone, flushed when the next gradient arrives -- that
    later moment, with one matrix walked, carries the largest tensor's copies."""
    spec = load_model_spec("params=1e12")
    mlp = spec.hidden * spec.ffn_hidden
    assert mlp > spec.vocab * spec.hidden > DEFAULT_BUFFERS.reduce_bucket_elements
    first, second = stage3_flushes(spec, DEFAULT_BUFFERS.reduce_bucket_elements)
    assert first.content == (spec.vocab * spec.hidden,) * 2 and first.held == 1 and first.left == 1
    assert second.content == (mlp, mlp) and second.held == 1 and 0 < second.left < 1
    s = Strategy(
        zero_stage=3,
        offload_optimizer="cpu",
        offload_param="cpu",
        gpus_per_node=16,
        activation_checkpointing=True,
        precision="fp16",
    )
    phases = [p for p in training_phases(spec, s, 2048) if "gradients to the host" in p.name]
    assert len(phases) == 3  # the head's flush, the MLP matrix's, the backward's end
    in_flight = [dict(p.fixed)[IN_FLIGHT_ITEM] for p in phases[:2]]
    assert in_flight[1] > in_flight[0]


def test_halving_the_reduce_bucket_frees_two_of_its_halves_as_measured(pa: ModuleType) -> None:
    """The bucket itself and its flat copy for the reduce-scatter: 2 x 0.47 GiB predicted, 0.92 GiB measured (H100)."""
    by_bucket = {
        dict(c.zero).get("reduce_bucket_size", DEFAULT_BUFFERS.reduce_bucket_elements): (measured, predicted)
        for c, measured, predicted in _readings(pa)
        if c.micro_batch == 1 and c.offload_param == "cpu"
    }
    (m_full, p_full), (m_half, p_half) = by_bucket[500_000_000], by_bucket[250_000_000]
    # the two halves, and a little from where the backward is when the smaller bucket fills (one layer fewer walked:
    # more activations held, less gathered)
    assert p_full - p_half == pytest.approx(2 * 2 * 250_000_000, rel=0.02)
    assert p_full - p_half == pytest.approx(m_full - m_half, rel=0.02)


def test_the_phase_exists_only_where_zero_3_sends_gradients_to_the_host(pa: ModuleType) -> None:
    spec = pa.bench_spec("llama-3b")
    both = pa.Config("llama-3b", 3, "cpu", "cpu", True, 4).strategy(1)
    waiting = FLAT_BUCKET_ITEM

    def holds(s: object) -> bool:
        return any(waiting in dict(p.fixed) for p in training_phases(spec, s, 1024))  # type: ignore[arg-type]

    assert holds(both) and holds(replace(both, offload_param="none"))
    assert not holds(replace(both, offload_optimizer="none", offload_param="none"))
    assert not holds(replace(both, zero_stage=2, offload_param="none"))
    # monotone: a larger bucket, a larger micro-batch never hold less
    small = replace(DEFAULT_BUFFERS, reduce_bucket_elements=50_000_000)
    assert estimate_memory(spec, both, 1024, small).allocated < estimate_memory(spec, both, 1024).allocated
    assert (
        estimate_memory(spec, replace(both, micro_batch_size=5), 1024).allocated
        > estimate_memory(spec, both, 1024).allocated
    )
    # the flat copy never exceeds what the model trains: a bucket larger than the model holds every gradient
    huge = replace(DEFAULT_BUFFERS, reduce_bucket_elements=10**12)
    (only,) = [p for p in training_phases(spec, both, 1024, huge) if waiting in dict(p.fixed)]
    # one bucket, flushed at the backward's end, the whole backward walked
    assert only.name == "backward's end (the last gradients to the host)"
    assert dict(only.fixed)[waiting] == 2 * spec.total_params


def test_the_bytes_in_flight_follow_the_partition_the_precision_and_the_optimizers_device(
    pa: ModuleType,
) -> None:
    """The bucket's gradients flattened once more (reduce_scatter_coalesced), and the largest gradient's partition
    of 1/N on its way (llama-3b's 102.4M-element output head, E): its 16-bit GPU copy and its norm in fp64, the
    larger of that and the fp32 copy after it; its 16-bit gradient is in the reduce bucket (contiguous_gradients).
    fp32 training converts nothing; with the optimizer on NVMe the fp32 copies of a whole bucket's partitions wait
    for the swap-out (stage3.py, DeepSpeed 0.19.8). llama-3b's anatomy read the head's copies at 0.95 GiB, 10 bytes
    an element, where 8 were counted before."""
    spec = pa.bench_spec("llama-3b")
    E, B = spec.vocab * spec.hidden, DEFAULT_BUFFERS.reduce_bucket_elements
    one = pa.Config("llama-3b", 3, "cpu", "cpu", True, 1).strategy(1)
    eight = replace(one, gpus_per_node=8)
    cases = {
        one: (2 * B, 2 * E + 8 * E),
        eight: (2 * B, 2 * (E // 8) + 8 * (E // 8)),
        replace(one, precision="fp32"): (4 * B, 4 * E + 8 * E),
        # NVMe: the bucket's other fp32 partitions wait for the swap-out; the head's own comes after its norm
        replace(one, offload_optimizer="nvme", offload_param="nvme"): (2 * B, 4 * (B - E) + 2 * E + 8 * E),
        replace(eight, offload_optimizer="nvme", offload_param="nvme"): (
            2 * B,
            4 * B // 8 - 4 * (E // 8) + 2 * (E // 8) + 8 * (E // 8),
        ),
        # fp32 training on NVMe: the waiting fp32 partitions are the GPU copies themselves
        replace(one, precision="fp32", offload_optimizer="nvme"): (4 * B, 4 * B + 8 * E),
    }
    for s, (flat, in_flight) in cases.items():
        items = dict(stage3_host_gradient_items(spec, s, DEFAULT_BUFFERS))
        assert items == {FLAT_BUCKET_ITEM: flat, IN_FLIGHT_ITEM: in_flight}, s
    # what the reduce stream held at llama-1b's and llama-3b's peaks: the flat bucket, and the head's copies
    for model in ("llama-1b", "llama-3b"):
        head = pa.bench_spec(model).vocab * pa.bench_spec(model).hidden
        anatomy = _anatomy(model)["peak_anatomy"]
        reduce_stream = [b for label, b, _ in anatomy["live"] if label.startswith("the step's, stream 2")]  # type: ignore[index]
        assert max(reduce_stream) == pytest.approx(2 * B, rel=0.06), model
        copies = sum(b for b in reduce_stream if b < 0.9 * 2 * B)
        assert copies == pytest.approx(10 * head, rel=0.001), model
    # a bucket smaller than the gradient: it is reduced alone, in place (no flat copy), its 16-bit gradient where
    # autograd made it; with the optimizer on NVMe only its own fp32 partition waits
    small = replace(DEFAULT_BUFFERS, reduce_bucket_elements=E // 4)
    assert dict(stage3_host_gradient_items(spec, one, small)) == {
        FLAT_BUCKET_ITEM: 0,
        IN_FLIGHT_ITEM: 2 * E + 2 * E + 8 * E,
    }
    on_nvme = replace(one, offload_optimizer="nvme")
    assert dict(stage3_host_gradient_items(spec, on_nvme, small))[IN_FLIGHT_ITEM] == 2 * E + 2 * E + 8 * E
    # the last bucket: the gradients no full bucket took, beside the input embedding, else the embedding alone
    P = trainable_params(spec)
    rest = (P - E) % B
    assert rest + E <= B
    assert dict(stage3_host_gradient_items(spec, one, DEFAULT_BUFFERS, last=True))[FLAT_BUCKET_ITEM] == 2 * (
        rest + E
    )
    snug = replace(DEFAULT_BUFFERS, reduce_bucket_elements=P - E)  # rest 0: the embedding alone, in place
    assert dict(stage3_host_gradient_items(spec, one, snug, last=True))[FLAT_BUCKET_ITEM] == 0
    # the norm goes in chunks of 250M elements: a larger partition holds one chunk in fp64 at a time
    wide = replace(spec, vocab=4 * spec.vocab)
    W = wide.vocab * wide.hidden
    assert W > 250_000_000
    assert dict(stage3_host_gradient_items(wide, one, DEFAULT_BUFFERS))[IN_FLIGHT_ITEM] == 2 * W + max(
        8 * 250_000_000, 4 * W
    )


def test_the_plan_names_the_phase_and_counts_its_drained_activations_as_activations(pa: ModuleType) -> None:
    from wizard.planner.explain import _memory_reason
    from wizard.units import fmt_bytes

    spec = pa.bench_spec("llama-3b")
    mem = estimate_memory(spec, pa.Config("llama-3b", 3, "cpu", "cpu", True, 1).strategy(1), 1024)
    items = dict(mem.gpu_items)
    assert mem.peak_phase == "backward (gradients to the host)"
    assert "ZeRO-3 reduce bucket" in items and "ZeRO-3 gradient partition + reduce bucket" not in items
    acts = items["activations (partly drained)"] + items["backward transient (one layer)"]
    reason = _memory_reason(mem)
    assert reason.startswith("peak during backward (gradients to the host): model states off the GPU")
    assert f"activations {fmt_bytes(acts)} " in reason


# The allocator's cache beside the waiting gradients (calibration.STAGE3_HOST_GRADIENTS_CACHE_BUCKETS): device memory
# (reserved + outside the allocator) of every reading with the optimizer on the CPU and the parameters on the GPU,
# four models on two kinds of GPU -- the set the constant was set on (its median) and docs/measurements.md quotes
CACHE_FILES = (
    "plan_accuracy-2026-12-01-1gpu-zero3-a.json",  # H200: llama-1b, gpt2-xl at 16
    "plan_accuracy-2026-12-01-1gpu-zero3-b.json",  # H200: llama-3b at 16
    "plan_accuracy-2026-12-04-1gpu-accum-accum-offload.json",  # H200: llama-1b at 16, 1 and 4 micro-steps
    "plan_accuracy-2026-12-04-1gpu-accum-accum-offload3.json",  # H200: llama-3b and gpt2-xl at 16, 4 micro-steps
    "plan_accuracy-2026-12-04-1gpu-accum-accum-gpt2xl.json",  # H200: gpt2-xl at 16, 1 and 4 micro-steps
    "plan_accuracy-2026-12-05-1gpu-accum-accum-gpt2xl3.json",  # H100: the same
    "plan_accuracy-2026-12-06-1gpu-phases-phases-3b.json",  # H200: llama-3b at 4
    "plan_accuracy-2026-12-06-1gpu-phases-bucket-half-opt.json",  # H100: llama-3b at 4, half the reduce bucket
    "plan_accuracy-2026-12-06-1gpu-phases-llama5b.json",  # H100: llama-5b (held out) at 8 and 32
    "plan_accuracy-2026-12-06-1gpu-phases-llama5b-half.json",  # and with half the reduce bucket (held out)
    "plan_accuracy-2026-12-06-1gpu-phases-llama5b-nockpt.json",  # H100: llama-5b at 2 without checkpointing
    "plan_accuracy-2026-12-06-1gpu-accum-llama5b-accum.json",  # H100: llama-5b at 8, 4 micro-steps
    "plan_accuracy-2026-12-06-1gpu-phases-llama5b-control3b.json",  # H100: llama-3b at 4 (the same machine)
    "plan_accuracy-2026-12-06-1gpu-accum-llama5b-control3b-accum.json",  # and at 16, 4 micro-steps
    "plan_accuracy-2026-12-06-1gpu-phases-llama5b-b.json",  # another H100: llama-5b at 8
    "plan_accuracy-2026-12-06-1gpu-accum-llama5b-accum-b.json",  # and at 8, 4 micro-steps
)


def _device_readings(pa: ModuleType) -> list[tuple[object, float, float]]:
    out = []
    for name in CACHE_FILES:
        doc = json.loads((RESULTS / name).read_text())
        hw = pa.HardwareReport.from_dict(doc["hardware"])
        for r in doc["rows"]:
            c = pa._cfg(r)
            if r["status"] != "ok" or c.zero_stage != 3 or c.offload_optimizer == "none":
                continue
            if c.offload_param != "none" or not r.get("max_reserved"):
                continue
            r["now"] = pa._repredict(r, hw)
            out.append((c, pa.measured_device(r), pa.predicted_device(r, r["now"]["reserved"])))
    return out


def test_the_cache_the_waiting_gradients_leave_is_predicted_within_8_percent(pa: ModuleType) -> None:
    """Reserved minus allocated was 3.2-7.8 GiB at the default bucket where the step block's share said 1.5-4.3
    (device memory -11.2 ... -0.7 %, median -6.3 % before); two reduce buckets of cache bring every reading within
    8 % (-7.8 ... +4.8 %, median -0.2 %; +0.4 % with the head's copies at 8 bytes an element), llama-5b's held out (at half the bucket -3.8 / -7.8 %: its cache shrank
    0.41 GiB where the rule takes 0.93)."""
    readings = _device_readings(pa)
    assert {c.model for c, _, _ in readings} == {"llama-1b", "gpt2-xl", "llama-3b", "llama-5b"}  # type: ignore[attr-defined]
    assert len(readings) == 23
    errors = [predicted / measured - 1 for _, measured, predicted in readings]
    for (c, _, _), error in zip(readings, errors, strict=True):
        assert error == pytest.approx(0, abs=0.08), pa._describe(c.__dict__)  # type: ignore[attr-defined]
    assert sorted(errors)[len(errors) // 2] == pytest.approx(0, abs=0.01)


def test_the_cache_follows_the_reduce_bucket_and_only_with_the_optimizer_on_the_host(
    pa: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wizard.planner import calibration as cal
    from wizard.planner.memory import fragmentation
    from wizard.planner.zero3 import stage3_working_set

    spec = pa.bench_spec("llama-3b")
    opt = pa.Config("llama-3b", 3, "cpu", "none", True, 4).strategy(1)
    half = replace(DEFAULT_BUFFERS, reduce_bucket_elements=DEFAULT_BUFFERS.reduce_bucket_elements // 2)
    bucket = 2 * DEFAULT_BUFFERS.reduce_bucket_elements
    full_fixed = fragmentation(spec, opt, 1024).fixed
    assert full_fixed == cal.RESERVED_FIXED_BYTES + int(cal.STAGE3_HOST_GRADIENTS_CACHE_BUCKETS * bucket)
    # halving the bucket frees two halves of cache (llama-3b at 4 on an H100: 1.96 GiB of reserved memory)
    assert full_fixed - fragmentation(spec, opt, 1024, half).fixed == bucket
    # with parameters to gather (eight GPUs) the reduce stream's pool is held whole instead of the waiting buckets:
    # its flattened bucket of whole gradients, not partitions, beside the all-gather stream's
    eight = fragmentation(spec, replace(opt, gpus_per_node=8), 1024)
    assert eight.fixed < full_fixed and FLAT_BUCKET_ITEM in eight.pooled
    assert eight.pools >= bucket + stage3_working_set(spec, replace(opt, gpus_per_node=8), DEFAULT_BUFFERS)
    # a model whose trained gradients are fewer than a bucket waits on them all
    lora = replace(spec, finetune=replace(spec.finetune, mode="lora"))
    trained = 2 * trainable_params(lora)
    assert fragmentation(lora, opt, 1024).fixed == cal.RESERVED_FIXED_BYTES + int(
        cal.STAGE3_HOST_GRADIENTS_CACHE_BUCKETS * trained
    )
    # the step block's share elsewhere: stage 2 with the optimizer offloaded keeps half a bucket, stage 3 on the
    # GPU a share of its optimizer sub-group whatever the bucket
    stage2 = replace(opt, zero_stage=2)
    assert full_fixed - fragmentation(spec, stage2, 1024).fixed == int(
        (cal.STAGE3_HOST_GRADIENTS_CACHE_BUCKETS - cal.STEP_BLOCK_SHARE_CHECKPOINTING) * bucket
    )
    on_gpu = replace(opt, offload_optimizer="none")
    assert fragmentation(spec, on_gpu, 1024).fixed == fragmentation(spec, on_gpu, 1024, half).fixed
    # with the parameters offloaded too, the side streams' pools instead of the waiting buckets: they follow
    # DeepSpeed's buffers (fewer parameters live, a smaller bucket: smaller pools), not the waiting buckets' share
    both = replace(opt, offload_param="cpu")
    few = replace(DEFAULT_BUFFERS, prefetch_elements=1, max_live_parameters=1, max_reuse_distance=1)
    for buf in (DEFAULT_BUFFERS, few, half):
        on = fragmentation(spec, both, 1024, buf)
        with monkeypatch.context() as m:
            m.setattr(cal, "STAGE3_HOST_GRADIENTS_CACHE_BUCKETS", 0.0)
            assert fragmentation(spec, both, 1024, buf) == on
    pools = fragmentation(spec, both, 1024).pools
    assert (
        fragmentation(spec, both, 1024, few).pools < pools
        and fragmentation(spec, both, 1024, half).pools < pools
    )
    # under pressure the allocator waits for the reduce stream and gives the blocks back
    pressed = fragmentation(spec, opt, 1024, under_pressure=True).fixed
    assert pressed == fragmentation(spec, stage2, 1024, under_pressure=True).fixed


def _anatomy(model: str) -> dict[str, object]:
    rows = json.loads((RESULTS / ANATOMY).read_text())["rows"]
    (row,) = [r for r in rows if r["config"]["model"] == model]
    return row  # type: ignore[no-any-return]


def test_what_is_gathered_at_the_first_full_bucket_is_what_the_walk_leaves(pa: ModuleType) -> None:
    """At the peak of llama-1b's and llama-3b's backward (the first full bucket goes to the host), the parameter
    blocks on the fetch stream (the first stream the step used, "stream 0") were 1.12 and 1.90 GiB: what the
    backward still had to walk, up to max_live_parameters plus the prefetch bucket (which fetches nothing past the
    model's end): 1.12 and 1.96 GiB predicted."""
    from wizard.planner.zero3 import stage3_gathered_at, stage3_kept_for_backward

    for model in ("llama-1b", "llama-3b"):
        row = _anatomy(model)
        anatomy = row["peak_anatomy"]
        assert anatomy["peak"] == pytest.approx(row["max_allocated"], rel=0.005)  # type: ignore[index]
        fetched = sum(b for label, b, _ in anatomy["live"] if label.startswith("the step's, stream 0"))  # type: ignore[index]
        spec, s = pa.bench_spec(model), pa._cfg(row).strategy(1)
        walked = int(spec.total_params * DEFAULT_BUFFERS.reduce_bucket_elements / trainable_params(spec))
        predicted = stage3_gathered_at(spec, s, DEFAULT_BUFFERS, walked)
        assert predicted / fetched - 1 == pytest.approx(0, abs=0.035), model
    spec = pa.bench_spec("llama-1b")
    s = pa.Config("llama-1b", 3, "cpu", "cpu", True, 1).strategy(1)
    w, E, buf = 2, spec.total_params, DEFAULT_BUFFERS
    at = [stage3_gathered_at(spec, s, buf, x) for x in range(0, E + 1, E // 50)]
    # the forward's end: what it kept plus the prefetch bucket; then what is left to walk, down to the last module
    # and the prefetch bucket: what the backward used, it releases (its next use is the next step's)
    assert at[0] == w * min(E, stage3_kept_for_backward(spec, s) + buf.prefetch_elements)
    assert at[-1] == w * (spec.largest_layer_params + buf.prefetch_elements)
    assert all(a >= b for a, b in itertools.pairwise(at)) and at[-1] < at[0]
    # near the end, what is left to walk is all there is to gather: no prefetch past the model's end
    x = E - stage3_kept_for_backward(spec, s) // 2
    assert stage3_gathered_at(spec, s, buf, x) == w * (E - x)
    # without the prefetch (the parameters on NVMe) what the forward kept is used up, never refilled
    nvme = replace(s, offload_param="nvme")
    assert stage3_gathered_at(spec, nvme, buf, buf.max_reuse_distance // 2) < stage3_gathered_at(
        spec, s, buf, buf.max_reuse_distance // 2
    )
    # one rank with the parameters on the GPU gathers nothing
    assert stage3_gathered_at(spec, replace(s, offload_param="none"), buf, 0) == 0


def test_a_tied_embedding_s_gradient_comes_at_the_backward_s_end(pa: ModuleType) -> None:
    """qwen2-1.5b (its 233M-element embedding tied to the output head): the first full bucket holds the embedding's
    gradient being summed (0.44 GiB), not its partition on the way to the host (2.17 GiB with it), which comes with
    the last bucket; its backward peaked at 4.44 GiB, after the loss head's 4.70 (the row's peak, the forward/loss
    phase)."""
    spec = pa.bench_spec("qwen2-1.5b")
    assert spec.tied_embeddings
    s = pa.Config("qwen2-1.5b", 3, "cpu", "cpu", True, 1).strategy(1)
    E = spec.vocab * spec.hidden
    first, last = [p for p in training_phases(spec, s, 1024) if "gradients to the host" in p.name]
    assert dict(first.fixed)[TIED_ITEM] == 2 * E
    assert dict(last.fixed)[IN_FLIGHT_ITEM] == 10 * E
    row = _anatomy("qwen2-1.5b")
    mem = estimate_memory(spec, s, 1024)
    assert mem.peak_phase == "forward/loss"
    # +1.8 %: the loss head's fitted bytes and cuBLAS's workspaces (counted since) overlap a little here
    assert mem.allocated / row["max_allocated"] - 1 == pytest.approx(0, abs=0.02)  # type: ignore[operator]
    timeline = row["peak_anatomy"]["timeline"]  # type: ignore[index]
    after_loss = [b for n, b in timeline if n > row["peak_anatomy"]["peak_event"] + 100]  # type: ignore[index]
    assert first.at(1) / max(after_loss) - 1 == pytest.approx(0, abs=0.03)
    # with the optimizer on NVMe the first bucket's other partitions still wait in fp32 for the swap-out
    nvme = replace(s, offload_optimizer="nvme")
    B, P = DEFAULT_BUFFERS.reduce_bucket_elements, trainable_params(spec)
    first, last = [p for p in training_phases(spec, nvme, 1024) if "gradients to the host" in p.name]
    # beside the embedding's gradient being summed, the bucket's own largest member (an MLP matrix) is on its way:
    # its 16-bit copy and fp64 norm (gpt2-xl's read at its peak: 20 + 78 MiB), and in fp32 the rest of the bucket
    flush = stage3_flushes(spec, B)[0]
    fill, member = flush.content
    assert member == spec.hidden * spec.ffn_hidden and fill <= B and 0 < flush.walked < 1
    assert dict(first.fixed)[TIED_ITEM] == 2 * E
    assert dict(first.fixed)[IN_FLIGHT_ITEM] == 10 * member + 4 * fill - 4 * member
    # its last bucket is the embedding alone (what came before it filled the bucket): no other partition waits
    assert (P - E) % B + E > B
    assert dict(last.fixed)[IN_FLIGHT_ITEM] == 2 * E + 8 * E
    # untied (llama): the output head's gradient is the backward's first, in the first bucket, on its way
    llama = pa.bench_spec("llama-1b")
    first, _ = [p for p in training_phases(llama, s, 1024) if "gradients to the host" in p.name]
    assert dict(first.fixed)[IN_FLIGHT_ITEM] == 10 * llama.vocab * llama.hidden
