"""Every constant the memory and throughput models rest on, each with where it comes from.

Recalibrating after a new measurement (e.g. ``bench/plan_accuracy.py --analyze`` prints fitted values) means editing
this module only. Measured numbers name their file under bench/results/ or the page docs/measurements.md (which
lists the readings without a result file); "measured on CPU" means the saved-tensor count that
tests/unit/test_activation_recipes.py repeats against the installed transformers.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

# a rank's host cores where unknown: a hardware default, one rule with the config writers; in the fingerprint below
from wizard.hardware.report import DEFAULT_HOST_CORES_PER_GPU  # noqa: F401

GiB = 1024**3

# ------------------------------------------------------------------------------------------------ activations


@dataclass(frozen=True)
class ActivationRecipe:
    """Bytes kept for backward per token per transformer layer in 16-bit training (SDPA attention):
    ``per_hidden*h + per_ffn*ffn + per_kv*kv_dim`` plus, for MoE layers, ``experts_per_token*(per_ffn*ffn_e +
    per_routed_hidden*h) + per_expert*num_experts``; 1 byte per element for each dropout mask when dropout > 0."""

    per_hidden: float
    per_ffn: float
    per_kv: float = 0.0
    dropout_masks: int = 0  # masks of size h per layer (CUDA keeps them as bool)
    per_score: float = 0.0  # x heads x seq, where attention scores are materialised (eager-only models)
    per_rel_span: float = 0.0  # x heads x 2*span (DeBERTa's relative-position scores)
    per_rel_table: float = (
        0.0  # x span x hidden / seq (DeBERTa's projected position table, shared by the tokens)
    )
    per_routed_hidden: float = 0.0  # MoE: tokens copied to and weighted back from each chosen expert
    per_expert: float = 0.0  # MoE: router logits/probabilities per expert
    source: str = ""


ACTIVATION_RECIPES: dict[str, ActivationRecipe] = {
    # GPT-2's gelu_new is written in Python: 5 ffn-sized tensors survive per layer (x, tanh, 1+tanh, 0.5x, out).
    # These recipes are for models whose config keeps transformers' default use_cache=True in training (the HF
    # Trainer without checkpointing); with use_cache=False see USE_CACHE_OFF_BYTES_PER_HIDDEN below.
    "gpt2": ActivationRecipe(
        20, 10, 0, dropout_masks=2, source="measured on CPU, transformers 5.24: 60.1*h at ffn=4h"
    ),
    "gpt2-fused-gelu": ActivationRecipe(
        20, 4, 0, dropout_masks=2, source="gpt2 recipe with a one-kernel GELU"
    ),
    # RMSNorm upcasts to fp32 (4h + 2h per norm), SwiGLU keeps gate, silu(gate), up and their product.
    "llama": ActivationRecipe(
        20, 8, 4, source="measured on CPU, transformers 5.24: 45.6*h (MHA), 42.6*h (GQA 4:1)"
    ),
    "neox": ActivationRecipe(16, 4, 0, source="measured on CPU, transformers 5.24: 32.1*h at ffn=4h"),
    "bert": ActivationRecipe(16, 4, 0, dropout_masks=2, source="measured on CPU, transformers 5.24: 32.1*h"),
    # DeBERTa has eager attention only: scores and its c2p/p2c relative-position terms are materialised.
    "deberta-v2": ActivationRecipe(
        23.0,
        4,
        0,
        dropout_masks=2,
        per_score=3.92,
        per_rel_span=3.85,
        per_rel_table=6.2,
        source="least-squares fit to 27 CPU measurements (h 256/384, heads 4/8, seq 64-256, buckets 32-128): "
        "median error 3 %, max 7 %",
    ),
    "moe": ActivationRecipe(
        20, 8, 4, per_routed_hidden=4, per_expert=34, source="measured on CPU (Mixtral): 72.3*h, top-2 of 4"
    ),
}
# A model whose config sets use_cache=False keeps this many bytes per hidden unit per token per layer more for
# backward in training (ACTIVATION_RECIPES are for the default, True): transformers' GPT-2 keeps 4*h less, GPT-NeoX
# 4*h more, LLaMA-style the same. Counted on CPU by tests/unit/test_bench_plan_accuracy.py (the installed
# transformers, both settings); the H200 rows of bench/plan_accuracy.py built with use_cache=False agree: GPT-2
# allocated 3.9*h less than the default recipe at all four sizes, Pythia 4.0-4.1*h more.
USE_CACHE_OFF_BYTES_PER_HIDDEN: dict[str, float] = {"gpt2": -4.0, "gpt2-fused-gelu": -4.0, "neox": 4.0}
# On CUDA, SDPA's flash kernel takes head dims up to 256; PyTorch pads a head dim that is not a multiple of 8 with
# zeros up to one before the kernel and slices the output back (pad_last_dim in
# aten/src/ATen/native/transformers/attention.cpp). Training then keeps, per token per layer, padded copies of
# query, key and value and the padded output for the kernel's backward, plus a contiguous copy of the sliced output
# for the output projection -- where an aligned head dim keeps one set; and with use_cache on, the KV cache still
# holds the unpadded keys and values the padded copies replaced. The activation recipes are counted on CPU, where
# SDPA does not pad. Measured on one H200 (bench/attention_memory.py, bench/results/attention_memory-2026-12-04*.md,
# torch 2.11): head dims 90, 92 and 100, MHA and GQA, kept 2.2-2.6*h more for backward, within 0.05*h of this
# count, and the cache 4*kv_dim bytes more (4.0*h with MHA, 0.5*h with 8 query heads per KV head).
SDPA_HEAD_DIM_MULTIPLE = 8
SDPA_FLASH_MAX_HEAD_DIM = 256

# Loss head: bf16 logits + their fp32 upcast + log-softmax, and the fp32 gradients in backward (about b*s*V*(2+4+4)
# bytes in forward, up to 14 per logit in backward: docs/measurements.md, "Activations of HF GPT-2"). 12.0 matches the
# ~2.0 GiB per sample measured there for GPT-2-medium at seq 1024 once the layers take their measured 62*h.
LOSS_HEAD_BYTES_PER_VOCAB = 12.0
# Embedding output, final norm input/output and the head's input, per token (x hidden).
HEAD_BYTES_PER_HIDDEN = 6.0
# While a layer runs backward its gradients need about one layer's activations more (assumption; the loss head's
# transient is larger for every model measured, so this rarely sets the peak).
BACKWARD_TRANSIENT_LAYERS = 1.0
# Activation checkpointing (HF gradient_checkpointing): each layer keeps its 16-bit input; in backward one layer at a
# time is recomputed, its activations live again (Korthikanti et al., arXiv:2205.05198: with full recomputation
# one layer's full activations are live while it is recomputed).
CHECKPOINT_BYTES_PER_HIDDEN_PER_LAYER = 2.0
CHECKPOINT_RECOMPUTE_LAYERS = 1.0


@dataclass(frozen=True)
class InferenceRecipe:
    """Peak live bytes per token inside one transformer layer during a forward pass without autograd (16-bit,
    ``torch.no_grad``): ``per_hidden*h + per_ffn*ffn`` (+ for MoE layers ``experts_per_token*(per_ffn*ffn_e +
    per_routed_hidden*h)``) + ``per_score*heads*seq`` where attention scores are materialised. The residual
    stream entering the layer is included. Layers run one after another, so this does not grow with depth."""

    per_hidden: float
    per_ffn: float
    per_routed_hidden: float = 0.0
    per_score: float = 0.0
    source: str = ""


# Measured on CPU (transformers 5.24, bf16, sdpa, use_cache=False): the peak of live non-parameter storages seen by
# a TorchDispatchMode during one forward, fitted over two FFN widths at 3 layers (tests/unit/
# test_inference_recipes.py repeats it). MLPs set the peak: SwiGLU holds gate, up and silu(gate) at once (6 bytes
# per ffn element); GPT-2's Python gelu_new holds four ffn-sized tensors; GQA/MHA does not move it.
INFERENCE_RECIPES: dict[str, InferenceRecipe] = {
    "gpt2": InferenceRecipe(12, 8, source="measured on CPU: 12.06*h + 8*ffn"),
    "gpt2-fused-gelu": InferenceRecipe(12, 4, source="gpt2 recipe with a one-kernel GELU (assumption)"),
    "llama": InferenceRecipe(9, 6, source="measured on CPU: 9.03*h + 6*ffn (MHA and GQA alike)"),
    "neox": InferenceRecipe(8.3, 4, source="measured on CPU: 8.28*h + 4*ffn"),
    "bert": InferenceRecipe(6, 4, source="measured on CPU: 6*h + 4*ffn"),
    # DeBERTa's eager attention (scores + c2p/p2c terms) is larger than its MLP at every width measured.
    "deberta-v2": InferenceRecipe(
        18, 0, per_score=16, source="measured on CPU: 18*h + 16*heads*seq (seq 128/256), the MLP never peaks"
    ),
    # Mixtral: tokens are copied to each chosen expert, whose gate/up/act live together (8 bytes per ffn element).
    "moe": InferenceRecipe(
        9.5,
        8,
        per_routed_hidden=2,
        source="measured on CPU (Mixtral, top-1/2/4 of 4 and 8 experts): within 5 %",
    ),
    # Qwen2-MoE's experts run differently (4 bytes per expert ffn element, more routed copies); its shared expert is
    # a SwiGLU MLP that only peaks when it is much wider than the experts (the llama recipe covers that phase).
    "qwen2_moe": InferenceRecipe(
        12.8, 4, per_routed_hidden=5.6, source="measured on CPU (Qwen2-MoE, top-1/2/4 of 8): within 6 %"
    ),
}
# The model head of an inference pass: 16-bit logits for every position (2 bytes per vocab entry), and, as in an
# evaluation that scores them (a loss / log-softmax, what the HF Trainer's evaluate and train_tiny --eval-only do),
# their fp32 upcast and log-softmax (8 more). Measured on CPU: 2.06*V without labels, 10.06*V with them. Generation
# with HF generate keeps only the last position's logits, so this over-counts there (the safe side).
INFERENCE_LOGITS_BYTES_PER_VOCAB = 2.0
INFERENCE_SCORE_BYTES_PER_VOCAB = 8.0
# A KV cache keeps 2 (K and V) x 2 bytes x layers x kv_dim per token of context. An inference pass counts it:
# transformers' default use_cache=True builds one in every eval-mode forward (the HF Trainer's evaluate, a plain
# model(input_ids, labels=...)) and keeps it until the output is dropped. Measured on the H200 (ZeRO-3 inference,
# seq 1024, bench/results/inference_accuracy-2026-12-02-1gpu-gpt2.json): GPT-2-medium micro-batch 29 / 22 and
# GPT-2-xl 26 / 22 (parameters on the GPU / the CPU) allocated 2.75 / 1.90 / 7.74 / 6.26 GiB above the pass without
# it, against K and V of every layer's 2.72 / 2.06 / 7.94 / 6.72 GiB. The 2026-12-01 LLaMA-7B rows were built with
# use_cache=False (bench/inference_accuracy.py then) and fit the rest without it. ModelSpec.use_cache=False (a
# config that turns the cache off, or --model ...,use_cache=0): no cache (the reasons say what it would add).
KV_CACHE_BYTES_PER_ELEMENT = 2

# ------------------------------------------------------------------------------------------------ DeepSpeed state

# DeepSpeed 0.19.8 defaults (deepspeed/runtime/zero/config.py), which dswiz's config writer keeps.
REDUCE_BUCKET_ELEMENTS = 500_000_000
ALLGATHER_BUCKET_ELEMENTS = 500_000_000
STAGE3_PREFETCH_ELEMENTS = 50_000_000
STAGE3_PARAM_PERSISTENCE_ELEMENTS = 100_000
STAGE3_MAX_LIVE_PARAMETERS = 1_000_000_000
STAGE3_MAX_REUSE_DISTANCE = 1_000_000_000
# Stage 3 steps the optimizer one sub-group at a time: each sub-group's fp32 gradient is made for its update and
# freed after it (stage3.py _prepare_fp32_grad_for_sub_group / _release_sub_group; sub_group_size default 1e9).
STAGE3_SUB_GROUP_ELEMENTS = 1_000_000_000
# ZeRO-3 with the optimizer on the host, when a full reduce bucket goes to the host (zero3.stage3_flushes): the
# activations of the layers not yet walked are held (the layer being walked among them), and of that layer's backward
# transient this share, times the share of its parameters still to walk -- the bucket overflows at some gradient of
# a layer, and what that layer's backward has freed by then depends on which. A fit, on --peak-anatomy's readings
# (one H100, bench/results/plan_accuracy-2026-12-06-1gpu-phases-{anatomy,anatomy-b,deep}.json): llama-3b's bucket
# overflows at a layer's first gradient, llama-deep's (64 layers) at the third MLP gradient with half its layer
# walked, llama-1b's at the attention's output. Over the 30 ZeRO-3 readings with the optimizer on the host whose peak
# counts from initialize (six models, micro-batch 1-32, three bucket sizes): -3.4 ... +3.3 % (+3.3: llama-deep at 8,
# whose peak predicted is the backward's start, not this moment; -3.4: gpt2-xl at 1); the share of the activations
# that stood for both before (0.2 beside a whole layer's transient) read -4.6 ... +3.3 %, llama-deep at 4 -3.0 %.
# (Read before cuBLAS's workspaces were counted in every phase, CUBLAS_WORKSPACE_BYTES; the share kept its value.)
STAGE3_HOST_GRADIENTS_TRANSIENT_SHARE = 0.5
# cuBLAS's workspaces: torch hands each cuBLAS / cuBLASLt handle a workspace from its caching allocator at the first
# matrix product and keeps it with the handle (aten/src/ATen/cuda/CublasHandlePool.cpp; 32 MiB by default on Hopper,
# less on older cards), so it is in max_memory_allocated at every moment of a step. Read: two 32 MiB blocks live at
# the start of every step --peak-anatomy recorded (ten ZeRO-3 steps of five models, one H100 and one H200,
# bench/results/plan_accuracy-2026-12-06-1gpu-phases-*.json). Counted at Hopper's size on every card (older cards
# keep less: a few MiB over-counted there), in training and in inference alike. They were inside the fitted
# fixed cache terms (RESERVED_FIXED_BYTES*, EXPANDABLE_UNRECLAIMABLE_BYTES), which give them back: reserved, device
# and fit predictions are as they were. Over the H200's 372 readings of stages 0-3 the max-allocated error median
# went from 0.21 to 0.15 % (p95 1.10 to 0.76 %, signed median -0.20 to -0.01 %; plan_accuracy-2026-12-06-1gpu-all-aa).
CUBLAS_WORKSPACE_BYTES = 2 * 32 * 2**20
# Mixed-precision Adam (ZeRO, arXiv:1910.02054, K = 12): fp32 master weights 4 + momentum 4 + variance 4 bytes per
# parameter.
MASTER_BYTES = 4
ADAM_STATE_BYTES = 8
# DeepSpeed's estimators assume the same (deepspeed/runtime/zero/stage_1_and_2.py
# estimate_zero2_model_states_mem_needs and stage3.py estimate_zero3_model_states_mem_needs, DeepSpeed 0.19.8: 18 bytes
# per partitioned parameter = 16-bit and fp32 gradients 2 + 4, fp32 weights 4, Adam states 8); their
# additional_buffer_factor defaults to 1.5.
DS_ESTIMATOR_BUFFER_FACTOR = 1.5

# ------------------------------------------------------------------------------------------------ device level

# Allocator cache (torch.cuda.max_memory_reserved - max_memory_allocated; wizard.planner.memory.fragmentation says
# why it takes these shares of the step's large blocks). Fit by bench/plan_accuracy.py fit_allocator_cache
# (least squares of the relative device-memory error beyond 5 %, plus a heavy penalty on any out-of-memory row
# predicted to stay within its card) to the 119 ok rows and 8 OOM rows of one H200, bf16, one rank: GPT-2 124M-1.5B
# at seq 1024, stages 0-3, CPU offload, checkpointing (bench/results/plan_accuracy-2026-11-30-1gpu.json,
# -verify.json), LLaMA-style 1.1B-6.7B (plan_accuracy-2026-12-01-1gpu-zero3-{a,b,c}.json), LLaMA-style / Qwen2
# stages 0-2 at seq 2048, micro-batch 1-16 (-sweep.json), Pythia-1B/1.4B, Qwen2 and llama-3b at ZeRO-3 and the
# recommendations for 24/40 GiB cards (plan_accuracy-2026-12-02-1gpu-heldout.json, -heldout-recs.json,
# -zero3-recs.json), and `dswiz probe`'s out-of-memory ZeRO-1 of Pythia-1B at micro-batch 36
# (probe_calibration-2026-12-02-1gpu-pythia-1b.json). A row run under an allocator cap counts at most the cap.
# Device memory error median 3.9 %, p95 9 %, and every OOM row predicted not to fit the margin. The earlier envelope
# (a share of the logits block, doubled at stage 3) over-predicted checkpointing by up to 25 % and under-predicted
# the step block's cache at micro-batch 1 by 12-18 %; a fit to the accuracy alone (no OOM penalty, logits share 0)
# let Pythia-1B's micro-batch 34 and 36 "fit" a card they ran out of. What the allocator keeps varies from step
# layout to step layout by +-2 GiB at the same strategy (gpt2-xl z1 + checkpointing: 7.7 / 2.8 / 14.1 GiB at micro-
# batch 16 / 32 / 64), so no closed form meets every row; fits are judged with the planner's safety margin on top,
# and under memory pressure the allocator gives its cache back before it fails.
# fit: small-pool segments and blocks no step reuses; 0.85 GiB as fit, which held cuBLAS's workspaces (allocated
# blocks the allocation model did not count then, CUBLAS_WORKSPACE_BYTES): they moved to the allocated side, so
# every reserved and device prediction stayed as it was
RESERVED_FIXED_BYTES = int(0.85 * GiB) - CUBLAS_WORKSPACE_BYTES
STEP_BLOCK_SHARE = 0.52  # fit: of the step's block, at the forward/backward peak
STEP_BLOCK_SHARE_CHECKPOINTING = 0.50  # fit
LOGITS_SHARE = 0.57  # fit: of the fp32 logits block
# With checkpointing, the backward's recomputed layers land in the freed fp32 logits segments and split them: the
# next step's logits block needs a segment of its own. Qwen2-1.5B (151,936-token vocabulary), ZeRO-1 + checkpointing
# at seq 2048, one H200 (plan_accuracy-2026-12-02-1gpu-boundary-boundary.json): the cache was 1.35 fp32 logits
# blocks at micro-batch 12, 16 and 22 and 0.34 at 20, and micro-batch 24 ran out of memory asking for one 27.8 GiB
# block with 21 GiB cached but split (also under `dswiz probe`, probe_calibration-2026-12-02-1gpu-qwen2-1.5b-
# fused.md), which the joint fit's 0.57 let fit. Refit alone over every row (the others as above): 0.75 is the
# smallest share that predicts that OOM not to fit; it also centres the checkpointing rows (signed median device
# error -1.7 % -> -0.2 %, median |error| 4.6 % -> 3.3 %; p95 10.4 % -> 12.5 %, the rows whose cache was small).
# Micro-batch 23, the largest this share allows there, ran (-boundary-boundary23.json, reserved at the card's limit).
LOGITS_SHARE_CHECKPOINTING = 0.75  # fit: with checkpointing, whose recomputed layers split it
FORWARD_TRANSIENT_SHARE_AT_STEP = 0.77  # fit: of the forward's activations + logits, at the optimizer step
# Under memory pressure (a card the step only just fits) the caching allocator frees every cached segment that is
# wholly free and retries before it reports out of memory (PyTorch c10/cuda/CUDACachingAllocator.cpp: a failed
# cudaMalloc releases the cached blocks, then tries again); only the free parts of segments that still hold live
# tensors stay. So a card must hold less than the cache a roomy card shows (memory.MemoryEstimate.needed):
# - at the forward, the last step's large block is a whole free segment (share 0);
# - at the optimizer step, part of the forward's freed activations stays split by the gradients and buckets that
#   backward placed in them: Pythia-1B ZeRO-1 + checkpointing at micro-batch 5 under a 24 GiB cap ran out of memory
#   at the step with 22.7 GiB reserved (share 0 had let it fit; bench/results/plan_accuracy-2026-12-03-1gpu-recs-
#   pressure.json), 0.4 keeps it out with the margin;
# - the fp32 logits' segments stay split by what lands in them, with checkpointing by the recomputed layers: Qwen2-
#   1.5B ZeRO-1 + checkpointing at micro-batch 24 on the whole H200 ran out with 21 GiB of a 27.8 GiB block cached
#   but split (0.75 of it); 0.85 keeps that OOM out with the margin. With the optimizer offloaded less of them stays
#   (measured; the mechanism is not pinned down -- no optimizer state, fp32 gradient or step block of the GPU's own
#   is there to land in them). Micro-batches above the first rule's limit under a 24 GiB cap, one process each
#   (plan_accuracy-2026-12-03-1gpu-pressure-pressure.json, -recs-pressure4/5.json): offload + checkpointing ran at
#   gpt2-xl 26, Qwen2-1.5B 5, llama-3b 27, llama-1b 40, Pythia-1B 14, Pythia-1.4B 13 and ran out of memory at
#   gpt2-xl 28, llama-3b 30, Pythia-1B 16 and llama-1b 41 (ZeRO-1 and ZeRO-2 alike: its 5.0 GiB logits block asked
#   for with 2.84 GiB cached but split, 0.57 of a block, where micro-batch 40 had run). Share 0.25 keeps every one of
#   those OOMs out with the margin (llama-1b at 41 needs 0.972 of the card); 0.1 let llama-1b at 41 fit. Then
#   llama-3b ZeRO-1 at micro-batch 26, recommended under 0.25 at 0.934 of the card, ran out of memory asking for its
#   3.17 GiB logits block with 4.93 GiB cached but split (-recs-recs-s0.json, 2026-12-04; ZeRO-2 at 27 had run):
#   0.4 keeps it out with the margin (0.953 of the card; 0.38 is the least that does).
#   Without checkpointing: GPT-2 ZeRO-1 at micro-batch 32 ran out under a 40 GiB cap and Pythia-1B ZeRO-1 at 34 on
#   the whole card: 0.3 puts them at 1.0 and 0.97 of the card (0.57, the roomy card's share, kept 8 more fits out).
# Judged on the 357 fit checks of bench/results/plan_accuracy-2026-12-03-1gpu-all-b.md (capped rows ran under
# torch.cuda.set_per_process_memory_fraction, which fails where a smaller card would): 0 unsafe, 23 conservative
# (the rule before the pressure runs, 0.57 / 0.85: 45 on the same checks); six OOM rows are kept out by the 5 %
# margin alone, each needing >= 0.956 of its card.
# With the rows of 2026-12-04 (plan_accuracy-2026-12-04-1gpu-all-p.md, the offload share 0.4 below): 564 fit checks,
# 0 unsafe, 31 conservative; five OOM rows kept out by the margin alone, the least needing 0.953 of its card. Every
# reading of a config counted (plan_accuracy-2026-12-05-1gpu-all-q.md): 646 checks, 0 unsafe, 32 conservative.
# With expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) a pool is one segment that grows by
# mapping pages and unmaps its free pages when a request would fail, so under pressure only a fixed remainder stays.
# One H200, one config per process (bench/results/plan_accuracy-2026-12-03-1gpu-allocator-expandable-*.json,
# docs/measurements.md "Expandable segments"): the six configs that ran under a 24 GiB cap reserved 0.05-0.15 GiB
# above their peak allocation (GPT-2 at micro-batch 33 under 40 GiB: 0.13); llama-1b ZeRO-2 + offload +
# checkpointing allocated 23.75 GiB of 24 at micro-batch 46; Qwen2-1.5B ZeRO-1 + checkpointing allocated 137.5 GiB
# of the whole card at micro-batch 32 (24 ran out of memory with the default allocator); the two that ran out of
# memory were predicted to allocate more than their cap. 0.4 GiB: the largest remainder with the allocation model's
# error there on top (it predicted those offload rows 0.24-0.26 GiB low), cuBLAS's workspaces among that error
# (counted as allocated since: CUBLAS_WORKSPACE_BYTES).
EXPANDABLE_UNRECLAIMABLE_BYTES = int(0.4 * GiB) - CUBLAS_WORKSPACE_BYTES
# What that costs: where the cache a roomy card would keep exceeded the budget, the steps ran 8-94 ms slower than
# predicted (median 46 ms; nine configs under 24/40 GiB caps, -expandable-{a,b,c,d}.json; GPT-2 124M at micro-batch
# 30-33 under 40 GiB: 22-53 ms, 13-29 % of its step), charged per micro-step; the same step on the whole card ran as
# predicted (GPT-2 at 32: -1.7 %). Qwen2-1.5B at 28-32 on the whole card, past its budget too, showed none (-1 to -2 %,
# as at 12-22): the caps (set_per_process_memory_fraction) may cost more than a small card would -- not measured.
EXPANDABLE_REMAP_SECONDS = 0.046
UNRECLAIMABLE_STEP_BLOCK_SHARE = 0.0
UNRECLAIMABLE_LOGITS_SHARE = 0.3
UNRECLAIMABLE_LOGITS_SHARE_CHECKPOINTING = 0.85
UNRECLAIMABLE_LOGITS_SHARE_CHECKPOINTING_OFFLOAD = 0.4
UNRECLAIMABLE_FORWARD_TRANSIENT_SHARE_AT_STEP = 0.4
# Stage 0 stepping with a torch optimizer keeps less: llama-1b ZeRO-0 ran at micro-batch 2 under a 22 GiB cap and at 3
# under 23 (peak at the step), and with checkpointing at 13 and 15 under 24, where the share above says each needs
# 0.99-1.05 of its card (bench/results/plan_accuracy-2026-12-04-1gpu-pressure-pressure-z0step.json, -recs-recs-s0.json,
# -pressure-z0.json); 0.1 puts them at or below their card (micro-batch 2 under 22 GiB: 0.991; one row sets it), 0.2
# does not. Those rows stepped with torch's fused AdamW (the bench's torch_adam, fused), a torch optimizer as the
# script's own is under dswiz's configs without offload (config/build.py, optimizer "auto"; torch's default foreach
# AdamW is not measured here); in 16 bits DeepSpeed then wraps it in FP16_UnfusedOptimizer
# (deepspeed/runtime/fp16/unfused_optimizer.py, DeepSpeed 0.19.8), which gives each fp32 master a copy of its own
# gradient: blocks of one tensor's size, which the split segments can take. DeepSpeed's FusedAdam makes it
# FP16_Optimizer, which flattens the whole fp32 gradient into one block as stages 1-2 do: the share above -- where a
# config's optimizer section builds it (buffers.ZeroBuffers.fused_optimizer: wizard.config.optimizer_op reads the
# section for `dswiz check`, `dswiz config --optimizer deepspeed` and the wizard, and dswiz-plan.json keeps it for
# every re-plan), not where a script passes DeepSpeed's FusedAdam as its own optimizer (dswiz cannot see that).
UNRECLAIMABLE_FORWARD_TRANSIENT_SHARE_AT_STEP_UNFUSED_STAGE0 = 0.1
# Stage 3 with parameters to gather (several GPUs, or offloaded) has no share of its own: the gathered parameters and
# the reduce stream's blocks sit in their streams' pools, which memory.stream_pools counts whole (each at its own
# peak, no constant). The share of the gathered working set it replaced (2.0, fit on readings that held the model's
# build in their cache) put device memory +46 % over at the median on the 34 readings with both offloads counted
# from initialize (bench/results/plan_accuracy-2026-12-07-1gpu-phases-seg-*.json and the earlier phases files);
# the pools put them at -2.5 % (docs/measurements.md, "The side streams' pools, tested against their settings").
# ZeRO-3 with the optimizer on the host, at the forward/backward peak: the cache the waiting gradients leave
# (memory._stage3_host_gradients_phase), in reduce buckets of whole gradients (or every trained gradient if fewer),
# in place of the share of the step's block. Each gradient the backward hands to the reduce stream is freed with
# record_stream once copied into the bucket (stage3.py __add_grad_to_ipg_bucket, partition_grads; DeepSpeed 0.19.8),
# and PyTorch's caching allocator gives such a block out again only after that stream has passed it
# (c10/cuda/CUDACachingAllocator.cpp, torch 2.11): the backward reserves new segments beside the blocks in flight.
# Set so that the median error is ~0 on the 23 readings with the parameters on the GPU (llama-1b, gpt2-xl, llama-3b,
# llama-5b; micro-batch 2-32, 1 or 4 micro-steps; H200 and H100; listed in tests/unit/test_stage3_host_gradients.py):
# reserved minus allocated 3.2-7.8 GiB at the default bucket where the step block's share said 1.5-4.3; device
# memory -11.2 ... -0.7 % (median -6.3 %) before, -7.8 ... +4.8 % (median +0.4 %; -0.2 % once the head's copies
# came to 10 bytes an element) at 2.0; 1.75 / 2.5 put the median at -0.8 / +2.6 %. How much of the cache follows
# the bucket differs by model: halving it shrank llama-3b's by 1.96 GiB at micro-batch 4, llama-5b's by 0.41 at 8
# and 32 (bench/results/plan_accuracy-2026-12-06-1gpu-phases-bucket-half-opt.json,
# -phases-llama5b{,-half,-control3b}.json). With the parameters offloaded too (or several GPUs) the side streams'
# pools (memory.stream_pools) count instead. NVMe (the same reduce stream) is extrapolated.
STAGE3_HOST_GRADIENTS_CACHE_BUCKETS = 2.0
# ZeRO-3 with the optimizer on the host takes each gradient partition's norm as it goes to the host, in fp64 (where
# the device has it: get_norm_dtype in runtime/zero/utils.py) and in chunks of 250M elements
# (_constant_buffered_norm2 in runtime/zero/stage3.py, called from _offload_grad_partition_at_boundary, DeepSpeed
# 0.19.8): 8 bytes a partition element beside its 16-bit GPU copy, before the fp32 copy (4) for the optimizer.
# Read as one block of 8 bytes an element (llama-1b's 65.5M-element output head: 500 MiB, beside the copy's 125;
# llama-3b's: 0.95 GiB with its copy; bench/results/plan_accuracy-2026-12-06-1gpu-phases-anatomy.json).
GRADIENT_NORM_BYTES = 8
GRADIENT_NORM_CHUNK_ELEMENTS = 250_000_000
# ZeRO-3 inference: the cache holds blocks of the layers' transient activations (the MLP's intermediates, freed
# before the next layer), which the larger logits cannot reuse, and with the parameters offloaded the gathered
# weights' blocks between them -- shares of one layer's transient (memory.inference_layer_bytes_per_token) -- and,
# with the KV cache (use_cache, transformers' default), a share of the K and V the forward keeps: each layer's are
# allocated among that layer's transients and split the blocks the next layer would reuse. Fit (bench/
# inference_accuracy.py --analyze: a grid over the four, squared errors, subject to every capped run that ran out
# of memory being predicted not to fit with the 5 % margin) to the 34 uncapped or below-cap rows of 2026-12-01..03:
# LLaMA-7B (seq 2048) built without and with the KV cache, GPT-2-medium/xl (seq 1024) with it. LLaMA-7B with the
# cache kept 3.1-3.6 layer transients per sample cached without offload (2.2 without the cache), 6.3-6.8 with the
# parameters on the CPU (4.2); GPT-2 1.2-1.5 and 1.7-3.3. With the three layer shares alone (1.8 / 3.45, fit before
# the LLaMA rows with the cache), the planner let LLaMA-7B at micro-batch 5 fit a 24 GiB card (parameters on the
# GPU); it ran out of memory there with 3.4 GiB cached that the allocator could not give back
# (bench/results/inference_accuracy-2026-12-03-1gpu-llama7b-w3.md). The KV share is a bound that one run sets: without
# the rule about OOMs the fit takes 0 (0.25 GiB, 1.55 / 3.2: median 3.7 %), and 0.1 refuses that micro-batch 5 by
# 0.2 % (22.9 GiB predicted x 1.05 against 24); 4, which the planner now allows, ran under the cap with 22.4 GiB
# reserved where it predicts 20.9 (4.3 layer transients per sample cached). Device memory error on the rows below
# their cap: median 4.4 %, max 19 % (GPT-2-medium at micro-batch 1 with the parameters offloaded: 0.66 GiB cached of
# 1.4).
# 0.2 GiB as fit, cuBLAS's workspaces within it (counted as allocated since)
RESERVED_FIXED_BYTES_INFERENCE = int(0.2 * GiB) - CUBLAS_WORKSPACE_BYTES
FRAGMENTATION_SHARE_INFERENCE = 1.55
FRAGMENTATION_SHARE_INFERENCE_PARAM_OFFLOAD = 3.1
FRAGMENTATION_SHARE_KV_CACHE = 0.1
# Outside the allocator (cudaMemGetInfo's used minus memory_reserved; docs/measurements.md, "Outside the
# allocator"), one H200, torch 2.11 + CUDA 13, one config per process: stages 0-2 at one rank 1.28-1.36 GiB (median
# 1.30, 121 rows), ZeRO-3 at one rank 1.66-1.72 GiB (median 1.68, 50 rows) -- the CUDA context with its library
# handles, and for ZeRO-3 one NCCL communicator's buffers (its all-gathers and reduce-scatters run even at one rank;
# stages 0-2 there only broadcast the model, which left none). The readings of 2026-11-30, several configs per
# process with the bench's own barriers between them, held 1.68-1.76 GiB at every stage. Several ranks: unmeasured
# here (only one GPU was lent), so each communicator keeps the earlier, larger figure of 0.5 GB.
CUDA_CONTEXT_BYTES = int(1.30 * GiB)
NCCL_BYTES_ONE_RANK = int(0.40 * GiB)
NCCL_BYTES_PER_COMMUNICATOR = int(0.5 * GiB)
# Ranking policy: a strategy that needs offload, checkpointing or ZeRO++ is recommended over a simpler one only when it
# is predicted faster by more than this (the throughput model's typical error; revisit after the GPU bench).
RECOMMEND_SIMPLER_WITHIN = 0.03
# Plan with this share of each card left free unless the request says otherwise.
DEFAULT_SAFETY_MARGIN = 0.05
# Host RAM: a CUDA PyTorch + DeepSpeed rank's own resident memory (assumption; typical RSS 2-4 GiB).
HOST_BYTES_PER_RANK = int(3 * GiB)
HOST_SAFETY_MARGIN = 0.10
# CPU optimizer offload: host RAM per offloaded parameter at its peak (DeepSpeed builds the fp32 partition, then pins
# copies of it, so set-up holds more than the 16 bytes the running step keeps), measured as (peak RSS - RSS before -
# HOST_BYTES_PER_RANK) / parameters in bench/results/plan_accuracy-2026-12-01-1gpu-zero3-a.json and -b.json (one
# H200 rank, bf16, psutil RSS sampled every 0.1 s): ZeRO-1/2 20.6-26.1 (llama-1b z1: 26.1); ZeRO-3 optimizer only
# 19.0-20.7 (llama-1b, gpt2-xl, llama-3b); ZeRO-3 optimizer + parameters 25.0-25.4 (llama-1b, gpt2-xl). The largest
# of each. It decides the 7B case on a 125 GiB host: ZeRO-2 + CPU offload of llama-7b (26.1 x 6.74e9 = 164 GiB) was
# killed there before writing its row.
HOST_OFFLOAD_PEAK_BYTES_PER_PARAM = {"stage 1-2": 26.1, "stage 3": 20.7, "stage 3 + parameters": 25.4}
# NVMe optimizer offload in host RAM: the swapper's page-locked buffers, buffer_count (4, what dswiz writes and
# DeepSpeed's default) of the largest optimizer sub-group in fp32 each (runtime/swap_tensor/optimizer_utils.py
# OptimizerSwapper, utils.py SwapBufferManager; DeepSpeed 0.19.8), and at the first step two more sub-groups' worth
# (DeepSpeedCPUAdam creates a sub-group's exp_avg and exp_avg_sq in ordinary host memory, ops/adam/cpu_adam.py, before
# they are swapped out). Measured:
# GPT-2-medium (355M parameters, one sub-group) peaked at 11.7 GiB of RSS where these give 3 + 6 x 1.32 = 10.9
# (bench/results/plan_accuracy-2026-12-07-1gpu-phases-nvme-a.json); the fixed 1.6 GB the planner counted before gave
# 4.5.
NVME_OPTIMIZER_BUFFER_COUNT = 4
NVME_OPTIMIZER_SETUP_SUB_GROUPS = 2
# NVMe parameter offload's staging buffers in pinned host memory (buffer_count 5 x buffer_size 1e8, as dswiz writes
# them).
NVME_PARAM_PINNED_BYTES = 5 * 100_000_000 * 2
# With the parameters on NVMe, training pins a host buffer of up to this many of a rank's 16-bit trained elements
# and keeps there the optimizer sub-groups that fit whole (offload_param.max_in_cpu, DeepSpeed's default and what
# dswiz writes; stage3.py max_params_in_cpu, DeepSpeed 0.19.8; zero3.nvme_parameters).
NVME_PARAM_MAX_IN_CPU = 1_000_000_000

# ------------------------------------------------------------------------------------------------ throughput

# Peak dense TFLOP/s when the GPU catalog has no figure, by compute capability (vendor datasheets, bf16/fp16 tensor).
FALLBACK_PEAK_TFLOPS: dict[tuple[int, int], float] = {
    (7, 0): 125.0,  # V100
    (7, 5): 65.0,  # T4
    (8, 0): 312.0,  # A100
    (8, 6): 71.0,  # RTX 3090 / A40-class
    (8, 9): 181.0,  # L40 / RTX 4090-class
    (9, 0): 989.0,  # H100 / H200 SXM
    (10, 0): 2250.0,  # B200
}
FALLBACK_PEAK_TFLOPS_UNKNOWN = 100.0
FP32_SHARE_OF_PEAK = (
    0.5  # fp32 runs as TF32 on tensor cores: about half the 16-bit rate (A100/H100 datasheets)
)

# Throughput constants below marked "fit" are a least-squares fit (log error) of wizard.planner.throughput to every
# ok one-GPU row the bench has measured on an H200 (bf16): bench/results/plan_accuracy-2026-12-03-1gpu-all-e.md (244
# rows of 28 raw files, listed in its -summary.json; tokens/s error median 2.6 %, p95 11.3 %). The rows cover GPT-2
# 124M-1.5B at seq 1024, LLaMA-style 1.1B/3.4B/6.7B, Qwen2-1.5B and Pythia-1B/1.4B at seq 1024 and 2048, stages 0-3,
# CPU optimizer and parameter offload, checkpointing, micro-batch 1-128 and gradient accumulation 1, 4 and 8; each row
# is predicted for the model its file built (bench/plan_accuracy.py built_with_cache). `python
# bench/plan_accuracy.py --analyze <those files>` prints the refit beside these values. The optimizer step's
# constants are not fit to whole steps: they are fit to the step's own phase (below). The first fit, on GPT-2 alone,
# predicted Qwen2-1.5B 11-22 % slow and llama-1b up to 50 % fast: GPT-2's sizes share one vocabulary, one head dim
# (64) and one sequence length, so per-token costs that differ between families (the output head, attention) were
# folded into the GPT-2 per-layer terms.
#
# A micro-step's compute = matmul FLOPs / (peak x MATMUL_EFFICIENCY) + element-wise HBM traffic / bandwidth, where
# the traffic is ACTIVATION_TRAFFIC_PER_SAVED_BYTE x the bytes forward saves for backward (the activation recipes)
# plus the loss head's LOSS_HEAD_TRAFFIC_BYTES_PER_VOCAB per vocabulary entry. Two terms because matmul FLOPs grow
# with hidden^2 and element-wise work with hidden: small models are memory-bound, large ones approach the matmul
# efficiency. MATMUL_EFFICIENCY is set, not fit (0.65-0.85 fit the rows about equally): 0.7, what large bf16 GEMMs
# reach on Hopper, keeps big-model predictions from being optimistic.
MATMUL_EFFICIENCY = 0.7
# Two kinds of matmul run slower than the rest, as shares of MATMUL_EFFICIENCY:
# - the output head when the vocabulary is not a multiple of MATMUL_ALIGN_ELEMENTS (cuBLAS's tensor-core kernels want
#   16-byte-aligned leading dimensions; GPT-2's 50,257 is odd, which is why nanoGPT pads it to 50,304): fit on GPT-2
#   (every GPT-2 row has the odd vocabulary; LLaMA's 32,000 and Qwen2's 151,936 are aligned);
# - attention (SDPA's fused kernels, on PaLM's FLOP count) at head dims below 128 (fit: GPT-2 and llama-1b have head
#   dim 64, Qwen2-1.5B 128) and, slower still, at a head dim that is not a multiple of 8, which SDPA pads before the
#   fused kernel (set from llama-3b, head dim 100: its 6 rows of stages 1-3 at seq 1024 and 2048 come within
#   -7 ... +11 % at 0.2, within +5 ... +29 % at 0.41);
# - attention at head dims above 128, measured: bench/attention_rate.py on one H200 (bench/results/attention_rate-
#   2026-12-03.md, SDPA causal forward + backward, bf16, torch 2.11) ran head dim 256 at 0.82 (seq 2048) and 0.84
#   (seq 1024) of head dim 128's rate, head dim 192 at 0.71 and 0.75. Pythia-1B (head dim 256) is the bench's
#   model with such heads. The same runs put head dim 64 at 0.78 of 128 and head dim 100 at 0.29-0.32: the fits
#   above also carry what those models' rows add beyond attention.
MATMUL_ALIGN_ELEMENTS = 8
UNALIGNED_HEAD_MATMUL_SHARE = 0.178  # fit
ATTENTION_SHARE_SMALL_HEAD = 0.536  # fit
ATTENTION_SHARE_UNALIGNED_HEAD = 0.2
ATTENTION_SHARE_LARGE_HEAD = 0.8  # measured (bench/attention_rate.py)
ACTIVATION_TRAFFIC_PER_SAVED_BYTE = 9.3  # fit
# The loss head's traffic per vocabulary entry per token: bf16 logits, their fp32 upcast, log-softmax and its
# gradient (~36 bytes read and written by those kernels alone); fit.
LOSS_HEAD_TRAFFIC_BYTES_PER_VOCAB = 64.1
# Share of the layers' traffic in the forward pass (repeated by checkpointing's recompute, alone in inference). Fit;
# forward's share of the FLOPs is 1/3.
FORWARD_SHARE_OF_TRAFFIC = 0.398
# Inference: a forward pass costs this share of a training micro-step's per-layer Python/launch time (set: forward is
# 1/3 of the FLOPs and has no gradient hooks); of stage 3's fetch/release hooks and gather copies, and of the
# layers' element-wise traffic (fit, log least squares, to the 15 ZeRO-3 inference rows of LLaMA-style 7B at seq 2048
# on one H200, bench/results/inference_accuracy-2026-12-01-1gpu-llama7b.json and -verify.json: the planner's
# largest micro-batches for 24/40 GiB cards within -2.6 ... +4.9 %; micro-batch 1 is noise-bound there, two readings
# of one config 7.6k and 10.4k tokens/s).
INFERENCE_LAUNCH_SHARE = 1 / 3
INFERENCE_STAGE3_HOOK_SHARE = 0.43
INFERENCE_TRAFFIC_SHARE = 0.6
# Parameter prefetch (stage3_prefetch_bucket_size, on its own stream with overlap_comm) hides offloaded-parameter
# fetches behind up to this share of a micro-step's busy time -- its compute and the host time the GPU waits for (the
# hooks that issue the copies run while earlier ones are in flight) -- in training as in inference: a micro-step
# never takes less than its PCIe/NVMe transfer time. Set, not fit (as COMM_OVERLAP). What says the fetch hides in
# training too: LoRA on a LLaMA-style 7B, ZeRO-3 + checkpointing with the parameters on the CPU, took 1.50-1.83 s a
# step from micro-batch 1 to 8 where the same config without offload took 1.14-1.62 s (its fetch alone is ~0.7 s a
# step; bench/results/finetune_accuracy-2026-12-06-1gpu-param-overlap.md); counting the fetch in full had put those
# rows up to 31 % slow and fully trained llama-1b / llama-3b with both offloads 5 / 13 % slow.
OFFLOAD_FETCH_OVERLAP = 0.5
DEFAULT_MEMORY_GBS = 2000.0  # HBM bandwidth when the catalog has no figure (A100-40GB class)
# Launch time per layer per micro-step that the GPU waits for whatever the host does (fit; what of the host's
# Python overlaps the GPU is HOST_SECONDS_PER_LAYER below). Counted per micro-step: with 4-8 micro-steps per
# optimizer step the forward and backward took the same time per micro-step as at one (plan_accuracy-2026-12-03-1gpu-
# accum-accum-a.md and -b.md, each config beside a reading at 1 in the same session), except llama-7b ZeRO-3 +
# checkpointing (0.71 s per micro-step at 4, 0.96 s at 1).
MICRO_STEP_SECONDS_PER_LAYER = 0.000813
# The optimizer step, once per optimizer step: fit (plan_accuracy's fit_optimizer_step) to the step phase of the 38
# rows whose optimizer ran on the GPU and whose step was timed on its own (bench/plan_accuracy.py Row.phase_s: CUDA
# events at the forward / backward / step boundaries; median error 8.7 %, p95 32 %, GPT-2 124M's stage 0 and
# gpt2-xl's stage 1 the farthest). It took 0.035-0.17 s, 2.5-8x what the earlier per-parameter figure (1e-11 s, set)
# gave; the whole-step fit had put the difference into the per-micro-step terms, which then over-counted it with
# gradient accumulation (llama-1b ZeRO-1 at 8 micro-steps of 2 was predicted 37 % below its measured tokens/s; now
# 8 %). Two terms:
# - per layer: DeepSpeed's step works tensor by tensor on the host (gradient norms, the overflow check, clearing
#   gradients), and tensors come with layers; ~1.4 ms per layer (ZeRO-3: gpt2-xl's 48 layers 0.088 s, Qwen2-1.5B's 28
#   layers 0.057 s, both 1.5B parameters);
# - per parameter of the local partition, by stage: fused AdamW on fp32 states, the gradients' fp32 copies, the
#   updated 16-bit weights written back; at 4.8 TB/s 1.5-3e-11 s is ~75-145 bytes per parameter. Stage 3 steps each
#   sub-group's flat partition in place (llama-7b 0.17 s, llama-3b 0.09 s); stages 1-2 run one step
#   (stage_1_and_2.py, one figure for both) that also writes the flat 16-bit copy and gathers it; stage 0 in 16
#   bits copies tensor by tensor, and its figures are fit on its own (STAGE0_SECONDS_PER_TENSOR below).
OPTIMIZER_SECONDS_PER_LAYER = 0.00143
OPTIMIZER_SECONDS_PER_PARAM = {"stage 0": 1.55e-11, "stage 1-2": 2.54e-11, "stage 3": 1.54e-11}
# Stage 0 in 16 bits has no per-layer figure but one per tensor: DeepSpeed's FP16_UnfusedOptimizer (for bf16 too)
# takes each parameter tensor on its own (its gradient norm, its fp32 gradient copy, its 16-bit weights written back:
# runtime/fp16/unfused_optimizer.py, step, DeepSpeed 0.19.8), a few kernel launches each. Fit with its per-parameter
# figure above to the step phase of 19 stage-0 rows of 8 models (GPT-2 124M-1.5B, LLaMA-style 1.1B-6.7B, Pythia-1B,
# Qwen2-1.5B): |error| median 6.9 %, max 22.9 %; each model held out, 8.3 % / 25.4 %. The per-layer form of the
# other stages, refit the same way on the same rows, misses by 12.4 % / 26.3 % (held out 18.4 % / 32.7 %); with its
# figures as they were, by 19.2 % / 46.1 % (llama-7b +44 % with 9 tensors a layer, gpt2-xl -15 % with 12):
# bench/fit_stage0_step.py, bench/results/stage0_step_fit-2026-12-04.md.
STAGE0_SECONDS_PER_TENSOR = 0.00019
# With DeepSpeed's FusedAdam (the config's optimizer section builds it: wizard.config.optimizer_op) stage 0 in 16
# bits steps through FP16_Optimizer instead (runtime/fp16/fused_optimizer.py, step, DeepSpeed 0.19.8; its default,
# not the legacy fusion of "optimizer_legacy_fusion"): each gradient is still checked for inf/nan on its own (one
# reduction and a wait for its answer on the host: CheckOverflow.has_overflow_serial, runtime/utils.py), cast to
# fp32 on its own and its updated weight copied back on its own, but there is no norm per tensor -- the cast
# gradients are flattened into one fp32 buffer whose norm, unscaling and Adam update are one kernel each over the
# whole model -- and the flattening is one more pass over 4 bytes a parameter. STAGE0_STEP_SECONDS, the wrapper's
# fixed cost a step, was fit on the unfused wrapper and is charged to this one unmeasured. Fit to the step
# phase (median of 4 steps) of llama-3b (237 tensors, 3.43B parameters: 0.088 s) and gpt2-xl (580, 1.56B: 0.092 s)
# at micro-batch 1, where the unfused step took 0.096 s and 0.136 s (bench/results/plan_accuracy-2026-12-05-1gpu-
# phases-fused.md, plan_accuracy-2026-12-04-1gpu-phases-phases-z0step.md): two readings, two figures. Held out (-phases-
# fused2.md: GPT-2 124M, GPT-2-medium with checkpointing, llama-1b): whole steps within -1.5 / +5.2 / +1.9 %, the step
# phase alone 14-41 % below what was timed (docs/measurements.md, "2026-12-05: the best configs and the margin").
STAGE0_FUSED_SECONDS_PER_TENSOR = 0.00011
STAGE0_FUSED_SECONDS_PER_PARAM = 1.79e-11
# Stage 0 in 32 bits steps the plain torch optimizer (no wrapper, no per-tensor copies): it keeps the per-layer form
# and the per-parameter figure stage 0 had before its 16-bit step was fit per tensor. No fp32 step was measured.
STAGE0_FP32_SECONDS_PER_PARAM = 3.02e-11
# Stage 0 in 16 bits (DeepSpeed's FP16_UnfusedOptimizer wrapper, for bf16 too: memory.stage0_step_bytes) costs a
# fixed ~5 ms a step more than the per-parameter and per-tensor figures above give, outside the step phase. Fit to
# whole steps: 14 ms when the step was timed per layer (GPT-2's steps were under-predicted and this made up for it);
# with the step per tensor, the whole-step tokens/s of 34 stage-0 rows miss by a median 3.6 % at 0, 3.7 % at 5 ms,
# 5.0 % at 14 ms: the rows cannot tell 0 from 5 ms, and 5 ms is kept (bench/fit_stage0_step.py,
# plan_accuracy-2026-12-04-1gpu-all-n.md). Once per optimizer step, not per micro-step: the
# forward and backward of its micro-steps take what the model gives them without it at one micro-step and at four or
# eight (with the per-layer step: llama-1b at micro-batch 4 0.154 s, predicted 0.156; GPT-2 124M at 16 0.087 s, predicted 0.087; Pythia-1B
# at 1, 8 micro-steps: plan_accuracy-2026-12-04-1gpu-accum-accum-boundary.md).
STAGE0_STEP_SECONDS = 0.005
# The host's work per micro-step (wizard.planner.throughput.host_micro_step_seconds): the framework's Python per
# layer, by activation-recipe family (LLaMA-style and Qwen2 run more operators per layer than GPT-2: rotary, RMSNorm
# in Python), plus at stage 3 the fetch/release hooks per layer; the two overlap the GPU's work as a smooth maximum
# of power HOST_OVERLAP_POWER (set: 4, the ZeRO-3 fit's 3.9; the fit wants a harder maximum and then misses held-out
# models). Fit with the constants above; GPT-2's fits to 0: what its host does per layer is in
# MICRO_STEP_SECONDS_PER_LAYER, which does not overlap (the GPT-2 rows, mostly at large micro-batches, do not tell the
# two apart). Micro-batch 1-2 of a ~1B model is host-bound: llama-1b ZeRO-1 took 0.157 /
# 0.175 / 0.211 s a step at micro-batch 1 / 2 / 4 (the GPU's work 0.10 / 0.14 / 0.21 s); before this term the
# planner predicted micro-batch 1 of llama-1b 49 %, of Qwen2-1.5B 87 % fast. A family without its own figure takes
# the largest (HOST_SECONDS_PER_LAYER_DEFAULT): a host-bound step predicted slow costs a smaller recommendation,
# not an OOM. Stage 3: bench/fit_zero3.py refits its terms on the ZeRO-3 configs of the same runs and later ones,
# each at the median of its readings (bench/results/zero3_refit-2026-12-06.md, with the leave-one-model-out errors);
# stage 0-2 predictions do not use them.
HOST_SECONDS_PER_LAYER: dict[str, float] = {"gpt2": 0.0, "llama": 0.00442, "neox": 0.00309}
HOST_SECONDS_PER_LAYER_DEFAULT = max(HOST_SECONDS_PER_LAYER.values())
HOST_OVERLAP_POWER = 4.0
# A step whose prediction waits this share or more on the host (throughput.host_share: the launches per layer, the
# framework's Python, the stage-3 hooks, stage 0's wrapper) is host-bound: it runs as fast as the CPU and the
# process let it. Every config read in more than one process on the one-H200 machine kind, 2026-11-30 to 12-04
# (bench/results/plan_accuracy-2026-12-04-1gpu-all-o.md, "Repeatability"; fastest / slowest): the 20 at a share of
# 25 % or more 1.37x at the median, up to 1.78x (Pythia-1B ZeRO-0 at micro-batch 1, 14 processes on four
# machines: 14,655-26,139 tokens/s); the 44 under it 1.03x at the median, up to 1.35x (Pythia-1B ZeRO-1 at
# micro-batch 2, a 16 % share). On one machine, four processes back to back (-thin-thin4.json): Pythia-1B ZeRO-0 at
# micro-batch 1 18,539-26,139, Qwen2-1.5B ZeRO-1 at 1 9,825-12,004; llama-1b ZeRO-1 at 16 (3 %) 52,162 there,
# 51,676 in an earlier process and 51,748 on 2026-12-01. Neither OMP_NUM_THREADS=1 nor one pinned core removed the
# spread (-thin-thin5-log.txt), and the host's speed each row records before it starts (Row.host_us) did not tell the
# slow processes from the fast on one machine (docs/measurements.md, "How far apart one config's readings fall").
HOST_BOUND_SHARE = 0.25
HOST_BOUND_SPREAD = (1.37, 1.78)  # fastest / slowest of one host-bound config's readings: median, largest
OTHER_SPREAD_MEDIAN = 1.03  # the same for the configs under HOST_BOUND_SHARE
# Checkpointing's recomputed forward runs the forward's share of a layer's operators again: 36-44 % of the aten
# operators of one layer's forward + backward are the forward's (GPT-2, LLaMA, Qwen2, GPT-NeoX in transformers 5.24,
# counted on CPU with a TorchDispatchMode).
HOST_RECOMPUTE_SHARE = 0.4
# Stages 0 and 1 reduce the gradients only at the accumulation boundary (engine.py allreduce_gradients: stage 1's
# reduce_gradients, stage 0's buffered_allreduce_fallback, DeepSpeed 0.19.8), tensor by tensor in Python, at the end
# of that micro-step's backward; stage 2 reduces in every backward. The per-layer host time above was fit to steps of
# one micro-step, so it carries this; the micro-steps before the boundary do not pay it. llama-1b ZeRO-1 at
# micro-batch 2 (host-bound): the backward took 0.077 s at one micro-step per step and 0.058 s a micro-step at eight,
# where seven of eight skip the reduce (plan_accuracy-2026-12-03-1gpu-accum-accum2.md, phases): ~22 ms for 22
# layers (set from that split).
BOUNDARY_REDUCE_HOST_SECONDS_PER_LAYER = 0.001
# - hooks: 10 ms of host time per layer per micro-step on top of the framework's (fit: bench/fit_zero3.py, the 35
#   ZeRO-3 configs of 2026-11-30 to 12-06, 70 readings, each config at the median of its readings; 0.00987 before the
#   fetch overlap above counted in training). Checkpointing's recompute fires the forward hooks again: half of the
#   two hooked passes more (set).
STAGE3_SECONDS_PER_LAYER = 0.0103
STAGE3_RECOMPUTE_HOOK_SHARE = 0.5
# - the hooks' time per layer scales with the layer's submodule forward calls (each fires a fetch and a release
#   hook) over those of the full models it was fit on, counted with forward pre-hooks on transformers 5 models
#   (LLaMA-style: decoder layer, two norms, attention and its four projections, MLP and its three projections,
#   activation; GPT-2 and GPT-NeoX 12). PEFT's LoRA wraps each adapted linear layer in a module that calls four more:
#   the base layer, dropout, A and B (counted the same way: LLaMA with q/v adapted 21 a layer, all-linear 41).
MODULE_CALLS_PER_LAYER: dict[str, int] = {"gpt2": 12, "gpt_neox": 12}
MODULE_CALLS_PER_LAYER_DEFAULT = 13
LORA_MODULE_CALLS_PER_WRAPPER = 4
# - copies: 1.9e-11 s per parameter per micro-step (fit, as above; 2.28e-11 before; the 1-rank all-gather and
#   reduce-scatter are local copies, plus the gradient bucket, averaging and partition copies: ~30 bytes per
#   parameter, 6e-12 s at 4.8 TB/s; the fit also carries what of the stage-3 optimizer step lands in the boundary
#   backward: llama-7b's backward took 0.66 s per micro-step at one micro-step per optimizer step and 0.44 s at
#   four). When the optimizer step's phase was not yet separated the fit was 3e-12. Counted per micro-step.
STAGE3_SECONDS_PER_PARAM = 1.93e-11
# - weight copy-back with the optimizer offloaded and the parameters on the GPU: 5.1 GB/s of 16-bit weights (fit;
#   llama-1b / gpt2-xl z3 + CPU optimizer offload are 0.45-0.50 s slower per step than with the parameters offloaded
#   too, 4-5 GB/s for their 2.2-3.1 GB of weights).
STAGE3_PAGEABLE_COPY_BYTES_PER_SECOND = 5.11e9
# - the other way, with the parameters offloaded and the optimizer on the GPU: the updated fp32 partition copied to a
#   pageable host temporary and converted there into the pinned 16-bit parameters. Two readings on two hosts:
#   llama-1b ZeRO-3 + parameter offload + checkpointing at micro-batch 4 (one H100): an optimizer step of 2.60 s where
#   the update itself is 0.06 s, 0.87 GB/s of 16-bit weights written
#   (bench/results/plan_accuracy-2026-12-07-1gpu-phases-heldout-pools.json); Pythia-1B at 34, seq 2048, the third
#   candidate of `dswiz probe` on one H200 (bench/results/probe_calibration-2026-12-02-1gpu-pythia-1b.json): 4.49 s a
#   step of which the rest of the step is predicted 0.92, 0.57 GB/s. Their geometric mean: the first -20 %, the
#   second +19 % (before it was counted: 7,282 tokens/s predicted for 1,378 measured, 71,238 for 15,501, and the
#   planner put this strategy first for llama-7b on one H200).
STAGE3_PARAM_OFFLOAD_WRITE_BACK_BYTES_PER_SECOND = 0.70e9
# CPU offload: PCIe copies of the 16-bit gradients and weights, and CPU Adam on the host's cores (fit with the constants
# above; the step phase of stages 1-2 with the optimizer on the CPU measured 2.1-2.5e9 parameters/s on the 16-core
# host, plan_accuracy-2026-12-03-1gpu-all-d.md).
# Per direction, x16, PCI-SIG (each generation doubles the last: 2.5 GT/s 8b/10b = 250 MB/s per lane for gen 1).
PCIE_X16_BYTES_PER_SECOND: dict[int, float] = {
    1: 4e9, 2: 8e9, 3: 16e9, 4: 32e9, 5: 64e9, 6: 128e9, 7: 256e9
}  # fmt: skip
PCIE_EFFICIENCY = 0.6  # DeepSpeed's pinned copies in practice (assumption)
DEFAULT_PCIE_GEN = 4
# The host's side of an offloaded optimizer step (CPU Adam, the norm and unscaling passes, the 16-bit conversion):
# seconds per parameter = CPU_ADAM_SECONDS_PER_PARAM + CPU_ADAM_CORE_SECONDS_PER_PARAM / cores per rank. A part
# that more cores do not shorten (the host's memory bandwidth, the passes that run on one thread) and a part they
# share. The share: the step phase of two configs on one H200 machine's host, run on 2, 4, 8 and 16 of its 16 cores
# (bench/plan_accuracy.py --family phases --indices 40,1 --cpus N; bench/results/cpu_offload_cores-2026-12-07.md,
# bench/fit_cpu_offload_cores.py): llama-1b ZeRO-3 with both offloads 1.78 / 1.01 / 0.66 / 0.49 s, GPT-2-XL ZeRO-2
# with the optimizer offloaded 2.44 / 1.26 / 0.99 / 0.68 s; the slope of step against 1/cores gives 2.64e-9 and
# 2.49e-9 core-seconds a parameter (their mean below). The rest anchors the 16-core total where the H200 rows put it
# (1.49e8 parameters a second a core before: 2.4e9 at 16 cores, the step phase of stages 1-2 with the optimizer on
# the CPU measured 2.1-2.5e9 parameters/s there, plan_accuracy-2026-12-03-1gpu-all-d.md). The per-core rule said 7x
# too slow on two cores (CPU Adam alone ran 2.1e9 parameters a second on two threads of that host:
# bench/results/cpu_adam_rate-2026-12-07-h100host.md).
CPU_ADAM_CORE_SECONDS_PER_PARAM = 2.57e-9
CPU_ADAM_SECONDS_PER_PARAM = 1 / (1.49e8 * 16) - CPU_ADAM_CORE_SECONDS_PER_PARAM / 16
# The optimizer step is memory-bound: its per-parameter time scales with HBM bandwidth, measured on an H200.
CALIBRATION_MEMORY_GBS = 4800.0
# NVMe through DeepSpeed's async_io, per node, where the drive's own rates are not given (`--hardware
# ...,nvme_read=GB/s,nvme_write=GB/s`): an assumption, a PCIe 4 NVMe drive at ~3 GB/s each way. What a step moves was
# measured: ZeRO-3 with the optimizer on NVMe reads 16 bytes a parameter (fp32 weights, both Adam moments, the fp32
# gradient) and writes 16 (the gradient at the boundary, the three states after the update), one after the other
# (stage3.py _optimizer_states_and_gradient_swap_in / _swap_out, DeepSpeed 0.19.8, pipelining off by default). On a
# VM's virtio disk that DeepSpeed's async_io read at 1.61 GB/s and wrote at 2.44 (bench/nvme_rate.py, default aio
# settings), GPT-2-medium's step ran 6.58 s where these rates predict 6.58 s (1,247 tokens/s measured, 1,246
# predicted; bench/results/plan_accuracy-2026-12-07-1gpu-phases-nvme-a.json, docs/measurements.md "NVMe offload").
NVME_READ_BYTES_PER_SECOND = 3e9
NVME_WRITE_BYTES_PER_SECOND = 3e9
# Collective bus bandwidth (NCCL busbw) as a share of the GPU's quoted NVLink figure (bidirectional): A100 600 GB/s
# -> ~240, H100 900 -> ~360 GB/s in nccl-tests all_reduce. Without NVLink, rings cross PCIe.
NVLINK_BUSBW_SHARE = 0.4
PCIE_BUSBW_SHARE = 0.4
DEFAULT_INTER_NODE_GBPS = 100.0  # when a cluster is described without its network
INTER_NODE_EFFICIENCY = 0.8
# Share of gradient/parameter traffic hidden behind backward compute when overlap_comm is on (stage 3 default).
COMM_OVERLAP = 0.5


def physics_version() -> str:
    """A fingerprint of every constant above: the run history stores it with each prediction, so that a prediction
    made by other physics (an older dswiz, a recalibration) is made again before it teaches anything."""
    values = sorted((k, repr(v)) for k, v in globals().items() if k.isupper())
    return hashlib.sha256(repr(values).encode()).hexdigest()[:12]
