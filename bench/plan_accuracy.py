"""How right is `dswiz plan`? Real DeepSpeed training steps of GPT-2-family models vs the planner's predictions (and
vs DeepSpeed's own estimator), on the GPUs of this machine.

    # On the GPU machine (one launcher start; one process per GPU loops over the configs in-process):
    python3 bench/plan_accuracy.py --gpus 1 --budget-s 400 --out $OUT
    python3 bench/plan_accuracy.py --gpus 2 --budget-s 400 --out $OUT
    # After a recalibration, re-verify only today's recommendations (+ one boundary check each), ~200 s:
    python3 bench/plan_accuracy.py --gpus 1 --tiers 0 --budget-s 200 --out $OUT   # -> ...-1gpu-verify.json
    # Anywhere, from the raw JSON (redo the analysis after a recalibration, no GPU needed); several files of the same
    # GPU count are merged into one run, every reading of a config kept (it counts at their median):
    python3 bench/plan_accuracy.py --analyze bench/results/plan_accuracy-*-1gpu.json bench/results/plan_accuracy-*-1gpu-verify.json
    # The configs large models need (ZeRO-3, offload, checkpointing; LLaMA-style and GPT-2, ~1B-7B), one process per
    # config; --models / --indices pick part of that grid (the 2026-12-01 runs: --models llama-1b,gpt2-xl,llama-3b
    # --label a; --indices 23,24,26,10,12,15 --label b; --indices 30,4,15,41,47 --label c):
    python3 bench/plan_accuracy.py --family zero3 --budget-s 400 --config-timeout-s 150 --label a --out $OUT
    # Stages 0-2 of LLaMA-style and Qwen2 decoders at seq 2048 across micro-batches 1-16 (per-sample vs per-step
    # cost of a family the GPT-2 fit did not see), one process per config, ~7 min:
    python3 bench/plan_accuracy.py --family sweep --budget-s 400 --config-timeout-s 120 --out $OUT
    # Today's recommendations the last analysis could not judge ("unknown"), each under its card's cap:
    python3 bench/plan_accuracy.py --family recs --models gpt2-large,pythia-1b --cards full --label recs --out $OUT
    # Micro-batches above the fit rule's limit under 24/40 GiB caps, to find where each strategy runs out of memory
    # (2026-12-03: --indices 0,...,12 --label pressure, one process per config, ~8 min; 2026-12-04: --indices
    # 17,...,20 --label pressure-z0):
    python3 bench/plan_accuracy.py --family pressure --budget-s 470 --config-timeout-s 120 --label pressure --out $OUT
    # Readings with each step split into forward / backward / optimizer step, of the families still over target
    # (2026-12-03: --indices 0,...,5 --label phases-offload; --indices 6,...,12 --label phases-zero3; --indices
    # 13,...,19 --label phases-more; --indices 20,...,24 --label phases-warm; --indices 25,...,28 --label phases-step;
    # 2026-12-04: --indices 29,...,33 --label phases-third; --indices 34 --label phases-padding; --indices 35,36,37
    # --label phases-z0step; 2026-12-05: --indices 38,39,40 --label phases-param; 2026-12-06: --indices 40,...,44
    # --label phases-3b; --indices 41,43,38 --label phases-3b-train, the peaks counted from the end of initialize;
    # 2026-12-07: --indices 68,40,1 --label adamhost, beside bench/cpu_adam_rate.py on the same host):
    python3 bench/plan_accuracy.py --family phases --budget-s 430 --config-timeout-s 150 --label phases --out $OUT
    # How much of each step the GPU was busy, and where it waited on the host (a profile of the last untimed step;
    # 2026-12-07: --indices 11,14,18,35,36,37,13,3 --label busy, and --family accum --indices 27,29,24,25; with the
    # host's Python stacks, whose tracer costs the host more than the idle it explains: --family accum --indices
    # 27,24 --host-while-idle --label idle):
    python3 bench/plan_accuracy.py --family phases --indices 11,14 --gpu-busy --label busy --out $OUT
    # Gradient accumulation: each config at 4-8 micro-steps per optimizer step beside a reading at 1 (2026-12-03:
    # --indices 0,...,8 --label accum-a; --indices 9,...,17 --label accum-b; 2026-12-04: --indices 22,...,25
    # --label accum-offload; --indices 26,27 --label accum-offload3; --indices 28,29 --label accum-gpt2xl;
    # --indices 30,...,36 --label accum-boundary):
    python3 bench/plan_accuracy.py --family accum --budget-s 440 --config-timeout-s 150 --label accum --out $OUT
    # Each recommendation the machine effect leaves in doubt beside the best config measured for its card, in one
    # launch, two rounds interleaved (not run yet: the device was taken away on 2026-12-04 before its first call
    # finished; indices 0-13 are round 1 without llama-3b, ~7 min):
    python3 bench/plan_accuracy.py --family pairs --budget-s 520 --config-timeout-s 150 --label pairs --out $OUT
    # The 24 GiB recommendations below 0.97 of the best measured and those best configs, under a cap at what the
    # planner lets the card hold with its 5 % margin (22.7 GiB): does the best config fit the card with the margin?
    python3 bench/plan_accuracy.py --family margin --budget-s 430 --config-timeout-s 130 --label margin --out $OUT
    # Here, on CPU: the real launcher, 2 gloo ranks, a tiny GPT-2, 2 configs (proves the script before the GPU):
    python3 bench/plan_accuracy.py --smoke --out /tmp/pa

The grid comes from the planner itself, in priority order, and stops starting configs once --budget-s (counted
from the launch) is spent; every finished config is appended to the raw JSON at once, so a cut-off run keeps its
rows:
  T0  the recommendation for each model (124M-1.5B) on the whole card and on smaller cards (24/40/80 GiB, emulated
      with torch.cuda.set_per_process_memory_fraction; the planner plans for cap + CUDA context + NCCL, which live
      outside the cap) -- run under that cap: does it OOM, how fast is it. Without T1 (--tiers 0), also each
      non-offload recommendation at the smallest micro-batch the memory model says does not fit, under the same cap;
  T1  the recommended strategy at the powers of two around its predicted largest micro-batch (uncapped): the one
      below must fit the cap, the one above must not (measured reserved memory vs the cap);
  T2  the two best other strategies (another stage / checkpointing) at their largest power-of-two micro-batch;
  T3  a sweep like the earlier GPT-2-medium readings of docs/measurements.md: stages 0-3, CPU offload,
      checkpointing, micro-batch 8.
Each config: a fresh engine (bf16, seq 1024, random init built on the GPU), 2 warm-up steps, then the median of 4
timed steps; torch.cuda.max_memory_allocated/reserved after reset_peak_memory_stats, and the device-level usage
(cudaMemGetInfo) minus reserved = CUDA context + NCCL. Between configs: engine.destroy(), gc, empty_cache. The
ranks inherit PYTORCH_CUDA_ALLOC_CONF from the environment (recorded in the raw file as alloc_conf).

The analysis re-plans every (model, card) with the calibration as it is now and judges that recommendation from
the measured rows: measured (that config ran), inferred (a larger micro-batch of the strategy fit that card, or a
smaller one OOMed), or unknown -- the verify run turns unknowns into measurements.

Optimizer: rows without offload use torch's fused AdamW through DeepSpeed ("torch_adam": true, "fused": true):
one multi-tensor CUDA kernel with the same fp32 states as DeepSpeed's FusedAdam and no temporaries, without the
~35 s fused_adam JIT build per call (--ds-fused-adam measures DeepSpeed's own instead: rows of their own, labelled
"ds:fusedadam", stage 0 predicted through FP16_Optimizer's step). CPU offload rows need
DeepSpeedCPUAdam (its ~40 s JIT build happens at the first such row, late in the grid).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import gc
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))  # _common, also when this file is loaded by a test

import _gpu_busy as gpu_busy  # noqa: E402
import _peak_anatomy as peak_anatomy  # noqa: E402
from _common import (  # noqa: E402
    PYTHIA_1_4B,
    PYTHIA_1B,
    QWEN2_1_5B,
    load_bench_script,
    positive_int,
    repo_env,
    run_in_group,
    write_result,
)

from wizard.alloc_conf import expandable_segments, planned_expandable_segments  # noqa: E402
from wizard.config.load import settings_from_dict  # noqa: E402
from wizard.config.schema import ConfigSet  # noqa: E402
from wizard.hardware.report import GPUInfo, HardwareReport, HostInfo  # noqa: E402
from wizard.model import ModelSpec, load_model_spec, spec_from_config  # noqa: E402
from wizard.planner import Plan, PlanRequest, max_micro_batch, plan  # noqa: E402
from wizard.planner import calibration as cal  # noqa: E402
from wizard.planner.buffers import ZeroBuffers  # noqa: E402
from wizard.planner.ds_estimator import deepspeed_estimate  # noqa: E402
from wizard.planner.memory import allocator_remaps, device_overhead, estimate_memory, stream_pools  # noqa: E402
from wizard.planner.throughput import (  # noqa: E402
    HOST_PARTS,
    STEP_PARTS,
    ThroughputEstimate,
    estimate_throughput,
    host_bound,
    host_share,
    optimizer_kind,
)
from wizard.service.prediction import BUFFER_KEYS, buffer_count, buffers_of, least_buffer_count  # noqa: E402
from wizard.strategy import Strategy  # noqa: E402

GiB = 1024**3
SEQ = 1024
MODELS = (
    "gpt2-medium",
    "gpt2-xl",
    "gpt2-large",
    "gpt2",
)  # priority order: the model of docs/measurements.md's earlier readings, then the largest
CAPS_GIB = (None, 24, 40, 80)  # None: the whole card
WARMUP_STEPS, TIMED_STEPS = 2, 4
# ZeRO-3 records its parameter-fetch trace over the first steps; a llama-1b step kept falling from 0.62 to 0.36 s
# through the 3rd and 4th step after 2 warm-up steps (plan_accuracy-2026-12-03-1gpu-phases-phases-more.json), so
# stage 3 warms up longer (rows written since carry their warmup_steps).
WARMUP_STEPS_STAGE3 = 5
MAX_MICRO_BATCH = 256  # keeps a step of the smallest model under ~2 s
SMOKE_MODEL = "tiny"
ALL_TIERS = (0, 1, 2, 3)
SMOKE_SEQ = 64
# --family zero3: the configs large models need (issue 19), on models built from config in two architectures at
# ~1B, ~3B and ~7B; each config runs in its own process (an engine leaks its model states into the next config of
# the same process: docs/measurements.md).
BENCH_MODELS = {
    "llama-1b": "type=llama,name=llama-1b,layers=22,hidden=2048,heads=32,kv_heads=4,ffn=5632,vocab=32000,seq=2048",
    "llama-3b": "type=llama,name=llama-3b,layers=26,hidden=3200,heads=32,ffn=8640,vocab=32000,seq=2048",
    "llama-7b": "llama-7b",
    # held out at a size between llama-3b and llama-7b whose CPU optimizer offload fits a 125 GiB host (llama-7b's
    # does not: its set-up timed out, and the planner asks 133 GiB of host RAM for it); head dim 128 as llama-7b's
    "llama-5b": "type=llama,name=llama-5b,layers=32,hidden=3584,heads=28,ffn=9728,vocab=32000,seq=2048",
    "gpt2-3b": "type=gpt2,name=gpt2-3b,layers=32,hidden=2560,heads=32,vocab=50257,seq=1024",
    # held out for ZeRO-3's backward with the optimizer on the host: as deep as a 1T-parameter model is wide, with a
    # small vocabulary, so that the checkpoints outweigh a layer's transient and the loss's logits are not the peak
    "llama-deep": "type=llama,name=llama-deep,layers=64,hidden=2048,heads=16,kv_heads=4,ffn=5632,vocab=8000,seq=2048",
    # llama-3b's shape at head dim 128 (24 heads of 128 at hidden 3072, not 32 of 100): the only both-offload model
    # whose default stream kept adding weight- and activation-sized segments in later backwards has head dim 100
    "llama-3b-hd128": "type=llama,name=llama-3b-hd128,layers=26,hidden=3072,heads=24,ffn=8640,vocab=32000,seq=2048",
    "tiny-llama": "type=llama,name=tiny-llama,layers=2,hidden=64,heads=4,kv_heads=2,ffn=128,vocab=256,seq=128",
    # --family thin: the layer counts, vocabularies and head dims of llama-1b and gpt2-xl at hidden 256, so that the
    # GPU's work is a small part of a step and what is left is the host's per layer and per tensor
    "llama-1b-thin": "type=llama,name=llama-1b-thin,layers=22,hidden=256,heads=4,kv_heads=2,ffn=704,vocab=32000,seq=2048",
    "gpt2-xl-thin": "type=gpt2,name=gpt2-xl-thin,layers=48,hidden=256,heads=4,vocab=50257,seq=1024",
}
# Models given by their HF config (the numbers form of --model has no Qwen2 of its own: QKV biases, tied head).
BENCH_HF_CONFIGS: dict[str, dict[str, Any]] = {
    "qwen2-1.5b": QWEN2_1_5B,
    "pythia-1.4b": PYTHIA_1_4B,
    "pythia-1b": PYTHIA_1B,
    "qwen2-1.5b-thin": {
        **QWEN2_1_5B, "hidden_size": 256, "intermediate_size": 1472, "num_attention_heads": 2, "num_key_value_heads": 2,
    },
    "pythia-1.4b-thin": {**PYTHIA_1_4B, "hidden_size": 256, "intermediate_size": 1024, "num_attention_heads": 2},
}  # fmt: skip
ZERO3_MODELS = ("llama-1b", "gpt2-xl", "llama-3b", "gpt2-3b", "llama-7b")
ZERO3_MAX_MICRO_BATCH = 16
# --family sweep: stages 0-2 of LLaMA-style decoders at seq 2048 across micro-batches, one process per config: the
# per-sample and per-step costs of these models separately (every GPT-2 row of the fit has micro-batch >= 8 at seq
# 1024, so the fit cannot tell a per-step cost from a per-sample one for another family). Qwen2-1.5B's rows repeat
# bench/probe_calibration.py's strategies through this worker.
SWEEP_SEQ = 2048
SWEEP_CONFIGS: tuple[tuple[str, int, bool, int], ...] = (  # (model, stage, checkpointing, micro-batch)
    ("qwen2-1.5b", 2, False, 1),
    ("qwen2-1.5b", 2, False, 5),
    ("qwen2-1.5b", 2, False, 11),
    ("llama-1b", 1, False, 1),
    ("llama-1b", 1, False, 4),
    ("llama-1b", 1, False, 16),
    ("llama-1b", 0, False, 4),
    ("llama-1b", 1, True, 16),
    ("llama-3b", 1, False, 1),
    ("llama-3b", 1, False, 4),
    ("llama-3b", 1, True, 8),
    ("llama-1b", 3, True, 8),
    ("qwen2-1.5b", 0, False, 5),
    ("qwen2-1.5b", 1, True, 8),
)
# --family heldout: configs no constant was fitted to, after the allocator-cache and ZeRO-3 refits (2026-12-02):
# Pythia-1.4B (GPT-NeoX) across stages, checkpointing and CPU offload; Qwen2-1.5B and llama-3b at ZeRO-3; micro-
# batches 1-2 (the host-bound regime, on three families); second and third readings of the ZeRO-3 rows whose errors
# the refit could not tell from noise (repeat > 0: a row of its own, never merged into the earlier reading); then the
# planner's recommendation for Pythia-1.4B and Qwen2-1.5B on 24 and 40 GiB cards, under that cap. Seq 2048 unless
# given (GPT-2 stops at 1024).
HELDOUT_CONFIGS: tuple[tuple[str, int, str, str, bool, int, int | None, int], ...] = (
    # (model, stage, offload optimizer, offload param, checkpointing, micro-batch, seq or None, repeat)
    ("pythia-1.4b", 1, "none", "none", False, 8, None, 0),
    ("pythia-1.4b", 1, "none", "none", False, 1, None, 0),
    ("pythia-1.4b", 1, "none", "none", False, 2, None, 0),
    ("pythia-1.4b", 1, "none", "none", True, 16, None, 0),
    ("pythia-1.4b", 3, "none", "none", False, 8, None, 0),
    ("pythia-1.4b", 3, "none", "none", True, 16, None, 0),
    ("qwen2-1.5b", 3, "none", "none", True, 16, None, 0),
    ("llama-1b", 3, "none", "none", True, 8, None, 1),
    ("llama-1b", 3, "none", "none", True, 8, None, 2),
    ("llama-1b", 1, "none", "none", False, 2, None, 0),
    ("llama-1b", 3, "none", "none", False, 2, None, 0),
    ("gpt2-xl", 3, "none", "none", False, 16, 1024, 1),
    ("llama-3b", 3, "none", "none", True, 8, None, 0),
    ("qwen2-1.5b", 3, "none", "none", False, 8, None, 0),
    ("pythia-1.4b", 2, "cpu", "none", True, 16, None, 0),
    ("pythia-1.4b", 3, "cpu", "none", True, 16, None, 0),
)
HELDOUT_SEQ = 2048
HELDOUT_REC_MODELS = ("pythia-1.4b", "qwen2-1.5b", "pythia-1b")
# --family repeats: a second reading, in a process of its own, of each config whose tokens/s error exceeded 10 % on
# its one reading (bench/results/plan_accuracy-2026-12-02-1gpu-all.md): the families table counts a config at the
# median of its readings, so a process that ran slow (or fast) for reasons of its own stops deciding a family's max.
REPEAT_CONFIGS: tuple[tuple[str, int, str, str, bool, int, int, int | None], ...] = (
    # (model, stage, offload optimizer, offload param, checkpointing, micro-batch, seq, cap GiB)
    ("gpt2-medium", 0, "none", "none", True, 16, 1024, None),
    ("gpt2-medium", 3, "none", "none", False, 8, 1024, None),
    ("qwen2-1.5b", 2, "none", "none", False, 1, 2048, None),
    ("gpt2-xl", 1, "none", "none", True, 8, 1024, 40),
    ("llama-1b", 3, "none", "none", False, 2, 2048, None),
    ("qwen2-1.5b", 3, "none", "none", False, 8, 2048, None),
    ("llama-1b", 3, "cpu", "cpu", True, 16, 1024, None),
    ("qwen2-1.5b", 2, "cpu", "none", True, 7, 2048, 40),
)
# --family optimizer: the same configs stepped by DeepSpeed's fused AdamW (the grid's optimizer) and by the script's
# own torch.optim.AdamW -- what dswiz's written config (no optimizer section) and its script hint leave to the user,
# and what runner/examples/train_hf.py runs under `dswiz probe` -- in its default (foreach) and fused forms.
OPTIMIZER_CONFIGS: tuple[tuple[str, int, bool, int, int, str], ...] = (
    # (model, stage, checkpointing, micro-batch, seq, optimizer)
    ("pythia-1b", 3, False, 17, 2048, "torch"),
    ("pythia-1b", 3, False, 17, 2048, "ds"),
    ("pythia-1b", 3, False, 17, 2048, "torch-fused"),
    ("pythia-1b", 1, False, 17, 2048, "torch"),
    ("pythia-1b", 1, False, 17, 2048, "ds"),
    ("pythia-1b", 0, False, 35, 2048, "torch"),
    ("gpt2-xl", 1, False, 16, 1024, "torch"),
    ("llama-1b", 3, True, 16, 1024, "torch"),
    ("pythia-1b", 0, False, 35, 2048, "ds"),
)
# --family boundary: Qwen2-1.5B (a 151,936-token vocabulary: one fp32 logits block is 27.8 GiB at micro-batch 24,
# seq 2048) with checkpointing near the whole card's fit boundary, where `dswiz probe` of runner/examples/train_hf.py
# ran out of memory at micro-batch 24 (bench/results/probe_calibration-2026-12-02-1gpu-qwen2-1.5b-fused.md).
BOUNDARY_CONFIGS: tuple[tuple[str, int, bool, int, int, str], ...] = (
    ("qwen2-1.5b", 1, True, 24, 2048, "ds"),
    ("qwen2-1.5b", 1, True, 20, 2048, "ds"),
    ("qwen2-1.5b", 1, True, 16, 2048, "ds"),
    ("qwen2-1.5b", 1, True, 24, 2048, "torch-fused"),
    ("qwen2-1.5b", 1, True, 12, 2048, "ds"),
    ("qwen2-1.5b", 1, True, 22, 2048, "ds"),
    # the largest the planner allows since LOGITS_SHARE_CHECKPOINTING 0.75
    ("qwen2-1.5b", 1, True, 23, 2048, "ds"),
)
# --family pressure: micro-batches above what the fit rule of 2026-12-03 allows, under the caps whose recommendations
# it kept below the best measured (plan_accuracy-2026-12-03-1gpu-all.md: offload + checkpointing on 24 GiB, stage 1
# without checkpointing on 40 GiB): where each strategy runs out of memory under a cap bounds the allocator cache a
# card must hold (calibration.UNRECLAIMABLE_*) from below, as the fits bound it from above.
PRESSURE_CONFIGS: tuple[tuple[str, int, str, str, bool, int, int, int | None], ...] = (
    # (model, stage, offload optimizer, offload param, checkpointing, micro-batch, seq, cap GiB)
    ("gpt2-xl", 1, "cpu", "none", True, 26, 1024, 24),
    ("qwen2-1.5b", 2, "cpu", "none", True, 5, 2048, 24),
    ("llama-3b", 2, "cpu", "none", True, 27, 1024, 24),
    ("llama-1b", 2, "cpu", "none", True, 40, 1024, 24),
    ("pythia-1b", 2, "cpu", "none", True, 14, 2048, 24),
    ("gpt2", 1, "none", "none", False, 32, 1024, 40),
    ("gpt2-medium", 1, "none", "none", False, 16, 1024, 40),
    ("gpt2-large", 1, "none", "none", True, 17, 1024, 24),
    ("gpt2-xl", 1, "cpu", "none", True, 28, 1024, 24),
    ("llama-3b", 2, "cpu", "none", True, 30, 1024, 24),
    ("llama-1b", 2, "cpu", "none", True, 44, 1024, 24),
    ("pythia-1b", 2, "cpu", "none", True, 16, 2048, 24),
    ("pythia-1.4b", 2, "cpu", "none", True, 13, 2048, 24),
    ("gpt2", 1, "none", "none", False, 33, 1024, 40),
    ("gpt2-medium", 1, "none", "none", False, 17, 1024, 40),
    ("gpt2-large", 1, "none", "none", True, 19, 1024, 24),
    ("pythia-1.4b", 2, "cpu", "none", True, 14, 2048, 24),
    # (2026-12-04, indices 17-20) ZeRO-0 + checkpointing under 24 GiB, recommended since stage 0's step is counted at
    # what it holds: the largest micro-batch the model fits without the margin, and one above it
    ("llama-1b", 0, "none", "none", True, 14, 1024, 24),
    ("llama-1b", 0, "none", "none", True, 15, 1024, 24),
    ("pythia-1b", 0, "none", "none", True, 6, 2048, 24),
    ("pythia-1b", 0, "none", "none", True, 7, 2048, 24),
    # (indices 21-22) ZeRO-0 without checkpointing, its peak at the step with the forward's activations freed, under
    # caps the step share of stages 1-2 (0.4 of them unreclaimable) says it runs out of: both ran (2026-12-04), so a
    # torch AdamW step keeps at most ~0.1-0.15 of them (UNRECLAIMABLE_FORWARD_TRANSIENT_SHARE_AT_STEP_UNFUSED_STAGE0)
    ("llama-1b", 0, "none", "none", False, 2, 1024, 22),
    ("llama-1b", 0, "none", "none", False, 3, 1024, 23),
)
# --family margin: the recommendations still below 0.97 of the best measured config for their card (plan_accuracy-
# 2026-12-05-1gpu-all-r.md: Qwen2-1.5B, gpt2-xl, llama-3b and llama-1b on 24 GiB) and those best configs, under a cap
# at what the planner lets a 24 GiB card hold with its 5 % kept free: 0.95 x (24 GiB + the 1.3 GiB of CUDA context
# it counts outside the allocator) - 1.3 GiB = 22.73 GiB, rounded down to 22.7. A config that runs there fits the
# card with the margin the user asked for; one that runs out of memory there fits only by eating into it, and is no
# pick the planner may make. Each best config first, then the recommendation beside it, then one micro-batch above
# two recommendations.
MARGIN_CARD_GIB = 24
MARGIN_CAP_GIB = 22.7
MARGIN_CONFIGS: tuple[tuple[str, int, str, str, bool, int, int, float], ...] = (
    # (model, stage, offload optimizer, offload param, checkpointing, micro-batch, seq, cap GiB)
    ("qwen2-1.5b", 2, "cpu", "none", True, 5, 2048, MARGIN_CAP_GIB),
    ("qwen2-1.5b", 1, "cpu", "none", True, 4, 2048, MARGIN_CAP_GIB),
    ("gpt2-xl", 2, "cpu", "none", True, 25, 1024, MARGIN_CAP_GIB),
    ("gpt2-xl", 1, "cpu", "none", True, 23, 1024, MARGIN_CAP_GIB),
    ("llama-3b", 2, "cpu", "none", True, 27, 1024, MARGIN_CAP_GIB),
    ("llama-3b", 1, "cpu", "none", True, 25, 1024, MARGIN_CAP_GIB),
    ("llama-1b", 0, "none", "none", True, 14, 1024, MARGIN_CAP_GIB),
    ("llama-1b", 0, "none", "none", True, 13, 1024, MARGIN_CAP_GIB),
    ("gpt2-xl", 1, "cpu", "none", True, 24, 1024, MARGIN_CAP_GIB),
    ("llama-3b", 1, "cpu", "none", True, 26, 1024, MARGIN_CAP_GIB),
)
# --family pairs: a recommendation and the best config measured for its card, read back to back in one process each
# on one machine, two rounds interleaved (rec, best, rec, best ...). Machines of one kind ran one GPU-bound config
# about 7 % apart (GPT-2-medium ZeRO-1 at micro-batch 60: 97,632 and 90,956 tokens/s, 2026-11-30 and 12-04), so a
# ratio of readings from two machines says as much about the machines as about the pick; the analysis quotes the
# ratio of readings from one machine beside the pooled one (_same_run_ratio). The recommendations are the planner's
# of 2026-12-04 (the offload split-logits share 0.4, stage 0's unfused step share 0.1), the best configs those of
# plan_accuracy-2026-12-04-1gpu-all-p.md; Qwen2-1.5B on 24 GiB is left out (the margin sets its ratio, see README).
PAIR_CONFIGS: tuple[tuple[str, tuple[str, int, str, str, bool, int, int, int | None],
                          tuple[str, int, str, str, bool, int, int, int | None]], ...] = (
    # (card, recommended, best): (model, stage, offload optimizer, offload param, checkpointing, micro-batch, seq, cap)
    ("24", ("llama-1b", 0, "none", "none", True, 13, 1024, 24), ("llama-1b", 0, "none", "none", True, 14, 1024, 24)),
    ("full", ("gpt2-medium", 1, "none", "none", False, 60, 1024, None),
     ("gpt2-medium", 1, "none", "none", False, 64, 1024, None)),
    ("80", ("gpt2-medium", 1, "none", "none", False, 33, 1024, 80),
     ("gpt2-medium", 1, "none", "none", False, 36, 1024, 80)),
    ("full", ("gpt2-large", 1, "none", "none", False, 36, 1024, None),
     ("gpt2-large", 1, "none", "none", False, 32, 1024, None)),
    ("80", ("gpt2-large", 1, "none", "none", False, 19, 1024, 80),
     ("gpt2-large", 1, "none", "none", False, 18, 1024, 80)),
    ("24", ("gpt2-large", 1, "none", "none", True, 14, 1024, 24), ("gpt2-large", 1, "none", "none", True, 17, 1024, 24)),
    ("24", ("gpt2-xl", 1, "cpu", "none", True, 23, 1024, 24), ("gpt2-xl", 1, "cpu", "none", True, 26, 1024, 24)),
    # llama-3b on 24 GiB: the pairs of 2026-12-05 read ZeRO-1 + offload at 25 (7,409 tokens/s) beside ZeRO-2's at 27
    # (7,874); since the side streams' pools (2026-12-07) the planner recommends ZeRO-3 with both offloads at 28,
    # read once on an H100 at 8,357 (--indices 68, -phases-recs-pools.json), not yet beside ZeRO-2 on one machine
    ("24", ("llama-3b", 3, "cpu", "cpu", True, 28, 1024, 24), ("llama-3b", 2, "cpu", "none", True, 27, 1024, 24)),
)  # fmt: skip
PAIR_REPEAT = 10  # the pairs' readings are repeats 11, 12: rows of their own beside the earlier readings


def pairs_grid() -> list[Config]:
    """--family pairs: round 1 of every pair (indices 0-15: rec, best, rec, best ...), then round 2 (16-31)."""
    out = []
    for rnd in (1, 2):
        for card, rec, best in PAIR_CONFIGS:
            rec_tag = f"rec:{card}GiB" if card != "full" else "rec:full"
            for (m, st, opt, par, ck, mb, seq, cap), tags in ((rec, (rec_tag, "pair")), (best, ("pair",))):
                out.append(
                    Config(m, st, opt, par, ck, micro_batch=mb, seq=seq, cap_gib=cap, repeat=PAIR_REPEAT + rnd,
                           tags=tags)  # type: ignore[arg-type]
                )  # fmt: skip
    return out


# --family allocator (run with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, analysed on its own): the configs
# whose allocator cache the default allocator made the least predictable (plan_accuracy-2026-12-03-1gpu-all-e.md:
# Qwen2-1.5B ZeRO-1 + checkpointing cached 18.8 / 25.0 / 8.0 / 34.3 GiB at micro-batch 12 / 16 / 20 / 22; gpt2-xl
# 7.7 / 2.8 / 14.1 at 16 / 32 / 64), and five that ran out of memory with the default allocator's cache split.
ALLOCATOR_CONFIGS: tuple[tuple[str, int, str, str, bool, int, int, int | None], ...] = (
    # (model, stage, offload optimizer, offload param, checkpointing, micro-batch, seq, cap GiB)
    ("qwen2-1.5b", 1, "none", "none", True, 20, 2048, None),
    ("qwen2-1.5b", 1, "none", "none", True, 22, 2048, None),
    ("qwen2-1.5b", 1, "none", "none", True, 24, 2048, None),
    ("gpt2-xl", 1, "none", "none", True, 32, 1024, None),
    ("gpt2-xl", 1, "none", "none", True, 64, 1024, None),
    ("gpt2-large", 1, "none", "none", True, 64, 1024, None),
    ("pythia-1b", 1, "none", "none", False, 34, 2048, None),
    ("gpt2-xl", 1, "cpu", "none", True, 28, 1024, 24),
    ("pythia-1b", 2, "cpu", "none", True, 16, 2048, 24),
    ("llama-3b", 3, "none", "none", False, 16, 1024, None),
    ("qwen2-1.5b", 1, "none", "none", True, 16, 2048, None),
    ("gpt2-medium", 1, "none", "none", True, 32, 1024, None),
    ("pythia-1.4b", 1, "none", "none", True, 16, 1024, None),
    ("gpt2", 1, "none", "none", False, 32, 1024, 40),
    ("gpt2-xl", 1, "none", "none", True, 16, 1024, None),
    ("qwen2-1.5b", 1, "none", "none", True, 12, 2048, None),
    # then micro-batches above those, to find where the expandable allocator runs out of memory (16-26)
    ("gpt2-xl", 1, "cpu", "none", True, 29, 1024, 24),
    ("pythia-1b", 2, "cpu", "none", True, 17, 2048, 24),
    ("llama-1b", 2, "cpu", "none", True, 46, 1024, 24),
    ("llama-3b", 2, "cpu", "none", True, 31, 1024, 24),
    ("gpt2", 1, "none", "none", False, 35, 1024, 40),
    ("qwen2-1.5b", 1, "none", "none", True, 30, 2048, None),
    ("llama-1b", 2, "cpu", "none", True, 44, 1024, 24),
    ("llama-3b", 2, "cpu", "none", True, 30, 1024, 24),
    ("gpt2", 1, "none", "none", False, 34, 1024, 40),
    ("qwen2-1.5b", 1, "none", "none", True, 28, 2048, None),
    ("qwen2-1.5b", 1, "none", "none", True, 32, 2048, None),
    # GPT-2 at micro-batch 32 under the 40 GiB cap ran 21 % below the same step without it (27-29): the same step
    # on the whole card, and micro-batch 30, whose cache the cap holds, under it
    ("gpt2", 1, "none", "none", False, 32, 1024, None),
    ("gpt2", 1, "none", "none", False, 30, 1024, 40),
    ("gpt2", 1, "none", "none", False, 33, 1024, 40),
)
# --family phases: another reading, each step split into forward / backward / optimizer step (Row.phase_s), of the
# families whose errors stayed over target (plan_accuracy-2026-12-03-1gpu-all-c.md): CPU optimizer offload at seq
# 2048 (predicted 0.06-0.12 s a step slow) beside two seq-1024 controls that it predicts within 1-2 %; ZeRO-3 with the
# parameters offloaded too (predicted 6-14 % slow); ZeRO-3 without offload at seq 2048 (7-11 % fast) beside stage 1
# of the same model and micro-batch.
PHASES_CONFIGS: tuple[tuple[str, int, str, str, bool, int, int, int | None, int], ...] = (
    # (model, stage, offload optimizer, offload param, checkpointing, micro-batch, seq, cap GiB, repeat)
    ("pythia-1.4b", 1, "cpu", "none", True, 10, 2048, 24, 1),
    ("gpt2-xl", 2, "cpu", "none", True, 16, 1024, None, 1),
    ("qwen2-1.5b", 1, "cpu", "none", True, 3, 2048, 24, 1),
    ("gpt2-xl", 3, "cpu", "cpu", True, 16, 1024, None, 1),
    ("pythia-1b", 2, "cpu", "none", True, 12, 2048, 24, 1),
    ("llama-1b", 2, "cpu", "none", True, 32, 1024, 24, 1),
    ("pythia-1b", 3, "none", "none", False, 17, 2048, None, 1),
    ("pythia-1b", 1, "none", "none", False, 17, 2048, None, 1),
    ("qwen2-1.5b", 3, "none", "none", False, 8, 2048, None, 2),
    ("pythia-1.4b", 3, "none", "none", False, 8, 2048, None, 1),
    ("pythia-1.4b", 1, "none", "none", False, 8, 2048, None, 1),
    ("gpt2-xl", 3, "none", "none", True, 16, 1024, None, 1),
    ("llama-3b", 3, "none", "none", False, 16, 1024, None, 1),
    # then the families still missing on one or two readings: ZeRO-3 with both offloads split into phases, stage 0
    # at seq 2048, llama-7b at ZeRO-3, and gpt2-xl at micro-batch 8 with checkpointing uncapped (two readings under
    # a 40 GiB cap, where its cache reached the cap, ran 11 % slower than predicted)
    ("llama-1b", 3, "cpu", "cpu", True, 16, 1024, None, 2),
    ("llama-1b", 3, "none", "none", False, 16, 1024, None, 1),
    ("llama-1b", 0, "none", "none", False, 4, 2048, None, 1),
    ("qwen2-1.5b", 0, "none", "none", False, 5, 2048, None, 1),
    ("llama-7b", 3, "none", "none", True, 4, 1024, None, 1),
    ("gpt2-xl", 1, "none", "none", True, 8, 1024, None, 0),
    ("pythia-1.4b", 3, "none", "none", True, 16, 2048, None, 1),
    # ZeRO-3 again after a longer warm-up (WARMUP_STEPS_STAGE3)
    ("llama-1b", 3, "none", "none", False, 16, 1024, None, 2),
    ("qwen2-1.5b", 3, "none", "none", False, 8, 2048, None, 3),
    ("llama-3b", 3, "none", "none", False, 16, 1024, None, 2),
    ("pythia-1b", 3, "none", "none", False, 17, 2048, None, 2),
    ("llama-7b", 3, "none", "none", True, 4, 1024, None, 2),
    # the step phase of stage 1 on a 3B model and of stage 0 on the smallest (their whole steps miss by 10-16 % once
    # the optimizer step is fit to the phases of 1-1.5B models)
    ("llama-3b", 1, "none", "none", False, 1, 2048, None, 1),
    ("llama-3b", 1, "none", "none", False, 4, 2048, None, 1),
    ("gpt2", 0, "none", "none", False, 16, 1024, None, 1),
    ("pythia-1.4b", 1, "none", "none", True, 16, 1024, None, 1),
    # (2026-12-04, --indices 29,...,33 --label phases-third) another reading of each config whose family misses the
    # tokens/s target on one reading, or on two that straddle it (plan_accuracy-2026-12-03-1gpu-all-g.md: +19.6 / -1.3,
    # +25.8 / -1.8, -2.9 / +14.4 %)
    ("gpt2-medium", 0, "none", "none", True, 16, 1024, None, 2),
    ("qwen2-1.5b", 2, "none", "none", False, 1, 2048, None, 2),
    ("gpt2-xl", 3, "cpu", "cpu", True, 16, 1024, None, 2),
    ("pythia-1b", 1, "none", "none", True, 2, 2048, 24, 1),
    ("llama-3b", 1, "none", "none", True, 8, 1024, None, 1),
    # (2026-12-04, index 34) held out from SDPA's padded head dims (memory.sdpa_padding_bytes_per_token, set by
    # bench/attention_memory.py's layers): head dim 100 without checkpointing at a stage, micro-batch and sequence
    # no earlier row ran
    ("llama-3b", 2, "none", "none", False, 6, 2048, None, 0),
    # (2026-12-04, indices 35-37) held out from what stage 0's optimizer step holds (set on Pythia-1B): micro-batch 1,
    # whose peak is the step, of two LLaMA-style sizes and of GPT-2's
    ("llama-3b", 0, "none", "none", False, 1, 2048, None, 0),
    ("gpt2-xl", 0, "none", "none", False, 1, 1024, None, 0),
    ("llama-7b", 0, "none", "none", False, 1, 1024, None, 0),
    # (2026-12-05, indices 38-40) ZeRO-3 with the optimizer and the parameters on the CPU at 3B (no reading of that
    # family above 1.5B), and at a micro-batch small enough that the parameter fetches take as long as the compute
    ("llama-3b", 3, "cpu", "cpu", True, 16, 1024, None, 0),
    ("llama-3b", 3, "cpu", "cpu", True, 4, 1024, None, 0),
    ("llama-1b", 3, "cpu", "cpu", True, 4, 1024, None, 0),
    # (2026-12-06, indices 41-44) llama-3b with both offloads allocated 21 % more than predicted at micro-batch 4 and
    # 1 % less at 16: micro-batches 1 and 8 beside a second reading at 4 (Row.peak_grew_at: where the peak is set) part
    # what a step holds whatever the micro-batch from what each sample adds; the optimizer alone offloaded at 4
    ("llama-3b", 3, "cpu", "cpu", True, 1, 1024, None, 0),
    ("llama-3b", 3, "cpu", "cpu", True, 8, 1024, None, 0),
    ("llama-3b", 3, "cpu", "cpu", True, 4, 1024, None, 1),
    ("llama-3b", 3, "cpu", "none", True, 4, 1024, None, 0),
    # (2026-12-06, index 45) llama-1b with both offloads at micro-batch 1: how much of a bucket's gradients wait for
    # the reduce stream on a smaller model (its backward at 4 held far less than llama-3b's at 1), beside --zero-set
    # reduce_bucket_size readings of it and of index 40
    ("llama-1b", 3, "cpu", "cpu", True, 1, 1024, None, 0),
    # (2026-12-06, indices 46-48) held out at a new size, ~5B (llama-5b), ZeRO-3 with the optimizer on the CPU --
    # the largest model whose offload fits the host: checkpointed at 8 and 32, and without checkpointing at 2
    ("llama-5b", 3, "cpu", "none", True, 8, 1024, None, 0),
    ("llama-5b", 3, "cpu", "none", True, 32, 1024, None, 0),
    ("llama-5b", 3, "cpu", "none", False, 2, 1024, None, 0),
    # (2026-12-06, indices 49-50) held out for what ZeRO-3's backward holds with both offloads at micro-batch 1
    # (--peak-anatomy): qwen2-1.5b, whose largest tensor (its 233M-element embedding) is a quarter of the model, and
    # gpt2-xl, whose tied embedding is its largest
    ("qwen2-1.5b", 3, "cpu", "cpu", True, 1, 1024, None, 0),
    ("gpt2-xl", 3, "cpu", "cpu", True, 1, 1024, None, 0),
    # (2026-12-06, indices 51-53) what is held when the first full bucket goes to the host: a share of the activations
    # beside a whole layer's transient, or the activations not yet walked beside part of one layer's -- llama-deep
    # (64 layers, small vocabulary), whose checkpoints outweigh a layer's transient as the 1T-parameter ZeRO-Infinity
    # model's do, with both offloads at 1, 4 and 8 (--peak-anatomy). It read the walk (zero3.stage3_flushes)
    ("llama-deep", 3, "cpu", "cpu", True, 1, 1024, None, 0),
    ("llama-deep", 3, "cpu", "cpu", True, 4, 1024, None, 0),
    ("llama-deep", 3, "cpu", "cpu", True, 8, 1024, None, 0),
    # (2026-12-07, indices 54-60) held out from the side streams' pools (memory.stream_pools, set from the
    # --segment-growth readings of indices 13, 40-45, 49, 50): models, micro-batches and a checkpointing setting no
    # both-offload row had run, and the parameters offloaded alone (the all-gather stream's pool without the reduce
    # stream's)
    ("pythia-1.4b", 3, "cpu", "cpu", True, 2, 1024, None, 0),
    ("gpt2-3b", 3, "cpu", "cpu", True, 4, 1024, None, 0),
    ("llama-1b", 3, "cpu", "cpu", False, 2, 1024, None, 0),
    ("qwen2-1.5b", 3, "cpu", "cpu", True, 4, 1024, None, 0),
    ("llama-3b", 3, "cpu", "cpu", True, 2, 1024, None, 0),
    ("pythia-1b", 3, "cpu", "cpu", True, 8, 2048, None, 0),
    ("llama-1b", 3, "none", "cpu", True, 4, 1024, None, 0),
    # (2026-12-07, index 61) llama-3b's default stream grew in later backwards (weight- and activation-sized
    # segments, 3-4 GiB at micro-batch 1-2) where no other both-offload model's did: the same shape at head dim 128
    ("llama-3b-hd128", 3, "cpu", "cpu", True, 1, 1024, None, 0),
    # (2026-12-07, indices 62-65) what a card must hold with both offloads, now that the side streams' pools replace
    # the gathered share (no capped row of this kind had run): allocator caps at what the planner asks with its
    # margin (llama-3b at 2 and 1, llama-1b at 1; their roomy reserved 10.5, 9.8 and 5.4 GiB) and without it
    ("llama-3b", 3, "cpu", "cpu", True, 2, 1024, 7.2, 0),
    ("llama-3b", 3, "cpu", "cpu", True, 1, 1024, 6.6, 0),
    ("llama-1b", 3, "cpu", "cpu", True, 1, 1024, 6.2, 0),
    ("llama-3b", 3, "cpu", "cpu", True, 2, 1024, 6.8, 0),
    # (2026-12-07, indices 66-67) below what the planner asks (its side-stream pools held whole): where the boundary is
    ("llama-3b", 3, "cpu", "cpu", True, 2, 1024, 6.0, 0),
    ("llama-1b", 3, "cpu", "cpu", True, 1, 1024, 4.6, 0),
    # (2026-12-07, indices 68-69) what the planner recommends for llama-3b on 24 and 40 GiB cards once the side
    # pools replaced the gathered share: ZeRO-3 with both offloads at 28 and 53 (it was ZeRO-1 with the optimizer
    # offloaded at 25 and 51; ZeRO-2's at 27 was the best read on 24 GiB, 7,874 tokens/s)
    ("llama-3b", 3, "cpu", "cpu", True, 28, 1024, 24, 0),
    ("llama-3b", 3, "cpu", "cpu", True, 53, 1024, 40, 0),
    # (2026-12-07, indices 70-73) NVMe offload, never read before (the planner's swap rate was an assumption):
    # ZeRO-3 with the optimizer on NVMe, the parameters on the GPU and on NVMe too, at two sizes, beside
    # bench/nvme_rate.py on the same drive (--nvme-path, --nvme-rate). Index 70 ran (-phases-nvme-a); 71 (all of
    # GPT-2-medium's parameters kept in host memory) and 73 (llama-1b's 1.1e9 a rank: none kept, every one fetched
    # from NVMe and written back) test zero3.nvme_parameters, not run yet (no machine came)
    ("gpt2-medium", 3, "nvme", "none", True, 8, 1024, None, 0),
    ("gpt2-medium", 3, "nvme", "nvme", True, 8, 1024, None, 0),
    ("llama-1b", 3, "nvme", "none", True, 8, 1024, None, 0),
    ("llama-1b", 3, "nvme", "nvme", True, 8, 1024, None, 0),
)
# --family accum: gradient accumulation. Every row before ran one micro-step per optimizer step, so the per-step
# optimizer work and the per-micro-step work were never read apart; each config at 4 (or 8) micro-steps per step,
# then the same config at 1 again in the same session (a repeat) beside it. Stages 0-3, CPU optimizer offload, and a
# host-bound micro-batch.
ACCUM_CONFIGS: tuple[tuple[str, int, str, str, bool, int, int, int | None, int, int], ...] = (
    # (model, stage, offload optimizer, offload param, checkpointing, micro-batch, seq, cap GiB, accumulation, repeat)
    ("llama-1b", 0, "none", "none", False, 4, 2048, None, 4, 0),
    ("llama-1b", 0, "none", "none", False, 4, 2048, None, 1, 2),
    ("qwen2-1.5b", 2, "none", "none", False, 5, 2048, None, 4, 0),
    ("qwen2-1.5b", 2, "none", "none", False, 5, 2048, None, 1, 1),
    ("pythia-1.4b", 1, "none", "none", False, 8, 2048, None, 4, 0),
    ("pythia-1.4b", 1, "none", "none", False, 8, 2048, None, 1, 2),
    ("llama-1b", 3, "none", "none", False, 16, 1024, None, 4, 0),
    ("llama-1b", 3, "none", "none", False, 16, 1024, None, 1, 3),
    ("llama-3b", 3, "none", "none", False, 16, 1024, None, 4, 0),
    ("llama-3b", 3, "none", "none", False, 16, 1024, None, 1, 3),
    ("llama-1b", 2, "cpu", "none", True, 32, 1024, 24, 4, 0),
    ("llama-1b", 2, "cpu", "none", True, 32, 1024, 24, 1, 2),
    ("gpt2-xl", 2, "none", "none", False, 16, 1024, None, 4, 0),
    ("gpt2-xl", 2, "none", "none", False, 16, 1024, None, 1, 1),
    ("llama-1b", 1, "none", "none", False, 2, 2048, None, 8, 0),
    ("llama-1b", 1, "none", "none", False, 2, 2048, None, 1, 1),
    ("llama-7b", 3, "none", "none", True, 4, 1024, None, 4, 0),
    ("llama-7b", 3, "none", "none", True, 4, 1024, None, 1, 3),
    # second readings (2026-12-03, indices 18-21) of the accumulating configs whose one reading missed by 7-16 %
    ("llama-7b", 3, "none", "none", True, 4, 1024, None, 4, 1),
    ("llama-1b", 0, "none", "none", False, 4, 2048, None, 4, 1),
    ("llama-1b", 1, "none", "none", False, 2, 2048, None, 8, 1),
    ("llama-1b", 2, "cpu", "none", True, 32, 1024, 24, 4, 1),
    # (2026-12-04, indices 22-25) held out from the accumulation rule the llama-1b ZeRO-2 pair set (pinned 16-bit
    # sums on the host, 2 x steps PCIe transfers a step): ZeRO-1 and ZeRO-2 + offload of two other models beside
    # their readings at 1, and ZeRO-3 + offload, whose host-side partitions add the same way, at 4 and at 1
    ("pythia-1.4b", 1, "cpu", "none", True, 10, 2048, 24, 4, 0),
    ("qwen2-1.5b", 2, "cpu", "none", True, 4, 2048, 24, 4, 0),
    ("llama-1b", 3, "cpu", "none", True, 16, 1024, None, 4, 0),
    ("llama-1b", 3, "cpu", "none", True, 16, 1024, None, 1, 1),
    # (2026-12-04, indices 26-27) held out from the ZeRO-3 rule that llama-1b's pair set (the reduce stream hides the
    # extra transfers): two other models at 4 micro-steps
    ("llama-3b", 3, "cpu", "none", True, 16, 1024, None, 4, 0),
    ("gpt2-xl", 3, "cpu", "none", True, 16, 1024, None, 4, 0),
    # (indices 28-29) gpt2-xl, which ran 28 % below the prediction at 4 micro-steps: a second reading, and one at 1
    # split into phases beside it
    ("gpt2-xl", 3, "cpu", "none", True, 16, 1024, None, 4, 1),
    ("gpt2-xl", 3, "cpu", "none", True, 16, 1024, None, 1, 1),
    # (indices 30-36) held out from the boundary rule that llama-1b ZeRO-1 at 8 micro-steps of 2 set (stages 0-1
    # reduce only at the accumulation boundary): micro-batch 1 of three other models and of llama-1b, host-bound,
    # at 8 micro-steps beside readings at 1; stage 0 on Pythia-1B
    ("pythia-1.4b", 1, "none", "none", False, 1, 2048, None, 8, 0),
    ("pythia-1.4b", 1, "none", "none", False, 1, 2048, None, 1, 0),
    ("qwen2-1.5b", 1, "none", "none", False, 1, 2048, None, 8, 0),
    ("qwen2-1.5b", 1, "none", "none", False, 1, 2048, None, 1, 0),
    ("llama-1b", 1, "none", "none", False, 1, 2048, None, 8, 0),
    ("pythia-1b", 0, "none", "none", False, 1, 2048, None, 8, 0),
    ("pythia-1b", 0, "none", "none", False, 1, 2048, None, 1, 0),
    # (2026-12-06, index 37) held out at ~5B: ZeRO-3 with the optimizer on the CPU at 4 micro-steps of 8, beside the
    # reading at one (phases index 46)
    ("llama-5b", 3, "cpu", "none", True, 8, 1024, None, 4, 0),
)
# --family thin: the host's share of a step apart from the GPU's. Each model at its real depth and vocabulary but
# hidden 256 (BENCH_MODELS, BENCH_HF_CONFIGS "-thin"), micro-batch 1: a micro-step there is the host's per-layer
# work (framework Python, kernel launches) with little GPU work under it, at one micro-step and at eight (seven skip
# the boundary's reduce); stage 0's optimizer step there is its per-tensor cost alone (few parameters, as many
# tensors as the full-width model). Then the full-width host-bound rows that miss (micro-batch 1, at one and eight
# micro-steps) read again in the same session, beside them; last, two GPU-bound controls read before (a session
# whose host is slower runs them as fast).
THIN_CONFIGS: tuple[tuple[str, int, int, int, int, int], ...] = (
    # (model, stage, micro-batch, seq, accumulation, repeat)
    ("llama-1b-thin", 1, 1, 2048, 1, 0),
    ("llama-1b-thin", 1, 1, 2048, 8, 0),
    ("llama-1b-thin", 0, 1, 2048, 1, 0),
    ("qwen2-1.5b-thin", 1, 1, 2048, 1, 0),
    ("qwen2-1.5b-thin", 1, 1, 2048, 8, 0),
    ("qwen2-1.5b-thin", 0, 1, 2048, 1, 0),
    ("pythia-1.4b-thin", 1, 1, 2048, 1, 0),
    ("pythia-1.4b-thin", 1, 1, 2048, 8, 0),
    ("pythia-1.4b-thin", 0, 1, 2048, 1, 0),
    ("gpt2-xl-thin", 1, 1, 1024, 1, 0),
    ("gpt2-xl-thin", 1, 1, 1024, 8, 0),
    ("gpt2-xl-thin", 0, 1, 1024, 1, 0),
    ("llama-1b", 1, 1, 2048, 1, 2),
    ("llama-1b", 1, 1, 2048, 8, 2),
    ("qwen2-1.5b", 1, 1, 2048, 1, 2),
    ("qwen2-1.5b", 1, 1, 2048, 8, 2),
    ("pythia-1.4b", 1, 1, 2048, 1, 2),
    ("pythia-1.4b", 1, 1, 2048, 8, 2),
    ("pythia-1b", 0, 1, 2048, 1, 2),
    ("pythia-1b", 0, 1, 2048, 8, 2),
    ("llama-1b", 1, 16, 2048, 1, 2),
    ("pythia-1b", 1, 17, 2048, 1, 3),
)
FAMILIES = (
    "gpt2", "zero3", "sweep", "heldout", "recs", "repeats", "optimizer", "boundary", "pressure", "phases", "accum",
    "allocator", "thin", "pairs", "margin",
)  # fmt: skip
PER_PROCESS_FAMILIES = FAMILIES[1:]  # one process (one engine) per config: all but the GPT-2 grid
# Config.optimizer: how a row's label names it ("ds", DeepSpeed's AdamW from the config, is the grid's default).
OPTIMIZER_LABELS = {
    "ds": "",
    "ds-fused": " ds:fusedadam",
    "torch": " adamw:foreach",
    "torch-fused": " adamw:fused",
}


def is_diagnostic(config: dict[str, Any]) -> bool:
    """A row run to isolate one cost, not a config dswiz writes: a bench shape (the thin family's hidden-256 models,
    not a model anyone trains), or DeepSpeed buffers set beyond what dswiz writes (--zero-set)."""
    return str(config["model"]).endswith("-thin") or bool(config.get("zero"))


def family_seq(family: str, smoke: bool) -> int:
    if smoke:
        return SMOKE_SEQ
    return {"sweep": SWEEP_SEQ, "heldout": HELDOUT_SEQ}.get(family, SEQ)


def bench_spec(name: str) -> ModelSpec:
    """The bench's model by its short name (BENCH_MODELS, BENCH_HF_CONFIGS), else a preset or numbers as `dswiz plan
    --model` takes; built with the use_cache of the innermost built_with_cache, if any."""
    if name in BENCH_HF_CONFIGS:
        spec = spec_from_config(BENCH_HF_CONFIGS[name], name=name, source="bench")
    else:
        spec = load_model_spec(BENCH_MODELS.get(name, name))
    return replace(spec, use_cache=_BUILT_WITH_CACHE[-1]) if _BUILT_WITH_CACHE else spec


# ----------------------------------------------------------------------------------------------------- rows


@dataclass(frozen=True)
class Config:
    """One training configuration to run."""

    model: str
    zero_stage: int
    offload_optimizer: str = "none"
    offload_param: str = "none"
    checkpointing: bool = False
    micro_batch: int = 1
    cap_gib: float | None = None  # run under this allocator cap (GiB; --family margin's is not whole)
    tier: int = 0
    tags: tuple[str, ...] = ()
    seq: int | None = None  # None: the family's sequence length
    repeat: int = 0  # > 0: another reading of the same config, kept as a row of its own
    # The optimizer: "ds" DeepSpeed's AdamW from the config (torch_adam, fused); "ds-fused" the config's AdamW without
    # torch_adam, DeepSpeed's own FusedAdam (`dswiz config --optimizer deepspeed`; stage 0 then steps through
    # FP16_Optimizer, which predict() counts from the config: wizard.config.optimizer_op); "torch" / "torch-fused" the
    # script's own torch.optim.AdamW (its default foreach implementation, or fused=True) and no optimizer section, as
    # dswiz's written config and its script hint leave it.
    optimizer: str = "ds"
    # Micro-steps per optimizer step: the forward/backward pairs run before each engine.step() that updates.
    grad_accum: int = 1
    # zero_optimization keys set beyond what dswiz writes (--zero-set: reduce_bucket_size=250000000), as (key, value)
    # pairs: an experiment on DeepSpeed's buffers, a config of its own (key()); predict() reads them as `dswiz check`
    # reads a config's (wizard.service.prediction.buffers_of)
    zero: tuple[tuple[str, int], ...] = ()

    def key(self) -> tuple[Any, ...]:
        base = (
            self.model,
            self.zero_stage,
            self.offload_optimizer,
            self.offload_param,
            self.checkpointing,
            self.micro_batch,
            self.cap_gib,
        )
        # Rows written before seq/repeat existed keep their key (their seq is the family's, in the row).
        return (
            base
            + ((self.seq,) if self.seq else ())
            + ((self.repeat,) if self.repeat else ())
            + ((self.optimizer,) if self.optimizer != "ds" else ())
            + (("ga", self.grad_accum) if self.grad_accum != 1 else ())
            + (("zero", self.zero) if self.zero else ())
        )

    def seq_or(self, family_seq: int) -> int:
        return self.seq or family_seq

    def strategy(self, world: int) -> Strategy:
        return Strategy(
            zero_stage=self.zero_stage,
            offload_optimizer=self.offload_optimizer,  # type: ignore[arg-type]
            offload_param=self.offload_param,  # type: ignore[arg-type]
            precision="bf16",
            micro_batch_size=self.micro_batch,
            gradient_accumulation_steps=self.grad_accum,
            activation_checkpointing=self.checkpointing,
            gpus_per_node=world,
        )


@dataclass
class Row:
    config: dict[str, Any]
    world: int
    seq_len: int
    status: str = "pending"  # ok, oom, error, skipped
    error: str | None = None
    init_s: float | None = None
    step_s: list[float] = field(default_factory=list)
    tokens_per_sec: float | None = None
    max_allocated: int | None = None  # minus what was allocated before the config started (a leak, if any)
    max_reserved: int | None = None
    baseline_allocated: int | None = None
    outside_allocator: int | None = (
        None  # cudaMemGetInfo used - reserved, at the end: CUDA context + NCCL + ...
    )
    predicted: dict[str, Any] = field(default_factory=dict)
    host_rss_before: int | None = None  # this process's resident host memory before the engine (psutil)
    host_rss_peak: int | None = None  # its peak while the config ran (sampled every 0.1 s)
    host_pinned_peak: int | None = None  # page-locked host memory torch handed out (host_memory_stats), peak
    # Each timed step split at the forward / backward / optimizer-step boundaries by CUDA events recorded on the
    # stream as the host reaches them (no extra synchronisation): the GPU's time from one boundary to the next,
    # host work that the GPU waits for included (CPU Adam lands in "step").
    phase_s: dict[str, list[float]] = field(default_factory=dict)
    # untimed steps before the timed ones (None: rows from before it was recorded)
    warmup_steps: int | None = None
    finished_at: float | None = None  # unix time: readings that disagree on running or not, the newest stands
    # How fast this machine's host was just before the config ran (host_speed_us): the same host-bound config ran
    # up to 1.78x apart from one process to the next on one machine kind (docs/measurements.md)
    host_us: dict[str, float] | None = None
    # Where the peak was set (CUDA): [step, phase, allocated peak so far above the baseline] at each boundary where it
    # grew ("init": after deepspeed.initialize), and what stays allocated between steps (at the last step's start)
    peak_grew_at: list[list[Any]] = field(default_factory=list)
    resident_allocated: int | None = None
    # With the parameters offloaded, the peak of building the model and deepspeed.initialize (above the baseline),
    # left out of max_allocated / max_reserved (run_config says why); None: counted in them (rows before 2026-12-06)
    init_allocated: int | None = None
    # --peak-anatomy: what was live at the allocated peak of the last untimed step, by block size and stream, and
    # that step's allocated bytes along its events (bench/_peak_anatomy.py); None: not recorded
    peak_anatomy: dict[str, Any] | None = None
    # --segment-growth: every segment the allocator added from the end of deepspeed.initialize (or of the model's
    # kept-apart build) to the end of the warm-up, by step, phase, stream and the request it was added for
    # (bench/_peak_anatomy.py segment_growth); None: not recorded
    segment_growth: dict[str, Any] | None = None
    # --gpu-busy: how much of the last untimed step the GPU was busy, by kind, stream and phase, and that step's wall
    # time (bench/_gpu_busy.py; the profiler recorded CUDA activity only); None: not recorded
    gpu_busy: dict[str, Any] | None = None


HOST_PROBE_REPEATS = 5


def host_speed_us(device: Any) -> dict[str, float]:
    """Microseconds per call, the median of HOST_PROBE_REPEATS timings, of what a host-bound step is made of: a
    Python function call, an eager torch op on small CPU tensors (the dispatcher), a tiny autograd forward +
    backward, and an op launched on ``device`` (the host's side of a CUDA launch; CPU: absent). Well under a second.
    """
    import torch

    def per_call(fn: Any, n: int) -> float:
        times = []
        for _ in range(HOST_PROBE_REPEATS):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            times.append((time.perf_counter() - t0) / n * 1e6)
        return round(statistics.median(times), 4)

    def tiny(x: int) -> int:
        return x + 1

    a, b, c = torch.ones(16), torch.ones(16), torch.empty(16)
    w = torch.ones(16, 16, requires_grad=True)
    out = {
        "python_call": per_call(lambda: tiny(1), 20000),
        "torch_cpu_op": per_call(lambda: torch.add(a, b, out=c), 5000),
        "autograd_tiny": per_call(lambda: (a @ w).sum().backward(), 500),
    }
    if device.type == "cuda":
        da, db, dc = (t.to(device) for t in (a, b, c))
        out["cuda_launch"] = per_call(lambda: torch.add(da, db, out=dc), 5000)
    return out


def samples_per_step(c: dict[str, Any]) -> int:
    """Samples per rank in one optimizer step of a config (its JSON form; rows from before ``grad_accum`` ran 1)."""
    return int(c["micro_batch"]) * grad_accum(c)


def grad_accum(c: dict[str, Any]) -> int:
    """Micro-steps per optimizer step of a config in its JSON form (rows from before ``grad_accum`` ran 1)."""
    return int(c.get("grad_accum", 1))


def card_for_cap(total: int, cap_gib: float | None, world: int, s: Strategy | None = None) -> int:
    """The card a capped H200 stands for: the cap is the allocator's; the CUDA context and NCCL, as the planner
    counts them for the strategy ``s`` that runs under it, sit outside it. Without one (a plan for the card, before
    a strategy is chosen): a stage-2 strategy's, which at one rank holds no NCCL buffers -- the smallest such card,
    so that no plan counts on memory the cap withholds."""
    if cap_gib is None:
        return total
    return int(cap_gib * GiB) + device_overhead(s or Strategy(gpus_per_node=world))


def predict(
    hw: HardwareReport,
    model: ModelSpec,
    c: Config,
    world: int,
    seq: int,
    card: int,
    expandable: bool | None = None,
) -> dict[str, Any]:
    """The planner's figures for a config; ``expandable``: the ranks run PyTorch's allocator with expandable
    segments (None: as this process's environment says, which the ranks inherit)."""
    s, buffers = c.strategy(world), row_buffers(c)
    expandable = planned_expandable_segments(expandable, os.environ)
    mem = estimate_memory(model, s, seq, buffers, expandable_segments=expandable)
    budget = card * (1 - cal.DEFAULT_SAFETY_MARGIN)
    tp = estimate_throughput(
        hw, model, s, seq, buffers=buffers, allocator_remaps=allocator_remaps(mem, budget, expandable)
    )
    ds = deepspeed_estimate(model, s)
    parts = dict(tp.parts)
    return {
        # ZeRO-3's side streams' pools (all-gather, reduce) within "reserved": what --segment-growth reads per stream
        "pools": list(stream_pools(model, s, seq, buffers)),
        "optimizer_s": step_phase_seconds(parts),
        # what of a step the planner puts on the GPU's own clock, and the host time it says the GPU waits for
        "gpu_work_s": sum(parts.get(k, 0.0) for k in GPU_WORK_PARTS),
        "host_exposed_s": sum(parts.get(k, 0.0) for k in HOST_PARTS),
        "allocated": mem.allocated,
        "reserved": mem.reserved,
        "device": mem.device,
        "needed": mem.needed,
        "peak_phase": mem.peak_phase,
        "tokens_per_sec": tp.tokens_per_sec,
        "cpu": mem.cpu,
        "ds_estimate_gpu": None if ds is None else ds[1],
        "card_bytes": card,
        "fits_with_margin": mem.needed <= budget,
        "fits_without_margin": mem.needed <= card,
    }


def row_buffers(c: Config) -> ZeroBuffers:
    """What the memory model reads of a config's DeepSpeed JSON beyond the strategy, read as `dswiz check` reads a
    config (wizard.service.prediction.buffers_of): the optimizer DeepSpeed builds from it (stage 0's step;
    wizard.config.optimizer_op), so a --ds-fused-adam row is judged by the step it ran, and the buffer sizes, so a
    --zero-set row by the buckets it ran. Every estimate of a row goes through it."""
    settings = settings_from_dict(ds_config(c, smoke=False), source=f"{c.model}'s DeepSpeed config")
    return buffers_of(ConfigSet(deepspeed=settings))


# The throughput model's parts that are the GPU's own work in the micro-steps (what --gpu-busy reads as busy there)
GPU_WORK_PARTS = (
    "matmuls",
    "element-wise (memory-bound)",
    "ZeRO-3 gather/partition copies",
    "communication",
)


def step_phase_seconds(parts: dict[str, float]) -> float:
    """What of a predicted step runs in DeepSpeed's step (Row.phase_s "step"): the throughput model's STEP_PARTS."""
    return sum(parts.get(k, 0.0) for k in STEP_PARTS)


def _pow2_floor(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


def plan_for_card(hw: HardwareReport, name: str, cap: int | None, world: int, seq: int = SEQ) -> Plan | None:
    """The planner's plan for ``name`` on this machine's card, or on a smaller card emulated by an allocator cap
    (None when the cap is not smaller than the card)."""
    total = hw.min_gpu_memory_bytes or 0
    if cap is not None and cap * GiB >= total:
        return None
    req = PlanRequest(
        seq_len=seq,
        precisions=("bf16",),
        allow_nvme=False,
        gpu_memory_bytes=card_for_cap(total, cap, world),
        max_micro_batch=MAX_MICRO_BATCH,
    )
    return plan(hw, bench_spec(name), req)


def _next_micro_batch(hw: HardwareReport, name: str, s: Strategy, card: int) -> int:
    """The smallest micro-batch the memory model says does not fit the card even without the safety margin."""
    return 1 + max_micro_batch(
        hw, bench_spec(name), s, SEQ, safety_margin=0.0, gpu_memory_bytes=card, limit=1 << 16
    )


def build_grid(
    hw: HardwareReport, world: int, smoke: bool, tiers: tuple[int, ...] = ALL_TIERS
) -> list[Config]:
    """The configs in priority order (see the module docstring), without duplicates. Without tier 1, tier 0 also
    gets its cheap boundary checks: each non-offload recommendation at the micro-batch predicted not to fit."""
    checks = 1 not in tiers
    if smoke:
        # Tagged like the real grid so the smoke run also exercises every part of the analysis.
        second = ("next:full",) if checks else ("below:full", "sweep")
        return [
            Config(SMOKE_MODEL, 0, micro_batch=2, tags=("rec:full",)),
            Config(
                SMOKE_MODEL,
                2,
                micro_batch=2,
                checkpointing=True,
                tier=0 if checks else 1,
                tags=second,
                grad_accum=2,
            ),
        ]
    total = hw.min_gpu_memory_bytes or 0
    grid: dict[int, list[Config]] = {0: [], 1: [], 2: [], 3: []}
    next_checks: list[Config] = []
    models = MODELS if world == 1 else MODELS[:3]
    caps = CAPS_GIB if world == 1 else (None, 24, 40)
    for name in models:
        for cap in caps:
            p = plan_for_card(hw, name, cap, world)
            best = p.best if p is not None else None
            if best is None:
                continue
            label = f"{cap}GiB" if cap else "full"
            s = best.strategy
            base = Config(
                name, s.zero_stage, s.offload_optimizer, s.offload_param, s.activation_checkpointing
            )
            grid[0].append(
                replace(base, micro_batch=s.micro_batch_size, cap_gib=cap, tier=0, tags=(f"rec:{label}",))
            )
            nxt = _next_micro_batch(hw, name, s, card_for_cap(total, cap, world))
            if checks and s.offload_optimizer == "none" and nxt <= 4 * MAX_MICRO_BATCH:
                next_checks.append(
                    replace(base, micro_batch=nxt, cap_gib=cap, tier=0, tags=(f"next:{label}",))
                )
            top = best.max_micro_batch
            below = _pow2_floor(min(top, MAX_MICRO_BATCH))
            if below != s.micro_batch_size:
                grid[1].append(replace(base, micro_batch=below, tier=1, tags=(f"below:{label}",)))
            if (
                world == 1 and 2 * below <= 4 * MAX_MICRO_BATCH
            ):  # over the predicted edge: must not fit the cap
                grid[1].append(replace(base, micro_batch=2 * below, tier=1, tags=(f"above:{label}",)))
            seen = {(s.zero_stage, s.offload_optimizer, s.offload_param, s.activation_checkpointing)}
            assert p is not None
            for c in p.candidates[1:]:
                t = c.strategy
                k = (t.zero_stage, t.offload_optimizer, t.offload_param, t.activation_checkpointing)
                if not c.fits or k in seen or (t.offload_optimizer != "none" and world > 1):
                    continue
                seen.add(k)
                mb = _pow2_floor(min(c.max_micro_batch, MAX_MICRO_BATCH))
                grid[2].append(Config(name, *k, micro_batch=mb, tier=2, tags=(f"alt:{label}",)))
                if len(seen) >= 3:
                    break
        sweep = [(st, "none", "none", False) for st in (0, 1, 2, 3)] + [(2, "none", "none", True)]
        if world == 1:
            sweep += [(2, "cpu", "none", False), (3, "cpu", "none", False)]
        for k in sweep:
            grid[3].append(Config(name, *k, micro_batch=8, tier=3, tags=("sweep",)))  # type: ignore[arg-type]
    out: list[Config] = []
    index: dict[tuple[Any, ...], int] = {}

    def add(c: Config) -> None:
        if c.key() in index:  # the same run serves several purposes: keep one, with all its tags
            old = out[index[c.key()]]
            out[index[c.key()]] = replace(old, tags=old.tags + c.tags)
            return
        index[c.key()] = len(out)
        out.append(c)

    for tier in (0, 1, 2, 3):
        if tier not in tiers:
            continue
        # Within a tier: offload rows last (they need the CPU Adam build), models in priority order.
        for c in sorted(grid[tier], key=lambda c: (c.offload_optimizer != "none", MODELS.index(c.model))):
            add(c)
        if tier == 0 and checks:
            for c in sorted(next_checks, key=lambda c: MODELS.index(c.model)):
                add(c)
    if world > 1:  # no deliberate OOMs with several ranks: a one-sided OOM would hang the others in NCCL
        out = [c for c in out if predict_fits(hw, c, world)]
    return out


_ZERO3_STRATEGIES: tuple[tuple[int, str, str, bool], ...] = (
    (3, "none", "none", False),
    (3, "none", "none", True),
    (3, "cpu", "none", True),
    (3, "cpu", "cpu", True),
    (2, "cpu", "none", True),
)


def zero3_grid(hw: HardwareReport) -> list[Config]:
    """--family zero3: per model (small first), stage 3 with and without checkpointing and CPU offload (and
    ZeRO-2 + CPU optimizer offload, ZeRO-Offload's config) at the largest power-of-two micro-batch the planner
    says fits the whole card (at most ZERO3_MAX_MICRO_BATCH); then the planner's recommendation for each model on
    24 and 40 GiB cards, run under that cap. 7B last: its offload rows take minutes (CPU Adam over 6.7e9
    parameters, ~100 GiB of pinned host memory)."""
    total = hw.min_gpu_memory_bytes or 0
    out: list[Config] = []
    for name in ZERO3_MODELS:
        for stage, opt, param, ckpt in _ZERO3_STRATEGIES:
            s = Strategy(
                zero_stage=stage,
                offload_optimizer=opt,  # type: ignore[arg-type]
                offload_param=param,  # type: ignore[arg-type]
                precision="bf16",
                activation_checkpointing=ckpt,
            )
            if stage == 2 and name in ZERO3_MODELS[:2]:
                continue  # ZeRO-Offload's config matters for the large models (and costs a CPU Adam step)
            top = max_micro_batch(hw, bench_spec(name), s, SEQ, gpu_memory_bytes=total, limit=1 << 12)
            tags: tuple[str, ...] = ("zero3",)
            if top < 1 and ckpt:  # the model says nothing fits: measure a small micro-batch to see
                top, tags = 4, ("zero3", "predicted-not-to-fit")
            if top < 1:
                continue
            mb = _pow2_floor(min(top, ZERO3_MAX_MICRO_BATCH))
            out.append(Config(name, stage, opt, param, ckpt, micro_batch=mb, tier=2, tags=tags))
    for name in ZERO3_MODELS:
        if not name.startswith("llama"):
            continue  # the recommendations are judged on the LLaMA-style models
        for cap in (24, 40):
            c = recommended_config(hw, name, cap)
            if c is not None and all(o.key() != c.key() for o in out):
                out.append(c)
    # Models in priority order, 7B last; within a model the grid order above.
    return sorted(out, key=lambda c: (c.model == "llama-7b", ZERO3_MODELS.index(c.model), c.tier != 2))


def predict_fits(hw: HardwareReport, c: Config, world: int) -> bool:
    total = hw.min_gpu_memory_bytes or 0
    mem = estimate_memory(bench_spec(c.model), c.strategy(world), SEQ, row_buffers(c))
    return mem.needed <= 0.95 * card_for_cap(total, c.cap_gib, world, c.strategy(world))


# ----------------------------------------------------------------------------------------------------- worker


def bench_hardware(world: int) -> HardwareReport:
    """This machine as the planner sees it (NVML when it is there, else torch + the catalog)."""
    import torch

    from wizard.hardware.catalog import with_catalog_figures
    from wizard.hardware.detect import detect
    from wizard.hardware.host import read_host

    report = with_nvme_rate(detect())
    if report.gpus:
        gpus = report.gpus[:world]
        return replace(report, gpus=gpus)
    props = torch.cuda.get_device_properties(0)
    gpu = with_catalog_figures(
        GPUInfo(
            index=0,
            name=props.name,
            memory_total_bytes=props.total_memory,
            compute_capability=(props.major, props.minor),
        )
    )
    return HardwareReport(
        source="detected", gpus=tuple(replace(gpu, index=i) for i in range(world)), host=read_host()
    )


def with_nvme_rate(report: HardwareReport) -> HardwareReport:
    """--nvme-rate: the drive at --nvme-path as this machine's NVMe swap drive, at the rates bench/nvme_rate.py
    measured there (so that NVMe rows are predicted, and judged, with the drive they swapped to)."""
    rate_file = os.environ.get(NVME_RATE_VAR)
    if not rate_file:
        return report
    drive = load_bench_script("nvme_rate").as_swap_drive(
        json.loads(Path(rate_file).read_text()), nvme_swap_dir()
    )
    return replace(report, host=replace(report.host, disks=(*report.host.disks, drive)))


def smoke_hardware(world: int) -> HardwareReport:
    gpu = GPUInfo(
        index=0,
        name="NVIDIA H200",
        memory_total_bytes=143771 * 1024**2,
        compute_capability=(9, 0),
        peak_tflops_bf16=989.4,
        memory_bandwidth_gbs=4800.0,
        nvlink_gbs=900.0,
        pcie_gen=5,
    )
    return HardwareReport(
        source="described",
        gpus=tuple(replace(gpu, index=i) for i in range(world)),
        host=HostInfo(logical_cores=os.cpu_count()),
    )


NVME_PATH_VAR = "DSWIZ_BENCH_NVME_PATH"  # --nvme-path, handed to every config's process
NVME_RATE_VAR = "DSWIZ_BENCH_NVME_RATE"  # --nvme-rate


def nvme_swap_dir() -> str:
    """Where an NVMe row's DeepSpeed swaps its tensors: a folder of the bench's own under --nvme-path (the launcher
    removes that folder after each config, never the directory given)."""
    return os.path.join(os.environ.get(NVME_PATH_VAR, "/tmp"), "dswiz-bench-nvme")


def ds_config(c: Config, smoke: bool) -> dict[str, Any]:
    zero: dict[str, Any] = {"stage": c.zero_stage}
    if c.zero_stage >= 1:  # what dswiz writes (wizard/config/build.py): DeepSpeed's bucket defaults
        zero.update(contiguous_gradients=True, overlap_comm=c.zero_stage == 3)
    if c.offload_optimizer != "none":
        zero["offload_optimizer"] = {"device": c.offload_optimizer, "pin_memory": True}
        if c.offload_optimizer == "nvme":  # what dswiz writes for NVMe (wizard/config/build.py _zero)
            zero["offload_optimizer"].update(nvme_path=nvme_swap_dir(), buffer_count=4)
    if c.offload_param != "none":
        zero["offload_param"] = {"device": c.offload_param, "pin_memory": True}
        if c.offload_param == "nvme":
            zero["offload_param"].update(
                nvme_path=nvme_swap_dir(), buffer_count=5, buffer_size=100_000_000, max_in_cpu=1_000_000_000
            )
    zero.update(c.zero)
    params: dict[str, Any] = {"lr": 1e-5, "weight_decay": 0.0}
    if c.offload_optimizer == "none" and c.optimizer == "ds":
        params.update(torch_adam=True, fused=not smoke)
    cfg: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": c.micro_batch,
        "gradient_accumulation_steps": c.grad_accum,
        "gradient_clipping": 1.0,
        "zero_optimization": zero,
        "steps_per_print": 1_000_000,
        "wall_clock_breakdown": False,
    }
    if c.optimizer in ("ds", "ds-fused"):
        cfg["optimizer"] = {"type": "AdamW", "params": params}
    if not smoke:
        cfg["bf16"] = {"enabled": True}
    if c.offload_optimizer != "none" and smoke:
        cfg["zero_force_ds_cpu_optimizer"] = False
    return cfg


def cap_device_memory(device: Any, cap_gib: float | None) -> int:
    """Let this process use at most ``cap_gib`` of the GPU (a smaller card: OOM where that card would), start the
    peak counters afresh, and return what is allocated already: the baseline a config's peak is measured above."""
    import torch

    total = torch.cuda.get_device_properties(device).total_memory
    fraction = 1.0 if cap_gib is None else min(1.0, cap_gib * GiB / total)
    torch.cuda.set_per_process_memory_fraction(fraction, device)
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    return int(torch.cuda.memory_allocated(device))


def device_memory_peaks(device: Any, baseline: int) -> tuple[int, int, int]:
    """(peak allocated above ``baseline``, peak reserved, held outside the allocator: CUDA context + NCCL)."""
    import torch

    free, total_now = torch.cuda.mem_get_info(device)
    return (
        torch.cuda.max_memory_allocated(device) - baseline,
        torch.cuda.max_memory_reserved(device),
        (total_now - free) - torch.cuda.memory_reserved(device),
    )


def destroy_engine(engine: Any) -> None:
    if engine is not None and hasattr(engine, "destroy"):
        with contextlib.suppress(Exception):  # teardown must not end the run
            engine.destroy()


def release_device_memory(device: Any, cuda: bool) -> None:
    """Once the engine and model are dropped: collect them, hand the cached blocks back, lift the memory cap."""
    import torch

    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.set_per_process_memory_fraction(1.0, device)


def hf_model_config(spec: ModelSpec, seq: int) -> tuple[Any, Any]:
    """(transformers config, model class) of ``spec``'s shape: GPT-2 or a LLaMA-style decoder (RMSNorm, SwiGLU,
    GQA, rotary positions)."""
    if spec.name in BENCH_HF_CONFIGS:
        from transformers import AutoConfig, AutoModelForCausalLM

        given = dict(BENCH_HF_CONFIGS[spec.name])
        given["max_position_embeddings"] = max(seq, given.get("max_position_embeddings") or seq)
        return AutoConfig.for_model(given.pop("model_type"), use_cache=USE_CACHE, **given), _FromConfig(
            AutoModelForCausalLM
        )
    from transformers import AutoModelForCausalLM

    if spec.model_type == "llama":
        from transformers import LlamaConfig

        config: Any = LlamaConfig(
            hidden_size=spec.hidden,
            intermediate_size=spec.ffn_hidden,
            num_hidden_layers=spec.layers,
            num_attention_heads=spec.heads,
            num_key_value_heads=spec.kv_heads,
            vocab_size=spec.vocab,
            max_position_embeddings=max(seq, spec.max_positions or seq),
            use_cache=USE_CACHE,
        )
        return config, _FromConfig(AutoModelForCausalLM)
    from transformers import GPT2Config

    config = GPT2Config(
        n_layer=spec.layers,
        n_embd=spec.hidden,
        n_head=spec.heads,
        vocab_size=spec.vocab,
        n_positions=max(seq, spec.max_positions or seq),
        use_cache=USE_CACHE,
    )
    return config, _FromConfig(AutoModelForCausalLM)


class _FromConfig:
    """``factory(config, dtype)``: the Auto class's ``from_config``, as users build a model (``dtype`` None: the
    config's or the default)."""

    def __init__(self, auto: Any) -> None:
        self._auto = auto

    def __call__(self, config: Any, dtype: Any = None) -> Any:
        return (
            self._auto.from_config(config) if dtype is None else self._auto.from_config(config, dtype=dtype)
        )


# How the bench builds its models: from_config(config, dtype=bf16) on the GPU, as users do (and as
# runner/examples/train_hf.py does), with transformers' default use_cache (True). Raw files without a "use_cache"
# field were built with use_cache=False (and under torch.set_default_dtype, which changes nothing saved): their rows
# are predicted for the model they ran, a ModelSpec with use_cache=False (calibration.USE_CACHE_OFF_BYTES_PER_HIDDEN:
# GPT-2 keeps 4*h fewer bytes per token per layer for backward, GPT-NeoX 4*h more; an inference pass keeps no KV
# cache). Checkpointing turns the cache off in training whatever the config says.
CONSTRUCTION = "from_config(dtype)"
USE_CACHE = True
# The innermost built_with_cache's use_cache: bench_spec gives its models that one.
_BUILT_WITH_CACHE: list[bool] = []


@contextlib.contextmanager
def built_with_cache(use_cache: bool) -> Any:
    """Within it, bench_spec's models are built with ``use_cache`` (for raw files from before USE_CACHE: False).
    Nothing of the planner's changes: the model's spec says it."""
    _BUILT_WITH_CACHE.append(use_cache)
    try:
        yield
    finally:
        _BUILT_WITH_CACHE.pop()


def row_use_cache(row: dict[str, Any]) -> bool:
    return bool(row.get("use_cache", False))


def build_model(spec: ModelSpec, seq: int, device: Any, smoke: bool) -> Any:
    """A randomly initialised model of ``spec``'s shape (hf_model_config), built on ``device`` (16-bit unless
    smoke)."""
    import torch

    torch.manual_seed(0)
    dtype = torch.float32 if smoke else torch.bfloat16
    config, factory = hf_model_config(spec, seq)
    with torch.device(device):  # built in 16-bit directly: a 7B model never exists in fp32
        return factory(config, dtype=dtype)


class HostMemorySampler:
    """This process's peak resident host memory (psutil RSS, sampled every 0.1 s on a thread) and the peak of
    page-locked memory torch's host allocator handed out (DeepSpeed's pinned offload buffers), while a config runs."""

    def __init__(self) -> None:
        import threading

        import psutil

        self._proc = psutil.Process()
        self.before = self.peak = self._proc.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(0.1):
            self.peak = max(self.peak, self._proc.memory_info().rss)

    def stop(self) -> tuple[int, int, int | None]:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._proc.memory_info().rss)
        return self.before, self.peak, _pinned_peak()


def _pinned_peak() -> int | None:
    import torch

    stats = getattr(torch.cuda, "host_memory_stats", None)
    if stats is None or not torch.cuda.is_available():
        return None
    try:
        got = stats()
    except Exception:  # an older torch, or no CUDA host allocator: not measured
        return None
    value = got.get("allocated_bytes.all.peak", got.get("allocated_bytes.peak"))
    return None if value is None else int(value)


def client_optimizer(c: Config, model: Any) -> Any:
    """The script's own optimizer for ``c.optimizer`` "torch"/"torch-fused" (None: DeepSpeed's, from the config):
    torch.optim.AdamW as a script writes it, its default implementation (foreach on a GPU) or fused=True."""
    import torch

    if c.optimizer not in OPTIMIZER_LABELS:
        raise ValueError(f"optimizer {c.optimizer!r}: one of {', '.join(OPTIMIZER_LABELS)}")
    if c.optimizer in ("ds", "ds-fused"):
        return None
    if c.offload_optimizer != "none":  # ZeRO-Offload steps with DeepSpeed's CPU Adam, not a torch optimizer
        raise ValueError(
            f"optimizer {c.optimizer!r} with the optimizer offloaded: DeepSpeed's CPU Adam runs it"
        )
    fused = True if c.optimizer == "torch-fused" else None
    return torch.optim.AdamW(model.parameters(), lr=1e-5, fused=fused)


PHASES = ("forward", "backward", "step")


class _PhaseMarks:
    """Boundaries of one training step: CUDA events on the current stream (read after the step's synchronize), or
    the host's clock on CPU. ``mark(phase)`` closes the span since the previous mark as ``phase``; a phase marked in
    every micro-step of an accumulating step adds up."""

    def __init__(self, cuda: bool, peaks: _PeakLog | None = None) -> None:
        self.cuda = cuda
        self.peaks = peaks
        self.marks: list[tuple[str, Any]] = []

    def mark(self, phase: str = "") -> None:
        import torch

        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append((phase, event))
            if self.peaks is not None and phase:
                self.peaks.note(phase)
        else:
            self.marks.append((phase, time.perf_counter()))

    def ordered(self) -> list[tuple[str, float]]:
        """(phase, seconds) of every span in the order they ran (read after the step's synchronize)."""
        return [
            (phase, a.elapsed_time(b) / 1e3 if self.cuda else b - a)
            for (_, a), (phase, b) in zip(self.marks[:-1], self.marks[1:], strict=True)
        ]

    def seconds(self) -> dict[str, float]:
        out = dict.fromkeys(PHASES, 0.0)
        for phase, seconds in self.ordered():
            out[phase] += seconds
        return out


class _PeakLog:
    """Row.peak_grew_at: the allocator's peak (a host-side counter, no synchronisation) read at each boundary."""

    def __init__(self, row: Row, device: Any) -> None:
        self.row, self.device, self.step, self.last = row, device, -1, -1

    def note(self, phase: str) -> None:
        import torch

        peak = torch.cuda.max_memory_allocated(self.device) - (self.row.baseline_allocated or 0)
        if peak > self.last:
            self.row.peak_grew_at.append([self.step, phase, peak])
            self.last = peak

    def count_from_here(self) -> int:
        """Hand the cached blocks back and restart the allocator's peaks; returns the peak until now."""
        import torch

        before, self.last = self.last, -1
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(self.device)
        return before


def _start_profiler(host: bool = False) -> Any:
    """PyTorch's profiler, started with CUDA activity only (kernels and copies; no host-side operator records), or
    with ``host`` the host's operators, CUDA runtime calls and Python frames too (which slow the host)."""
    import torch

    activities = [torch.profiler.ProfilerActivity.CUDA]
    if host:
        activities.append(torch.profiler.ProfilerActivity.CPU)
    profiler = torch.profiler.profile(activities=activities, with_stack=host)
    profiler.start()
    return profiler


def _stop_profiler(profiler: Any, phases: list[tuple[str, float]], host: bool = False) -> dict[str, Any]:
    """Stop ``profiler`` and read its trace back into GPU busy time by kind, stream and phase, and with ``host`` what
    the host ran while the GPU waited (bench/_gpu_busy.py)."""
    import tempfile

    profiler.stop()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        profiler.export_chrome_trace(str(path))
        trace = json.loads(path.read_text())
    out = gpu_busy.busy(trace, phases)
    if host:
        out["host_while_idle"] = gpu_busy.host_while_idle(trace)
    return out


def run_config(
    c: Config,
    world: int,
    seq: int,
    smoke: bool,
    row: Row,
    anatomy: bool = False,
    segments: bool = False,
    profile: bool = False,
    host_profile: bool = False,
) -> None:
    """Build, initialize and train ``c``, filling ``row``. ``anatomy`` (CUDA): record what holds the allocated peak
    of the last untimed step (Row.peak_anatomy); ``segments`` (CUDA): record where the allocator reserved its
    segments over the warm-up (Row.segment_growth); ``profile`` (CUDA): how much of the last untimed step the GPU
    was busy (Row.gpu_busy), and with ``host_profile`` what the host ran while it waited (slowing that step). The
    timed steps after any of them run as they would without."""
    import deepspeed
    import torch

    cuda = torch.cuda.is_available() and not smoke
    anatomy = anatomy and cuda
    segments = segments and cuda and not anatomy  # one memory history at a time
    profile = profile and cuda and not (anatomy or segments)  # one recording at a time
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    spec = bench_spec(c.model)
    row.host_us = host_speed_us(device)
    if cuda:
        row.baseline_allocated = cap_device_memory(device, c.cap_gib)
    host = HostMemorySampler()
    engine = model = None
    start = time.perf_counter()
    forward_events = None
    try:
        model = build_model(spec, seq, device, smoke)
        if c.checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.train()
        engine, _, _, _ = deepspeed.initialize(
            model=model,
            model_parameters=model.parameters(),
            optimizer=client_optimizer(c, model),
            config=ds_config(c, smoke),
        )
        row.init_s = round(time.perf_counter() - start, 3)
        peaks = _PeakLog(row, device) if cuda else None
        if peaks is not None:
            peaks.note("init")
            if c.offload_param != "none":
                # The model was built whole on the GPU and DeepSpeed then moved its partitions to the host: a peak
                # (and a cached block) of the whole 16-bit model that training never reaches, and that a script
                # building under zero.Init (from_pretrained with a ZeRO-3 config, accelerate's zero3_init_flag)
                # never has. Kept apart (Row.init_allocated); the peaks count from here.
                row.init_allocated = peaks.count_from_here()
        segments_start: dict[str, Any] = {}
        segment_marks: list[tuple[int, str]] = []  # (events recorded by then, the span that ended)
        if segments:
            segments_start = torch.cuda.memory._snapshot()
            peak_anatomy.record("all")
        gen = torch.Generator(device="cpu").manual_seed(1)
        ids = torch.randint(0, spec.vocab, (c.micro_batch, seq), generator=gen).to(engine.device)
        timed = TIMED_STEPS if not smoke else 2
        warmup = (WARMUP_STEPS_STAGE3 if c.zero_stage == 3 else WARMUP_STEPS) if not smoke else 1
        row.warmup_steps = warmup

        def mark(marks: _PhaseMarks, step: int, phase: str, micro: int = 0) -> None:
            marks.mark(phase)
            if segments and step < warmup:
                segment_marks.append((peak_anatomy.trace_length(device), f"step {step} {phase} {micro}"))

        for i in range(warmup + timed):
            if cuda:
                torch.cuda.synchronize(device)
                row.resident_allocated = torch.cuda.memory_allocated(device) - (row.baseline_allocated or 0)
            if peaks is not None:
                peaks.step = i
            recording = anatomy and i == warmup - 1
            profiler = _start_profiler(host_profile) if profile and i == warmup - 1 else None
            if recording:
                anatomy_start = torch.cuda.memory._snapshot()
                peak_anatomy.record("all")
            marks = _PhaseMarks(cuda, peaks)
            t0 = time.perf_counter()
            marks.mark()
            for micro in range(c.grad_accum):
                loss = engine(input_ids=ids, labels=ids).loss
                mark(marks, i, "forward", micro)
                if recording and micro == 0:
                    forward_events = peak_anatomy.trace_length(device)
                engine.backward(loss)
                if micro < c.grad_accum - 1:
                    engine.step()  # not at the accumulation boundary: DeepSpeed only counts the micro-step
                mark(marks, i, "backward", micro)
            engine.step()
            mark(marks, i, "step")
            if cuda:
                torch.cuda.synchronize(device)
            dt_s = time.perf_counter() - t0
            if profiler is not None:
                busy = _stop_profiler(profiler, marks.ordered(), host_profile)
                row.gpu_busy = {"wall_s": round(dt_s, 6), "host_profiled": host_profile, **busy}
            if segments and i == warmup - 1:
                index, events = peak_anatomy.events_now(device)
                row.segment_growth = peak_anatomy.segment_growth(segments_start, events, segment_marks, index)
                peak_anatomy.record(None)
            if recording:
                row.peak_anatomy = peak_anatomy.step_anatomy(
                    device, anatomy_start, row.baseline_allocated or 0, forward_events
                )
                peak_anatomy.record(None)
            if i >= warmup:
                row.step_s.append(round(dt_s, 5))
                for name, seconds in marks.seconds().items():
                    row.phase_s.setdefault(name, []).append(round(seconds, 5))
            if i == warmup and dt_s > 3.0 and timed > 2:  # a slow config: two timed steps are enough
                timed = 2
                if len(row.step_s) >= 2:
                    break
        row.tokens_per_sec = round(
            samples_per_step(asdict(c)) * seq * world / statistics.median(row.step_s), 1
        )
        row.status = "ok"
    except torch.OutOfMemoryError as e:
        row.status, row.error = "oom", str(e).splitlines()[0][:300]
    except Exception as e:  # a config that DeepSpeed rejects must not end the run
        row.status, row.error = (
            "error",
            f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300],
        )
    finally:
        if anatomy or segments:
            peak_anatomy.record(None)
        row.host_rss_before, row.host_rss_peak, row.host_pinned_peak = host.stop()
        if cuda:
            peaks = device_memory_peaks(device, row.baseline_allocated or 0)
            row.max_allocated, row.max_reserved, row.outside_allocator = peaks
        destroy_engine(engine)
        del engine, model
        release_device_memory(device, cuda)


def worker(args: argparse.Namespace) -> int:
    from datetime import timedelta

    import deepspeed
    import torch
    import torch.distributed as dist

    smoke = args.smoke
    cuda = torch.cuda.is_available() and not smoke
    if cuda:  # before the process group exists, so NCCL binds each rank to its own GPU
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    deepspeed.init_distributed(timeout=timedelta(seconds=args.collective_timeout_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    hw = smoke_hardware(world) if smoke else bench_hardware(world)
    seq = family_seq(args.family, smoke)
    tiers = parse_tiers(args.tiers)
    grid = run_grid(args, hw, world, smoke, tiers)
    total = hw.min_gpu_memory_bytes or 0
    out_path = Path(args.out) / args.name
    if args.index is not None:  # one config of the grid in this process (--family zero3)
        c = grid[args.index]
        return _worker_one(args, c, hw, world, c.seq_or(seq), rank, out_path)
    doc = new_doc(args, hw, world, seq, tiers, grid)
    if rank == 0:
        print(
            f"plan_accuracy: {world} rank(s), {len(grid)} configs in the grid, budget {args.budget_s:.0f} s",
            flush=True,
        )
        _save(out_path, doc)
    for i, c in enumerate(grid):
        elapsed = time.time() - args.t0
        go = torch.tensor([1 if elapsed < args.budget_s else 0], device="cuda" if cuda else "cpu")
        dist.broadcast(go, 0)  # rank 0 decides, so every rank stops at the same config
        if not int(go.item()):
            if rank == 0:
                doc["stopped_at"] = {"index": i, "elapsed_s": round(elapsed, 1), "left": len(grid) - i}
                _save(out_path, doc)
                print(f"budget spent after {i} of {len(grid)} configs ({elapsed:.0f} s)", flush=True)
            break
        model = bench_spec(c.model)
        card = card_for_cap(total, c.cap_gib, world, c.strategy(world))
        row = Row(
            config=asdict(c), world=world, seq_len=seq, predicted=predict(hw, model, c, world, seq, card)
        )
        run_config(
            c,
            world,
            seq,
            smoke,
            row,
            args.peak_anatomy,
            args.segment_growth,
            args.gpu_busy or args.host_while_idle,
            args.host_while_idle,
        )
        row.finished_at = round(time.time(), 1)
        dist.barrier()
        if rank == 0:
            doc["rows"].append(asdict(row))
            doc["elapsed_s"] = round(time.time() - args.t0, 1)
            _save(out_path, doc)
            print(_row_line(i, len(grid), row), flush=True)
    if rank == 0:
        print(f"wrote {out_path}", flush=True)
    dist.barrier()
    if smoke:  # DeepSpeed 0.19.8 on CPU sometimes aborts a rank at exit (train_tiny.leave_after_success)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


def _allocator_backend(smoke: bool) -> str | None:
    import torch

    return None if smoke or not torch.cuda.is_available() else torch.cuda.memory.get_allocator_backend()


def new_doc(
    args: argparse.Namespace,
    hw: HardwareReport,
    world: int,
    seq: int,
    tiers: tuple[int, ...],
    grid: list[Config],
) -> dict[str, Any]:
    """The raw file's header (its rows follow as configs finish)."""
    return {
        "bench": "bench/plan_accuracy.py",
        "construction": CONSTRUCTION,
        "use_cache": USE_CACHE,
        "argv": sys.argv[1:],
        "date": dt.date.today().isoformat(),
        "started_at": dt.datetime.fromtimestamp(args.t0, dt.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "world": world,
        "seq_len": seq,
        "smoke": args.smoke,
        "family": args.family,
        "tiers": list(tiers),
        # The allocator settings the ranks ran with (the launcher passes the environment through): with
        # expandable_segments the cache fragments far less than the default allocator the planner assumes.
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
        "allocator_backend": _allocator_backend(args.smoke),
        "optimizer": "DeepSpeed FusedAdam"
        if args.ds_fused_adam
        else "torch fused AdamW (DeepSpeed torch_adam)",
        "hardware": hw.to_dict(),
        "versions": _versions(),
        "calibration": _calibration_snapshot(),
        "grid_size": len(grid),
        "rows": [],
    }


def run_grid(
    args: argparse.Namespace, hw: HardwareReport, world: int, smoke: bool, tiers: tuple[int, ...]
) -> list[Config]:
    """The family's grid as this run reads it: the optimizer (--ds-fused-adam) and DeepSpeed settings (--zero-set)
    it asks for applied to every config."""
    grid = with_optimizer(family_grid(hw, world, smoke, tiers, args.family), args.ds_fused_adam)
    zero = parse_zero_set(args.zero_set)
    return [replace(c, zero=zero) for c in grid] if zero else grid


def parse_zero_set(items: Sequence[str] | None) -> tuple[tuple[str, int], ...]:
    """--zero-set KEY=N (repeatable): zero_optimization buffer sizes to run instead of DeepSpeed's defaults, among
    the keys the memory model reads and as it reads them (wizard.service.prediction.BUFFER_KEYS, buffer_count: a
    value it would not read is refused, so no row runs one size and is predicted with another); SystemExit names a
    bad one."""
    known = [key for key, _ in BUFFER_KEYS]
    out: dict[str, int] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or key not in known:
            raise SystemExit(f"--zero-set {item!r}: write KEY=N with KEY one of {', '.join(known)}")
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        count = buffer_count(key, number) if math.isfinite(number) and number == int(number) else None
        if count is None:
            raise SystemExit(
                f"--zero-set {item!r}: N is a whole number of elements that DeepSpeed takes for {key} "
                f"(at least {least_buffer_count(key)}), e.g. {key}=250000000"
            )
        out[key] = count
    return tuple(sorted(out.items()))


def with_optimizer(grid: list[Config], ds_fused_adam: bool) -> list[Config]:
    """The grid with --ds-fused-adam: the configs that step on the GPU with DeepSpeed's AdamW take DeepSpeed's own
    FusedAdam ("ds-fused", rows of their own); offloaded ones step with its CPU Adam either way."""
    if not ds_fused_adam:
        return grid
    return [
        replace(c, optimizer="ds-fused") if c.optimizer == "ds" and c.offload_optimizer == "none" else c
        for c in grid
    ]


def family_grid(
    hw: HardwareReport, world: int, smoke: bool, tiers: tuple[int, ...], family: str
) -> list[Config]:
    if family == "sweep":
        if smoke:
            return [Config("tiny-llama", 1, micro_batch=b, tags=("sweep",)) for b in (1, 2)]
        return [
            Config(m, st, checkpointing=ck, micro_batch=mb, tags=("sweep",))
            for m, st, ck, mb in SWEEP_CONFIGS
        ]
    if family in ("repeats", "pressure", "allocator", "margin"):
        tag, repeat = ("repeat", 1) if family == "repeats" else (family, 0)
        if smoke:
            return [Config("tiny-llama", 1, micro_batch=2, repeat=repeat, tags=(tag,))]
        return [
            Config(m, st, opt, par, ck, micro_batch=mb, seq=seq, cap_gib=cap, repeat=repeat, tags=(tag,))  # type: ignore[arg-type]
            for m, st, opt, par, ck, mb, seq, cap in (
                {"repeats": REPEAT_CONFIGS, "pressure": PRESSURE_CONFIGS, "margin": MARGIN_CONFIGS}.get(
                    family, ALLOCATOR_CONFIGS
                )
            )
        ]
    if family == "phases":
        if smoke:
            return [Config("tiny-llama", 1, micro_batch=2, repeat=1, tags=("phases",))]
        return [
            Config(m, st, opt, par, ck, micro_batch=mb, seq=seq, cap_gib=cap, repeat=rep, tags=("phases",))  # type: ignore[arg-type]
            for m, st, opt, par, ck, mb, seq, cap, rep in PHASES_CONFIGS
        ]
    if family == "accum":
        if smoke:
            return [Config("tiny-llama", 1, micro_batch=2, grad_accum=3, tags=("accum",))]
        return [
            Config(
                m,
                st,
                opt,
                par,
                ck,
                micro_batch=mb,
                seq=seq,
                cap_gib=cap,
                grad_accum=ga,
                repeat=rep,
                tags=("accum",),
            )  # type: ignore[arg-type]
            for m, st, opt, par, ck, mb, seq, cap, ga, rep in ACCUM_CONFIGS
        ]
    if family in ("optimizer", "boundary"):
        if smoke:
            return [Config("tiny-llama", 1, micro_batch=2, optimizer="torch", tags=(family,))]
        return [
            Config(m, st, checkpointing=ck, micro_batch=mb, seq=seq, optimizer=o, tags=(family,))
            for m, st, ck, mb, seq, o in (OPTIMIZER_CONFIGS if family == "optimizer" else BOUNDARY_CONFIGS)
        ]
    if family == "thin":
        if smoke:
            return [Config("tiny-llama", 0, micro_batch=1, grad_accum=2, tags=("thin",))]
        return [
            Config(m, st, micro_batch=mb, seq=seq, grad_accum=ga, repeat=rep, tags=("thin",))
            for m, st, mb, seq, ga, rep in THIN_CONFIGS
        ]
    if family == "pairs":
        if smoke:
            return [
                Config("tiny-llama", 1, micro_batch=b, repeat=PAIR_REPEAT + 1, tags=("pair",)) for b in (1, 2)
            ]
        return pairs_grid()
    if family == "recs":
        if smoke:
            return [Config("tiny-llama", 1, micro_batch=2, tags=("rec:full",))]
        return recs_grid(hw)
    if family == "heldout":
        if smoke:
            return [Config("tiny-llama", 3, checkpointing=True, micro_batch=2, repeat=1, tags=("heldout",))]
        return heldout_grid(hw)
    if family != "zero3":
        return build_grid(hw, world, smoke, tiers)
    if smoke:
        return [
            Config("tiny-llama", 3, checkpointing=True, micro_batch=2, tags=("zero3",)),
            Config(SMOKE_MODEL, 3, micro_batch=2, tags=("zero3",)),
        ]
    return zero3_grid(hw) + recommendation_checks(hw)


def heldout_grid(hw: HardwareReport) -> list[Config]:
    """--family heldout: HELDOUT_CONFIGS, then today's recommendation for HELDOUT_REC_MODELS on 24 and 40 GiB cards
    (at HELDOUT_SEQ; Pythia-1B on the whole card too, where `dswiz probe`'s ZeRO-1 at micro-batch 36 ran out of
    memory), each run under its cap."""
    out = [
        Config(m, st, opt, par, ck, micro_batch=mb, seq=seq, repeat=rep, tags=("heldout",))  # type: ignore[arg-type]
        for m, st, opt, par, ck, mb, seq, rep in HELDOUT_CONFIGS
    ]
    for name in HELDOUT_REC_MODELS:
        for cap in (None, 24, 40) if name == "pythia-1b" else (24, 40):
            c = recommended_config(hw, name, cap, HELDOUT_SEQ)
            if c is not None and all(o.key() != c.key() for o in out):
                out.append(c)
    return out


def recommendation_checks(hw: HardwareReport) -> list[Config]:
    """Today's recommendation for each (model, card) of the GPT-2 grid and the ZeRO-3 models: run under the card's
    cap by --indices after a recalibration changed them (the rows merge with the earlier raw files)."""
    out = []
    for name in dict.fromkeys((*MODELS, *ZERO3_MODELS)):  # gpt2-xl is in both
        for cap in (24, 40, 80):
            c = recommended_config(hw, name, cap)
            if c is not None:
                out.append(c)
    return out


def recs_grid(hw: HardwareReport) -> list[Config]:
    """--family recs: today's recommendation for every (model, card) the analysis judges -- the GPT-2 grid, the
    ZeRO-3 models and the held-out models (at HELDOUT_SEQ), on the whole card and on 24/40/80 GiB caps -- so that
    --models and --cards run exactly the ones the last analysis left "unknown"."""
    out: list[Config] = []
    for name in dict.fromkeys((*MODELS, *ZERO3_MODELS, *HELDOUT_REC_MODELS)):
        seq = HELDOUT_SEQ if name in HELDOUT_REC_MODELS else None
        for cap in CAPS_GIB:
            c = recommended_config(hw, name, cap, seq)
            if c is not None:
                out.append(c)
    return out


def card_label(cap_gib: int | None) -> str:
    """How --cards names a card: "full" (the whole card) or the cap in GiB ("24")."""
    return "full" if cap_gib is None else str(cap_gib)


def recommended_config(
    hw: HardwareReport, name: str, cap: int | None, seq: int | None = None
) -> Config | None:
    """The planner's recommendation for ``name`` on a card capped at ``cap`` GiB (None: the whole card), as a config
    run under that cap."""
    p = plan_for_card(hw, name, cap, 1, seq or SEQ)
    best = p.best if p is not None else None
    if best is None:
        return None
    s = best.strategy
    return Config(
        name,
        s.zero_stage,
        s.offload_optimizer,
        s.offload_param,
        s.activation_checkpointing,
        micro_batch=s.micro_batch_size,
        cap_gib=cap,
        tags=(f"rec:{cap}GiB" if cap else "rec:full",),
        seq=seq,
    )


def _worker_one(
    args: argparse.Namespace, c: Config, hw: HardwareReport, world: int, seq: int, rank: int, out_path: Path
) -> int:
    """Run one config and append its row to the raw file the launcher started (one process per config)."""
    import torch.distributed as dist

    card = card_for_cap(hw.min_gpu_memory_bytes or 0, c.cap_gib, world, c.strategy(world))
    row = Row(
        config=asdict(c),
        world=world,
        seq_len=seq,
        predicted=predict(hw, bench_spec(c.model), c, world, seq, card),
    )
    run_config(
        c,
        world,
        seq,
        args.smoke,
        row,
        args.peak_anatomy,
        args.segment_growth,
        args.gpu_busy or args.host_while_idle,
        args.host_while_idle,
    )
    row.finished_at = round(time.time(), 1)
    dist.barrier()
    if rank == 0:
        doc = json.loads(out_path.read_text())
        doc["rows"].append(asdict(row))
        doc["elapsed_s"] = round(time.time() - args.t0, 1)
        doc["hardware"] = hw.to_dict()
        _save(out_path, doc)
        print(_row_line(args.index, len(doc.get("order", [])) or args.index + 1, row), flush=True)
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip interpreter teardown: DeepSpeed's atexit work is not what is measured


def _row_line(i: int, n: int, row: Row) -> str:
    c = row.config
    what = (
        f"{c['model']} z{c['zero_stage']}{'+' + c['offload_optimizer'] if c['offload_optimizer'] != 'none' else ''}"
        f"{' ckpt' if c['checkpointing'] else ''} mbs {c['micro_batch']}"
        f"{' ga ' + str(grad_accum(c)) if grad_accum(c) != 1 else ''}"
        f"{' cap ' + str(c['cap_gib']) + 'GiB' if c['cap_gib'] else ''}"
    )
    got = f"{row.status}"
    if row.max_allocated is not None:
        got += f" alloc {row.max_allocated / GiB:.2f} (pred {row.predicted['allocated'] / GiB:.2f})"
    if row.tokens_per_sec:
        got += f" tok/s {row.tokens_per_sec:,.0f} (pred {row.predicted['tokens_per_sec']:,.0f})"
    return f"[{i + 1}/{n}] {what}: {got}"


def parse_tiers(text: str) -> tuple[int, ...]:
    """ "0,1" -> (0, 1); the tiers of the grid to run (module docstring)."""
    try:
        tiers = tuple(sorted({int(x) for x in text.split(",") if x.strip()}))
    except ValueError:
        tiers = ()
    if not tiers or not set(tiers) <= set(ALL_TIERS):
        raise SystemExit(f"error: --tiers {text!r}: give tiers from 0-3, comma-separated, e.g. --tiers 0")
    return tiers


def _versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for mod in ("torch", "deepspeed", "transformers"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception:
            out[mod] = None
    return out


def _calibration_snapshot() -> dict[str, Any]:
    return {k: v for k, v in vars(cal).items() if k.isupper() and isinstance(v, (int, float))}


def _save(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)  # atomic: a cut-off run leaves the previous complete file


# ----------------------------------------------------------------------------------------------------- launcher


def _raw_name(args: argparse.Namespace, gpus: int) -> str:
    stamp = dt.date.today().isoformat()
    verify = "-verify" if parse_tiers(args.tiers) != ALL_TIERS else ""
    family = f"-{args.family}" if args.family in PER_PROCESS_FAMILIES else ""
    label = f"-{args.label}" if args.label else ""
    return f"plan_accuracy-{stamp}-{'smoke' if args.smoke else f'{gpus}gpu'}{family}{verify}{label}.json"


def launch_per_process(args: argparse.Namespace, gpus: int, name: str, env: dict[str, str]) -> int:
    """--family zero3: one process (one engine) per config, in grid order, until --budget-s is spent; a config
    that dies (host RAM: the kernel's OOM killer) or outlasts --config-timeout-s is recorded as such."""
    hw = smoke_hardware(gpus) if args.smoke else bench_hardware(gpus)
    seq = family_seq(args.family, args.smoke)
    tiers = parse_tiers(args.tiers)
    grid = run_grid(args, hw, gpus, args.smoke, tiers)
    wanted = [m for m in args.models.split(",") if m] if args.models else None
    cards = [x.strip() for x in args.cards.split(",") if x.strip()] if args.cards else None
    order = [int(x) for x in args.indices.split(",") if x] if args.indices else range(len(grid))
    path = Path(args.out) / name
    doc = new_doc(args, hw, gpus, seq, tiers, grid)
    _save(path, doc)
    print(f"plan_accuracy: {len(grid)} configs, one process each, budget {args.budget_s:.0f} s", flush=True)
    for i in order:
        c = grid[i]
        if (wanted is not None and c.model not in wanted) or (
            cards is not None and card_label(c.cap_gib) not in cards
        ):
            continue
        elapsed = time.time() - args.t0
        if elapsed > args.budget_s:
            doc = json.loads(path.read_text())
            doc["stopped_at"] = {"index": i, "elapsed_s": round(elapsed, 1), "left": len(grid) - i}
            _save(path, doc)
            print(f"budget spent at config {i} of {len(grid)} ({elapsed:.0f} s)", flush=True)
            break
        before = len(json.loads(path.read_text())["rows"])
        cmd = [*_worker_command(args, gpus, name), "--index", str(i)]
        try:
            rc = run_in_group(cmd, cwd=ROOT, env=env, timeout=args.config_timeout_s).returncode
            status = "killed" if rc else None
        except subprocess.TimeoutExpired:
            status = "timeout"
        if "nvme" in (c.offload_optimizer, c.offload_param):  # the next config starts on an empty drive
            shutil.rmtree(nvme_swap_dir(), ignore_errors=True)
        doc = json.loads(path.read_text())
        if len(doc["rows"]) == before:  # the process died before writing its row
            card = card_for_cap(hw.min_gpu_memory_bytes or 0, c.cap_gib, gpus, c.strategy(gpus))
            row = Row(config=asdict(c), world=gpus, seq_len=c.seq_or(seq), status=status or "killed")
            row.predicted = predict(hw, bench_spec(c.model), c, gpus, c.seq_or(seq), card)
            row.finished_at = round(time.time(), 1)
            doc["rows"].append(asdict(row))
            _save(path, doc)
            print(f"[{i + 1}/{len(grid)}] {c.model}: {row.status}", flush=True)
    return 0


def _worker_command(args: argparse.Namespace, gpus: int, name: str) -> list[str]:
    """The worker's command line: the DeepSpeed launcher over ``gpus`` ranks, or, for one GPU and one process per
    config, the script itself (init_distributed reads the rank from the environment: no launcher start)."""
    direct = args.family in PER_PROCESS_FAMILIES and gpus == 1 and not args.smoke
    launcher = [
        "-m",
        "deepspeed.launcher.runner",
        *(["--include", f"localhost:{args.include}"] if args.include else ["--num_gpus", str(gpus)]),
        "--master_port",
        str(args.master_port),
        "--no_local_rank",
    ]
    cmd = [
        sys.executable,
        *([] if direct else launcher),
        str(Path(__file__).resolve()),
        "--worker",
        "--out",
        str(args.out),
        "--name",
        name,
        "--budget-s",
        str(args.budget_s),
        "--t0",
        str(args.t0),
        "--collective-timeout-s",
        str(args.collective_timeout_s),
        "--tiers",
        args.tiers,
        "--family",
        args.family,
    ]
    if args.smoke:
        cmd.append("--smoke")
    if args.ds_fused_adam:
        cmd.append("--ds-fused-adam")
    if args.peak_anatomy:
        cmd.append("--peak-anatomy")
    if args.segment_growth:
        cmd.append("--segment-growth")
    if args.gpu_busy:
        cmd.append("--gpu-busy")
    if args.host_while_idle:
        cmd.append("--host-while-idle")
    for item in args.zero_set or ():
        cmd += ["--zero-set", item]
    return cmd


def launch(args: argparse.Namespace) -> int:
    """One DeepSpeed launcher start for all configs: the same script as a worker on every rank (--family zero3:
    one process per config)."""
    gpus = 2 if args.smoke else args.gpus
    name = _raw_name(args, gpus)
    env = repo_env()
    if args.smoke:
        env.setdefault("CUDA_VISIBLE_DEVICES", "")
    if args.family in PER_PROCESS_FAMILIES:
        if gpus == 1 and not args.smoke:
            env.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1")
            env["MASTER_PORT"] = str(args.master_port)
        rc = launch_per_process(args, gpus, name, env)
        analyze([Path(args.out) / name], Path(args.out))
        return rc
    cmd = _worker_command(args, gpus, name)
    print(" ".join(cmd), flush=True)
    proc = run_in_group(cmd, cwd=ROOT, env=env, timeout=None)
    path = Path(args.out) / name
    if path.exists():
        analyze([path], Path(args.out))
    return proc.returncode


# ----------------------------------------------------------------------------------------------------- analysis


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    if not s:
        return math.nan
    k = (len(s) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def _cfg(row: dict[str, Any]) -> Config:
    return _config(row["config"])


def _config(c: dict[str, Any]) -> Config:
    """A Config from its JSON form (tags are a list there)."""
    zero = tuple((str(k), int(v)) for k, v in c.get("zero", ()))
    return Config(**{**c, "tags": tuple(c.get("tags", ())), "zero": zero})


def run_expandable(doc: dict[str, Any]) -> bool:
    """Whether a raw file's ranks ran PyTorch's allocator with expandable segments (its recorded alloc_conf)."""
    return expandable_segments({"PYTORCH_CUDA_ALLOC_CONF": doc.get("alloc_conf") or ""})


def _repredict(row: dict[str, Any], hw: HardwareReport, expandable: bool = False) -> dict[str, Any]:
    """Predictions for a recorded row with the calibration as it is now (recalibrate, then re-analyze), for the
    model as its file built it (``built_with_cache``)."""
    cfg = _cfg(row)
    card = card_for_cap(hw.min_gpu_memory_bytes or 0, cfg.cap_gib, row["world"], cfg.strategy(row["world"]))
    with built_with_cache(row_use_cache(row)):
        return predict(hw, bench_spec(cfg.model), cfg, row["world"], row["seq_len"], card, expandable)


def build_set_the_peak(r: dict[str, Any]) -> bool:
    """A row with offloaded parameters read before Row.init_allocated existed whose peak the model's build set: its
    max-allocated and max-reserved are the whole 16-bit model built on the GPU before DeepSpeed offloaded it, not
    what training holds (run_config). Known where Row.peak_grew_at last grew at "init"; in a row read before that
    log existed, where the peak is the model's 16-bit parameters or up to BUILD_PEAK_TOLERANCE above (llama-3b's
    build peaked at 6.431 GiB for 6.382 GiB of parameters, the buffers beside them). The analysis counts no memory
    for it."""
    if r.get("init_allocated") is not None or r["config"].get("offload_param", "none") == "none":
        return False
    grew = r.get("peak_grew_at")
    if grew:
        return bool(grew[-1][1] == "init")
    peak = r.get("max_allocated")
    if peak is None:
        return False
    build = 2 * bench_spec(r["config"]["model"]).total_params  # every row of the bench trains in bf16
    # at or just above the parameters (the build's buffers): training's own peaks at those micro-batches fall below
    # (llama-3b at 4 from initialize: 0.94 of them)
    return 0 <= peak / build - 1 <= BUILD_PEAK_TOLERANCE


BUILD_PEAK_TOLERANCE = 0.02


def build_in_the_cache(r: dict[str, Any]) -> bool:
    """A row with offloaded parameters read before Row.init_allocated existed: its peak allocation may be training's,
    but its max-reserved still holds the blocks the 16-bit model was built in on the GPU before DeepSpeed offloaded
    it, which the allocator kept cached (run_config keeps the build apart since). The analysis judges its allocation,
    not its device memory: a share of the gathered parameters fit on such rows put the readings counted from
    initialize +46 % over at the median (docs/measurements.md, "The side streams' pools, tested against their
    settings")."""
    return (
        r.get("init_allocated") is None
        and r["config"].get("offload_param", "none") != "none"
        and r.get("status") == "ok"
        and r.get("max_reserved") is not None
    )


def _merge_runs(docs: list[dict[str, Any]]) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """One run per (world, smoke, allocator settings, kind of GPU) over every raw file given. A config read in
    several processes (the same Config.key() and use_cache build, in one file or in several) keeps every reading as
    a row of its own:
    the analysis counts a config at the median of its readings (_reading_key), and a second reading must not hide the
    first (GPU-bound configs read ~7 % apart between machines, host-bound ones up to 1.8x between processes). Where
    the readings of one key (a repeat number makes a key of its own) disagree on whether it ran (ok / out of memory),
    the newest outcome stands -- its finished_at, else its file's start, else the later file on the command line --
    and the readings of the other outcome are dropped; a reading that failed for another reason (error, timeout,
    killed) stands only where nothing else was read. Tags are the union."""
    groups: dict[tuple[Any, ...], list[tuple[int, dict[str, Any]]]] = {}
    for i, doc in enumerate(docs):
        # The allocator settings make runs of their own: a config read with expandable_segments never stands in for
        # its reading with the default allocator the planner predicts. So does each kind of GPU: a run is predicted
        # for one machine's hardware, and an H100's readings are not an H200's.
        # A process narrowed to some of the host's CPUs (--cpus) is a host of its own too: its offloaded steps are
        # predicted with those cores and judged apart from the machine's whole host.
        key = (doc["world"], bool(doc.get("smoke")), doc.get("alloc_conf"), gpu_kind(doc), narrowed_cpus(doc))
        groups.setdefault(key, []).append((i, doc))
    out = []
    for members in groups.values():
        readings: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        for i, doc in members:
            for r in doc["rows"]:
                r = {
                    **r,
                    "config": dict(r["config"]),
                    "source": i,
                    "use_cache": bool(doc.get("use_cache", False)),
                }
                r["_when"] = (r.get("finished_at") or 0.0, doc.get("started_at") or doc.get("date") or "", i)
                if build_set_the_peak(r):
                    r.update(max_allocated=None, max_reserved=None, memory_set_by_build=True)
                elif build_in_the_cache(r):
                    r.update(max_reserved=None, reserved_held_build=True)
                # A config built with and without use_cache is two configs (their activations differ): a reading of
                # one never stands for the other (Pythia-1B ZeRO-1 at micro-batch 34 ran out of memory built without
                # it and ran built with it).
                readings.setdefault((*_cfg(r).key(), r["use_cache"]), []).append(r)
        rows: list[dict[str, Any]] = []
        for group in readings.values():
            measured = [r for r in group if r["status"] in ("ok", "oom")] or group
            outcome = max(measured, key=lambda r: r["_when"])["status"]
            kept = sorted((r for r in measured if r["status"] == outcome), key=lambda r: r["_when"])
            tags = list(dict.fromkeys(t for r in group for t in r["config"]["tags"]))
            for r in kept:
                r["config"]["tags"] = tags
            rows += kept
        head = dict(members[-1][1])
        head["sources"] = [
            {
                "date": d.get("date"),
                "rows": len(d["rows"]),
                "tiers": d.get("tiers"),
                "alloc_conf": d.get("alloc_conf"),
            }
            for _, d in members
        ]
        head["grid_size"] = sum(d.get("grid_size", 0) for _, d in members)
        # the newest file's optimizer is not every row's: name each (a row's label says which it ran)
        optimizers = list(dict.fromkeys(str(d.get("optimizer")) for _, d in members if d.get("optimizer")))
        if len(optimizers) > 1:
            head["optimizer"] = " / ".join(optimizers) + " (the rows' labels say which)"
        head["stopped_at"] = next((d["stopped_at"] for _, d in members if d.get("stopped_at")), None)
        out.append((head, rows))
    return out


def report_stem(paths: list[Path], name: str | None = None) -> str:
    """The name an analysis writes its report under: --report-name, else the raw file's (+ -merged for several)."""
    return name or (paths[0].stem if len(paths) == 1 else f"{paths[0].stem}-merged")


def analyze(paths: list[Path], out_dir: Path | None = None, name: str | None = None) -> dict[str, Any]:
    docs = [json.loads(p.read_text()) for p in paths]
    summary: dict[str, Any] = {"inputs": [str(p) for p in paths], "per_run": []}
    md = ["# Planner accuracy on real DeepSpeed steps", ""]
    for doc, every in _merge_runs(docs):
        hw = HardwareReport.from_dict(doc["hardware"])
        expandable = run_expandable(doc)
        # the thin family's shapes measure the host's share of a step; nobody trains them: they count in the
        # repeatability section only, never against the targets, the fit checks or a refit
        for r in every:
            r["now"] = _repredict(r, hw, expandable)
        rows = [r for r in every if not is_diagnostic(r["config"])]
        diagnostic = [r for r in every if is_diagnostic(r["config"])]
        ok = [r for r in rows if r["status"] == "ok"]
        mem_rows = [r for r in ok if r.get("max_allocated") is not None]
        err_alloc = [r["now"]["allocated"] / r["max_allocated"] - 1 for r in mem_rows]
        err_res = [r["now"]["reserved"] / r["max_reserved"] - 1 for r in mem_rows if r.get("max_reserved")]
        under_res = [
            r for r in mem_rows if r.get("max_reserved") and r["now"]["reserved"] < r["max_reserved"]
        ]
        ds_rows = [r for r in mem_rows if r["now"]["ds_estimate_gpu"] is not None]
        err_ds = [r["now"]["ds_estimate_gpu"] / r["max_allocated"] - 1 for r in ds_rows]
        err_tps = [
            r["now"]["tokens_per_sec"] / r["tokens_per_sec"] - 1 for r in ok if r.get("tokens_per_sec")
        ]
        outside = [r["outside_allocator"] for r in mem_rows if r.get("outside_allocator") is not None]
        run: dict[str, Any] = {
            "world": doc["world"],
            "gpu": gpu_kind(doc),
            "rows": len(rows),
            "diagnostic_rows": len(diagnostic),
            "ok": len(ok),
            "oom": sum(r["status"] == "oom" for r in rows),
            "error": sum(r["status"] not in ("ok", "oom") for r in rows),  # error, timeout, killed
            "stopped_at": doc.get("stopped_at"),
            "sources": doc.get("sources"),
            "memory_allocated_abs_error_median": _pct([abs(e) for e in err_alloc], 0.5),
            "memory_allocated_abs_error_p95": _pct([abs(e) for e in err_alloc], 0.95),
            "memory_allocated_signed_error_median": _pct(err_alloc, 0.5),
            "memory_reserved_abs_error_median": _pct([abs(e) for e in err_res], 0.5),
            "memory_reserved_abs_error_p95": _pct([abs(e) for e in err_res], 0.95),
            "memory_reserved_under_predicted": [_label(r) for r in under_res],
            "deepspeed_estimator_abs_error_median": _pct([abs(e) for e in err_ds], 0.5),
            "deepspeed_estimator_abs_error_p95": _pct([abs(e) for e in err_ds], 0.95),
            "deepspeed_estimator_rows": len(err_ds),
            "tokens_per_sec_abs_error_median": _pct([abs(e) for e in err_tps], 0.5),
            "tokens_per_sec_abs_error_p95": _pct([abs(e) for e in err_tps], 0.95),
            "outside_allocator_median_bytes": _pct([float(x) for x in outside], 0.5) if outside else None,
        }
        run["families"] = families(ok)
        run["family_targets"] = family_targets(run["families"])
        run["recommendations"] = _recommendations(rows, hw, doc["world"])
        for entry in run["recommendations"]:
            entry["same_run"] = _same_run_ratio(
                docs, summary["inputs"], entry, doc["world"], doc.get("alloc_conf")
            )
        run["fit_checks"] = _fit_checks(rows, hw, doc["world"], expandable)
        run["margin"] = _margin_checks(rows, hw, doc["world"], run["recommendations"])
        run["fits"] = _fit_suggestions(mem_rows, ok, hw, [r for r in rows if r["status"] == "oom"])
        summary["per_run"].append(run)
        md += _markdown_run(doc, run, rows, diagnostic)
    summary["repeatability"] = repeatability(docs)
    md += _markdown_repeatability(summary["repeatability"])
    summary["host_speed"] = host_speed_effect(docs)
    md += _markdown_host_speed(summary["host_speed"])
    targets = _targets(summary["per_run"])
    summary["targets"] = targets
    md += ["## Targets (issue 3)", "", "| target | value | met |", "|---|---|---|"]
    for target, (value, met) in targets.items():
        md.append(f"| {target} | {value} | {'?' if met is None else 'yes' if met else 'NO'} |")
    md.append("")
    text = "\n".join(md)
    print(text)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        stem = report_stem(paths, name)
        (out_dir / f"{stem}.md").write_text(text)
        (out_dir / f"{stem}-summary.json").write_text(
            json.dumps(summary, indent=1, sort_keys=True, default=str) + "\n"
        )
        print(f"wrote {out_dir / (stem + '.md')} and {stem}-summary.json")
    return summary


# ---- how far apart readings of one config fall


def _reading_group_key(doc: dict[str, Any], r: dict[str, Any]) -> tuple[Any, ...]:
    """What makes two raw rows readings of one config: its Config.key() but the repeat number (tags and tier are
    not in it; the seq is the row's seq_len), on the same world size, allocator settings and kind of GPU. Not the
    use_cache build: it changes the activations' memory, not the step's time (the throughput model does not read
    it)."""
    c = replace(_cfg(r), repeat=0, seq=None)
    return (c.key(), r["seq_len"], r["world"], doc.get("alloc_conf"), gpu_kind(doc))


def host_timed_rows(
    docs: list[dict[str, Any]], probes: Sequence[str] = ("autograd_tiny",)
) -> list[tuple[HardwareReport, dict[str, Any], str]]:
    """(hardware, row, GPU kind) of every judged row (ok, tokens/s timed, not diagnostic) of the runs that are not
    smoke runs whose host reading (Row.host_us) has each of ``probes``: the rows as the analysis merges them
    (``_merge_runs``: each with its file's use_cache build)."""
    out = []
    for doc, every in _merge_runs(docs):
        if doc.get("smoke"):
            continue
        hw, kind = HardwareReport.from_dict(doc["hardware"]), gpu_kind(doc) or "?"
        for r in every:
            readings = r.get("host_us") or {}
            if r["status"] != "ok" or not r.get("tokens_per_sec") or is_diagnostic(r["config"]):
                continue
            if all(readings.get(p) for p in probes):
                out.append((hw, r, kind))
    return out


def host_speed_effect(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The tokens/s error of every judged row that measured its host's speed before it ran (Row.host_us: a tiny
    autograd call's microseconds), against that speed: the rows in thirds from the fastest host to the slowest, each
    third's signed and absolute median error and the share of its predicted steps the planner says waits on the host;
    and the correlation of the error with the log of the host's time per call. The planner does not know the host's
    speed: it predicts one step for every host."""
    points = []
    for hw, r, kind in host_timed_rows(docs):
        tp = row_throughput(hw, r)
        us = float(r["host_us"]["autograd_tiny"])
        points.append((us, tp.tokens_per_sec / r["tokens_per_sec"] - 1, host_share(tp), kind))
    points.sort()
    thirds = []
    n = len(points)
    for lo, hi in ((0, n // 3), (n // 3, 2 * n // 3), (2 * n // 3, n)):
        part = points[lo:hi]
        if not part:
            continue
        errors = [e for _, e, _, _ in part]
        thirds.append(
            {
                "host_us": [part[0][0], part[-1][0]],
                "rows": len(part),
                "gpus": sorted({g for *_, g in part}),
                "signed_error_median": statistics.median(errors),
                "abs_error_median": statistics.median(abs(e) for e in errors),
                "host_share_median": statistics.median(h for _, _, h, _ in part),
            }
        )
    correlation = None
    if n >= 3:
        with contextlib.suppress(
            statistics.StatisticsError
        ):  # Pearson's; none where all hosts or errors are equal
            correlation = statistics.correlation(
                [math.log(us) for us, *_ in points], [e for _, e, _, _ in points]
            )
    return {"rows": n, "thirds": thirds, "correlation_log_host_us": correlation}


def _markdown_host_speed(effect: dict[str, Any]) -> list[str]:
    if not effect["thirds"]:
        return []
    corr = effect["correlation_log_host_us"]
    md = [
        "## The host's speed (Row.host_us)",
        "",
        f"Tokens/s error (signed: positive = over-predicts) of the {effect['rows']} judged rows that timed their host "
        "before they ran (a tiny autograd call, microseconds), in thirds from the fastest host to the slowest; "
        "the planner predicts one step whatever the host"
        + ("" if corr is None else f"; correlation of the error with log(host time per call): {corr:.2f}")
        + ":",
        "",
        "| host us per call | rows | GPUs | tok/s error median | abs median | planner's host share median |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for t in effect["thirds"]:
        md.append(
            f"| {t['host_us'][0]:.1f}-{t['host_us'][1]:.1f} | {t['rows']} | {', '.join(t['gpus'])} | "
            f"{t['signed_error_median'] * 100:+.1f} % | {t['abs_error_median'] * 100:.1f} % | "
            f"{t['host_share_median'] * 100:.0f} % |"
        )
    return [*md, ""]


def repeatability(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """Every config read in more than one process across the raw files (its repeats and its readings in
    several files): its readings' tokens/s, the spread (fastest / slowest - 1) and the share of its
    predicted step that waits on the host's Python (throughput.host_share). Host-bound configs (that share >=
    calibration.HOST_BOUND_SHARE) apart from the others: how close any prediction can come to one reading."""
    groups: dict[tuple[Any, ...], tuple[dict[str, Any], list[dict[str, Any]]]] = {}
    for doc in docs:
        if doc.get("smoke"):
            continue
        for r in doc["rows"]:
            if r["status"] == "ok" and r.get("tokens_per_sec"):
                groups.setdefault(_reading_group_key(doc, r), (doc, []))[1].append(r)
    configs = []
    for doc, rs in groups.values():
        if len(rs) < 2:
            continue
        first = rs[0]
        tp = row_throughput(HardwareReport.from_dict(doc["hardware"]), first)
        tps = sorted(r["tokens_per_sec"] for r in rs)
        label = _label({"config": {**first["config"], "repeat": 0, "seq": None}})
        configs.append(
            {
                "config": f"{label} seq{first['seq_len']}",
                "readings": len(tps),
                "tokens_per_sec": tps,
                "spread": tps[-1] / tps[0] - 1,
                "host_share": host_share(tp),
                "host_bound": host_bound(tp),
            }
        )
    configs.sort(key=lambda c: -c["spread"])

    def summary(cs: list[dict[str, Any]]) -> dict[str, Any]:
        spreads = [c["spread"] for c in cs]
        return {
            "configs": len(cs),
            "spread_median": _pct(spreads, 0.5) if spreads else None,
            "spread_max": max(spreads, default=None),
        }

    return {
        "configs": configs,
        "host_bound": summary([c for c in configs if c["host_bound"]]),
        "others": summary([c for c in configs if not c["host_bound"]]),
    }


def _markdown_repeatability(rep: dict[str, Any]) -> list[str]:
    if not rep["configs"]:
        return []
    md = [
        "## Repeatability: configs read in more than one process",
        "",
        "Each reading a process (an engine) of its own, in the same session or another; spread: fastest / slowest "
        "- 1; host share: what of the predicted step waits on the host (kernel launches, Python, ZeRO-3's hooks, "
        "stage 0's wrapper). "
        + "; ".join(
            f"{name}: {s['configs']} configs, spread median {_f(s['spread_median'], True)}, max "
            f"{_f(s['spread_max'], True)}"
            for name, s in (
                (f"host-bound (host share >= {cal.HOST_BOUND_SHARE:.0%})", rep["host_bound"]),
                ("the others", rep["others"]),
            )
            if s["configs"]
        )
        + ".",
        "",
        "| config | readings | tok/s | spread | host share |",
        "|---|---:|---|---:|---:|",
    ]
    for c in rep["configs"]:
        tps = ", ".join(f"{x:,.0f}" for x in c["tokens_per_sec"])
        md.append(
            f"| {c['config']} | {c['readings']} | {tps} | {_f(c['spread'], True)} | {c['host_share']:.0%} |"
        )
    return [*md, ""]


# ---- judging "does this config fit that card" from the measured rows


def _cap_bytes(label: str) -> int | None:
    return None if label == "full" else int(label.removesuffix("GiB")) * GiB


def _fits_at(r: dict[str, Any], cap: int | None) -> bool | None:
    """What row ``r`` says about its config on a card whose allocator is capped at ``cap`` (None: the whole card):
    True fits, False OOMs, None it does not tell. A run that fit a cap fits every larger one; an OOM under a cap
    (or on the whole card) OOMs under every smaller one; an uncapped run fits a cap its reserved memory stayed in."""
    if r["status"] not in ("ok", "oom") or (r["status"] == "ok" and r.get("max_allocated") is None):
        return None  # an error, or a run without a GPU (--smoke)
    ok = r["status"] == "ok"
    rc = r["config"]["cap_gib"] * GiB if r["config"]["cap_gib"] else None
    if rc == cap:
        return ok
    if cap is None:  # the whole card, from a capped row
        return True if ok else None
    if rc is None:  # a capped question, from an uncapped row
        if not ok:
            return False
        return True if (r.get("max_reserved") or 0) <= cap else None
    if ok:
        return True if rc <= cap else None
    return False if rc >= cap else None


def _strategy_key(c: dict[str, Any], seq: int) -> tuple[Any, ...]:
    return (
        c["model"], c["zero_stage"], c["offload_optimizer"], c["offload_param"], c["checkpointing"], seq,
        grad_accum(c), _row_optimizer(c),
    )  # fmt: skip


def _memory_twin(config: dict[str, Any], seq: int, world: int = 1) -> dict[str, Any] | None:
    """The config of the other stage that holds the same GPU memory, if any: ZeRO-1 <-> ZeRO-2 with the optimizer
    offloaded and the parameters not, where both peak in the forward (both send their gradients through the reduce
    bucket to the host and step on the CPU, stage_1_and_2.py, DeepSpeed 0.19.8; eight measured pairs peaked at
    byte-identical allocations). Not where the memory model puts the peak at the end of the backward, where stage 1
    still holds every 16-bit gradient (it reduces only after the backward without overlap_comm)."""
    if (
        config["offload_optimizer"] == "none"
        or config["offload_param"] != "none"
        or config["zero_stage"] not in (1, 2)
    ):
        return None
    twin = {**config, "zero_stage": 3 - config["zero_stage"]}
    model = bench_spec(config["model"])
    a, b = (
        estimate_memory(model, cfg.strategy(world), seq, row_buffers(cfg))
        for cfg in (_config(config), _config(twin))
    )
    return twin if (a.allocated, a.needed) == (b.allocated, b.needed) else None


def judge(
    rows: list[dict[str, Any]],
    config: dict[str, Any],
    cap: int | None,
    predicted_tps: float | None = None,
    seq: int = SEQ,
    world: int = 1,
) -> dict[str, Any]:
    """Does ``config`` (model, strategy, micro-batch) fit a card capped at ``cap``? "measured" from a row of that
    very micro-batch; else "inferred" from rows of the same strategy (a smaller micro-batch than one that fit also
    fits, a larger one than one that OOMed also OOMs); else "unknown". Tokens/s: measured at that micro-batch; else
    a lower bound from the largest smaller micro-batch measured (tokens/s does not fall as the micro-batch grows)
    and an estimate: the nearest measured micro-batch scaled by the throughput model (``predicted_tps`` over that
    row's prediction). With the optimizer offloaded (and the parameters not), ZeRO-1 and ZeRO-2 hold the same GPU
    memory where both peak in the forward (``_memory_twin``), so the rows of one judge the other's fit ("inferred")."""
    key, mbs = _strategy_key(config, seq), config["micro_batch"]
    same = [r for r in rows if _strategy_key(r["config"], r["seq_len"]) == key]
    twin = _memory_twin(config, seq, world)
    twins = (
        []
        if twin is None
        else [r for r in rows if _strategy_key(r["config"], r["seq_len"]) == _strategy_key(twin, seq)]
    )
    exact = [(r, _fits_at(r, cap)) for r in same if r["config"]["micro_batch"] == mbs]
    told = [f for _, f in exact if f is not None]
    twin_told = [
        f for r in twins if r["config"]["micro_batch"] == mbs and (f := _fits_at(r, cap)) is not None
    ]
    read = [r for r, _ in exact if r["status"] == "ok" and r.get("tokens_per_sec")]
    at_card = [r for r in read if (r["config"]["cap_gib"] or 0) * GiB == (cap or 0)]
    # a config read more than once counts at the median of its readings (at this card's cap where it ran there), as
    # the best row it is compared with does (_best_reading)
    tps = statistics.median(r["tokens_per_sec"] for r in at_card or read) if read else None
    kin = same + twins
    if told:
        how, fitted = "measured", told[0]
    elif twin_told:
        how, fitted = "inferred", twin_told[0]
    else:
        bigger_fit = any(r["config"]["micro_batch"] > mbs and _fits_at(r, cap) is True for r in kin)
        smaller_oom = any(r["config"]["micro_batch"] < mbs and _fits_at(r, cap) is False for r in kin)
        if bigger_fit and not smaller_oom:
            how, fitted = "inferred", True
        elif smaller_oom and not bigger_fit:
            how, fitted = "inferred", False
        else:
            how, fitted = "unknown", None
    bound = None
    if tps is None and fitted:
        below = [
            r
            for r in same
            if r["status"] == "ok" and r.get("tokens_per_sec") and r["config"]["micro_batch"] < mbs
        ]
        if below:
            bound = max(below, key=lambda r: r["config"]["micro_batch"])["tokens_per_sec"]
    estimate = None
    measured_tps = [r for r in same if r["status"] == "ok" and r.get("tokens_per_sec") and r.get("now")]
    if tps is None and fitted and predicted_tps and measured_tps:
        near = min(measured_tps, key=lambda r: abs(r["config"]["micro_batch"] - mbs))
        estimate = near["tokens_per_sec"] * predicted_tps / near["now"]["tokens_per_sec"]
        if (
            bound is not None
        ):  # never below a smaller micro-batch measured (a nearer reading of a slower machine)
            estimate = max(estimate, bound)
    return {
        "how": how,
        "fits": fitted,
        "tokens_per_sec": tps,
        "tokens_per_sec_at_least": bound,
        "tokens_per_sec_estimated": estimate,
    }


def readings_by_config(rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """``rows`` grouped into the readings of one config each (_reading_key), in the order first seen."""
    by_config: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        by_config.setdefault(_reading_key(r), []).append(r)
    return list(by_config.values())


def _best_reading(fitting: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, float | None]:
    """The fastest config among ``fitting`` rows and its tokens/s, a config read more than once (_reading_key) at the
    median of its readings: the largest of several noisy readings would set the bar above what any one run of the
    recommended config is expected to reach."""
    medians = [
        (statistics.median(r["tokens_per_sec"] for r in rs), rs[0]) for rs in readings_by_config(fitting)
    ]
    if not medians:
        return None, None
    tps, row = max(medians, key=lambda m: m[0])
    return row, tps


def _best_against(
    fitting: list[dict[str, Any]], config: dict[str, Any], seq: int, tps: float | None
) -> tuple[dict[str, Any] | None, float | None]:
    """The best config among ``fitting`` for a recommendation ``config`` that measured ``tps`` (judge's figure):
    the recommended config's own readings count once, as judge counts them (at any cap), never again among the
    others -- a second reading of itself under another cap would otherwise set the bar."""
    itself = (_strategy_key(config, seq), config["micro_batch"])
    others = [
        r for r in fitting if (_strategy_key(r["config"], r["seq_len"]), r["config"]["micro_batch"]) != itself
    ]
    best, best_tps = _best_reading(others)
    if tps is not None and (best_tps is None or tps >= best_tps):
        return {"config": config}, tps
    return best, best_tps


def _best_fields(best: dict[str, Any] | None, best_tps: float | None) -> dict[str, Any]:
    return {
        "best_in_grid": None if best is None else _describe(best["config"]),
        "best_tokens_per_sec": best_tps,
    }


def _recommendations(rows: list[dict[str, Any]], hw: HardwareReport, world: int) -> list[dict[str, Any]]:
    """Per (model, card) the run recommended for: today's recommendation (re-planned with the calibration as it is
    now), judged against the measured rows, vs the best measured row that fits that card."""
    out = []
    # One entry per (model, card, sequence), re-planned for the model as its newest recommendation row built it (rows
    # of one pair from before and after USE_CACHE would otherwise judge two recommendations for one card).
    pairs: dict[tuple[str, str, int], tuple[float, bool]] = {}
    for r in rows:
        for t in r["config"]["tags"]:
            if t.startswith("rec:"):
                key = (r["config"]["model"], t.split(":", 1)[1], r["seq_len"])
                newest = (r.get("finished_at") or 0.0, row_use_cache(r))
                pairs[key] = max(pairs.get(key, newest), newest)
    for (model, label, seq), (_, use_cache) in pairs.items():
        cap = _cap_bytes(label)
        with built_with_cache(use_cache):  # the recommendation for the model as the measured rows built it
            p = plan_for_card(hw, model, None if cap is None else cap // GiB, world, seq)
        best_c = p.best if p is not None else None
        fitting = [
            r
            for r in rows
            if r["config"]["model"] == model
            and r["seq_len"] == seq
            and r.get("tokens_per_sec")
            and _fits_at(r, cap)
            # the planner recommends for one optimizer step per micro-batch (no global batch asked for): a row that
            # accumulates spreads its optimizer step over more tokens, which no recommendation here can do
            and grad_accum(r["config"]) == 1
            and _row_optimizer(r["config"]) == Config.optimizer  # stepped as the recommendations are
        ]
        entry: dict[str, Any] = {"model": model, "card": label, "grid_rows_fitting": len(fitting)}
        if best_c is None:
            entry.update(
                _best_fields(*_best_reading(fitting)),
                recommended=None,
                how="unknown",
                fits=None,
                status="nothing fits (planner)",
            )
            out.append(entry)
            continue
        s = best_c.strategy
        config = asdict(
            Config(
                model,
                s.zero_stage,
                s.offload_optimizer,
                s.offload_param,
                s.activation_checkpointing,
                s.micro_batch_size,
                None if cap is None else cap // GiB,
                seq=None if seq == SEQ else seq,
            )
        )
        # the recommendation was planned for this build
        built = [r for r in rows if row_use_cache(r) == use_cache]
        j = judge(built, config, cap, best_c.predicted.tokens_per_sec, seq, world)
        tps, bound, est = j["tokens_per_sec"], j["tokens_per_sec_at_least"], j["tokens_per_sec_estimated"]
        best, best_tps = _best_against(fitting, config, seq, tps)
        entry.update(_best_fields(best, best_tps))
        entry.update(
            recommended_config={**config, "seq_len": seq},
            best_config=None if best is None else {**best["config"], "seq_len": best.get("seq_len", seq)},
        )
        status = {True: "ok", False: "oom", None: "?"}[j["fits"]]
        entry.update(
            recommended=_describe(config),
            how=j["how"],
            fits=j["fits"],
            status=status if j["how"] == "measured" else f"{status} ({j['how']})",
            recommended_tokens_per_sec=tps,
            recommended_tokens_per_sec_at_least=bound,
            ratio=None if (tps is None or not best_tps) else round(min(1.0, tps / best_tps), 3),
            ratio_at_least=None if (bound is None or not best_tps) else round(min(1.0, bound / best_tps), 3),
            recommended_tokens_per_sec_estimated=est,
            ratio_estimated=None if (est is None or not best_tps) else round(min(1.0, est / best_tps), 3),
        )
        out.append(entry)
    return out


def one_gpu_run(docs: list[dict[str, Any]]) -> tuple[HardwareReport, list[dict[str, Any]]]:
    """The merged one-GPU run of ``docs`` (_merge_runs) and its hardware, for a fit that predicts every row with one
    machine's: SystemExit where the files hold one-GPU runs of several kinds of GPU (fit one kind at a time), or
    none."""
    runs = [(d, rows) for d, rows in _merge_runs(docs) if d["world"] == 1 and not d.get("smoke")]
    if len(runs) != 1:
        kinds = ", ".join(str(gpu_kind(d)) for d, _ in runs) or "none"
        raise SystemExit(
            f"the raw files hold one-GPU runs of {len(runs)} kinds of GPU ({kinds}); fit one kind"
        )
    doc, rows = runs[0]
    return HardwareReport.from_dict(doc["hardware"]), rows


def gpu_kind(doc: dict[str, Any]) -> str | None:
    """The name of a raw file's first GPU (None for a file without one: the CPU smoke run)."""
    gpus = doc.get("hardware", {}).get("gpus", [])
    return str(gpus[0].get("name")) if gpus else None


def narrowed_cpus(doc: dict[str, Any]) -> int | None:
    """The CPUs a raw file's processes were narrowed to (--cpus: HostInfo.usable_cores below the host's logical
    CPUs), else None."""
    host = HardwareReport.from_dict(doc.get("hardware", {})).host
    return host.usable_cores if host.restricted else None


def machine_of(doc: dict[str, Any], index: int) -> str:
    """Which machine a raw file was read on: its GPUs' UUIDs (one launch runs on one machine), else the file itself."""
    uuids = [g.get("uuid") for g in doc.get("hardware", {}).get("gpus", []) if g.get("uuid")]
    return ",".join(uuids) if uuids else f"file {index}"


def _same_run_ratio(
    docs: list[dict[str, Any]], paths: list[str], entry: dict[str, Any], world: int, alloc_conf: str | None
) -> dict[str, Any] | None:
    """The recommendation's tokens/s over the best config's, read on one machine (the GPUs of the raw files, their
    UUIDs): machines of one kind ran one GPU-bound config about 7 % apart (PAIR_CONFIGS), so the pooled ratio can
    carry the machines' difference. Per machine that read both, each side at the median of its readings there; over
    such machines, the median of their ratios. None where no machine read both, or the recommendation is the best."""
    rec, best = entry.get("recommended_config"), entry.get("best_config")
    if rec is None or best is None:
        return None
    want = {"rec": _reading_key({"config": rec, "seq_len": rec["seq_len"]}),
            "best": _reading_key({"config": best, "seq_len": best["seq_len"]})}  # fmt: skip
    if want["rec"] == want["best"]:
        return None
    machines: dict[str, dict[str, Any]] = {}
    for i, doc in enumerate(docs):
        if doc.get("smoke") or doc["world"] != world or doc.get("alloc_conf") != alloc_conf:
            continue
        m = machines.setdefault(machine_of(doc, i), {"rec": [], "best": [], "files": []})
        for r in doc["rows"]:
            if r["status"] == "ok" and r.get("tokens_per_sec"):
                for side, key in want.items():
                    if _reading_key(r) == key:
                        m[side].append(r["tokens_per_sec"])
                        if paths[i] not in m["files"]:
                            m["files"].append(paths[i])
    both = [
        {
            "machine": name,
            "ratio": round(min(1.0, statistics.median(m["rec"]) / statistics.median(m["best"])), 3),
            "recommended_tokens_per_sec": m["rec"],
            "best_tokens_per_sec": m["best"],
            "files": m["files"],
        }
        for name, m in machines.items()
        if m["rec"] and m["best"]
    ]
    if not both:
        return None
    return {"ratio": round(statistics.median(x["ratio"] for x in both), 3), "machines": both}


def _fit_checks(
    rows: list[dict[str, Any]], hw: HardwareReport, world: int, expandable: bool = False
) -> dict[str, Any]:
    """Every (row, card) the measurements decide -- the row's own cap (or the whole card), and the bench's caps an
    uncapped row's reserved memory stayed within -- against the memory model's "fits" (with the planner's margin
    and without). "unsafe": predicted to fit with the margin, measured OOM (must be none)."""
    total = hw.min_gpu_memory_bytes or 0
    caps: list[int | None] = [None] + [c * GiB for c in CAPS_GIB if c is not None and c * GiB < total]
    checks = []
    for r in rows:
        cfg = _cfg(r)
        with built_with_cache(row_use_cache(r)):
            mem = estimate_memory(
                bench_spec(cfg.model),
                cfg.strategy(r["world"]),
                r["seq_len"],
                row_buffers(cfg),
                expandable_segments=expandable,
            )
        own = r["config"]["cap_gib"] * GiB if r["config"]["cap_gib"] else None
        for cap in caps:
            measured = _fits_at(r, cap)
            if measured is None or (cap != own and not (own is None and r["status"] == "ok")):
                continue  # beyond its own cap, only an uncapped run that fit tells something new
            card = card_for_cap(total, None if cap is None else cap // GiB, world, cfg.strategy(world))
            checks.append(
                {
                    "config": _label(r),
                    "card": "full" if cap is None else f"{cap // GiB}GiB",
                    "fits": measured,
                    "predicted_with_margin": mem.needed <= card * (1 - cal.DEFAULT_SAFETY_MARGIN),
                    "predicted_without_margin": mem.needed <= card,
                }
            )
    unsafe = [c for c in checks if c["predicted_with_margin"] and not c["fits"]]
    unsafe_no_margin = [c for c in checks if c["predicted_without_margin"] and not c["fits"]]
    conservative = [c for c in checks if not c["predicted_with_margin"] and c["fits"]]
    return {
        "checks": len(checks),
        "unsafe": unsafe,
        "unsafe_without_margin": unsafe_no_margin,
        "conservative": len(conservative),
        "agree": len(checks) - len(unsafe) - len(conservative),
    }


def _fit_suggestions(
    mem_rows: list[dict[str, Any]],
    ok: list[dict[str, Any]],
    hw: HardwareReport,
    oom_rows: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """Measured vs predicted bytes per extra sample and fixed bytes, per (model, strategy); the median ratios are
    what to multiply the activation constants (LOSS_HEAD_BYTES_PER_VOCAB, the recipes) by. Also the share of the
    the allocator-cache constants refit (``fit_allocator_cache``)."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in mem_rows:
        c = r["config"]
        groups.setdefault(
            (c["model"], c["zero_stage"], c["offload_optimizer"], c["checkpointing"], grad_accum(c)), []
        ).append(r)
    slopes, per_group = [], []
    for key, rs in sorted(groups.items(), key=str):
        xs = sorted({r["config"]["micro_batch"] for r in rs})
        if len(xs) < 2:
            continue
        lo = min(rs, key=lambda r: r["config"]["micro_batch"])
        hi = max(rs, key=lambda r: r["config"]["micro_batch"])
        db = hi["config"]["micro_batch"] - lo["config"]["micro_batch"]
        meas_slope = (hi["max_allocated"] - lo["max_allocated"]) / db
        pred_slope = (hi["now"]["allocated"] - lo["now"]["allocated"]) / db
        meas_fixed = lo["max_allocated"] - meas_slope * lo["config"]["micro_batch"]
        pred_fixed = lo["now"]["allocated"] - pred_slope * lo["config"]["micro_batch"]
        ratio = meas_slope / pred_slope if pred_slope else math.nan
        slopes.append((key[3], ratio))
        per_group.append(
            {
                "group": list(key),
                "measured_per_sample": meas_slope,
                "predicted_per_sample": pred_slope,
                "measured_fixed": meas_fixed,
                "predicted_fixed": pred_fixed,
                "slope_ratio": ratio,
            }
        )
    tps_ratio = [r["tokens_per_sec"] / r["now"]["tokens_per_sec"] for r in ok if r.get("tokens_per_sec")]
    return {
        "compute": _fit_compute(ok),
        "throughput": fit_throughput(ok, hw),
        "optimizer_step": fit_optimizer_step(ok, hw),
        "allocator_cache": fit_allocator_cache(mem_rows, oom_rows),
        "groups": per_group,
        "activation_scale_no_ckpt": _pct([x for ck, x in slopes if not ck], 0.5),
        "activation_scale_ckpt": _pct([x for ck, x in slopes if ck], 0.5),
        "measured_over_predicted_tokens_per_sec_median": _pct(tps_ratio, 0.5),
    }


CACHE_CONSTANTS = (
    "RESERVED_FIXED_BYTES",
    "STEP_BLOCK_SHARE",
    "STEP_BLOCK_SHARE_CHECKPOINTING",
    "LOGITS_SHARE",
    "LOGITS_SHARE_CHECKPOINTING",
    "FORWARD_TRANSIENT_SHARE_AT_STEP",
)


def measured_device(r: dict[str, Any]) -> float | None:
    """What the device held: reserved + outside the allocator (CUDA context, NCCL)."""
    if not r.get("max_reserved") or r.get("outside_allocator") is None:
        return None
    return float(r["max_reserved"] + r["outside_allocator"])


def predicted_device(r: dict[str, Any], reserved: float) -> float:
    """The prediction a measured row can show: under an allocator cap the reserved memory stops at the cap (the
    allocator gives its cache back before it fails), so a prediction above the cap counts as the cap."""
    cap = r["config"].get("cap_gib")
    if cap:
        reserved = min(reserved, cap * GiB)
    return reserved + r["now"]["device"] - r["now"]["reserved"]


def fit_allocator_cache(
    mem_rows: list[dict[str, Any]],
    oom_rows: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """Refit CACHE_CONSTANTS (wizard.planner.memory.fragmentation) to the measured device memory of the training
    rows: least squares of the relative error beyond 5 % plus a small pull on all of it, and a heavy penalty where a
    row that ran out of memory under a cap would be predicted to stay under it; Nelder-Mead. What to write into
    wizard/planner/calibration.py; the module's constants are restored afterwards."""
    rows = [r for r in mem_rows if measured_device(r) and _cfg(r).strategy(r["world"]).mode == "train"]
    if len(rows) < len(CACHE_CONSTANTS) + 2:
        return {}
    cases = [(bench_spec(r["config"]["model"]), _cfg(r), r) for r in rows]
    # Rows that ran out of memory bound the fit from below: their reserved memory would have passed what the card
    # (or the cap) left the allocator.
    ooms = [(bench_spec(r["config"]["model"]), _cfg(r), r) for r in oom_rows if r.get("now")]
    saved = {n: _get_constant(n) for n in CACHE_CONSTANTS}

    def short_of_oom() -> list[float]:
        out = []
        for m, c, r in ooms:
            s = c.strategy(r["world"])
            reserved = estimate_memory(
                replace(m, use_cache=row_use_cache(r)), s, r["seq_len"], row_buffers(c)
            ).reserved
            now = r["now"]
            limit = now["card_bytes"] - (now["device"] - now["reserved"])
            out.append(max(0.0, 1.0 - reserved / limit))
        return out

    def errors() -> list[float]:
        out = []
        for m, c, r in cases:
            s = c.strategy(r["world"])
            reserved = estimate_memory(
                replace(m, use_cache=row_use_cache(r)), s, r["seq_len"], row_buffers(c)
            ).reserved
            out.append(predicted_device(r, reserved) / measured_device(r) - 1)  # type: ignore[operator]
        return out

    def loss(x: list[float]) -> float:
        for n, v in zip(CACHE_CONSTANTS, x, strict=True):
            _set_constant(n, int(abs(v) * GiB) if n == "RESERVED_FIXED_BYTES" else abs(v))
        fit = sum(max(0.0, abs(e) - 0.05) ** 2 + 0.05 * e * e for e in errors())
        return fit + 100.0 * sum(x * x for x in short_of_oom())

    try:
        before = errors()
        x0 = [saved[n] / GiB if n == "RESERVED_FIXED_BYTES" else saved[n] for n in CACHE_CONSTANTS]
        x, _ = _nelder_mead(loss, x0, step=0.2)
        loss(x)
        after = errors()
        fitted = {n: _get_constant(n) for n in CACHE_CONSTANTS}
    finally:
        for n, v in saved.items():
            _set_constant(n, int(v) if n == "RESERVED_FIXED_BYTES" else v)

    def spread(es: list[float]) -> dict[str, float]:
        a = [abs(e) for e in es]
        return {"median": _pct(a, 0.5), "p95": _pct(a, 0.95)}

    return {
        "rows": len(cases),
        "constants": fitted,
        "error_now": spread(before),
        "error_fitted": spread(after),
    }


def _fit_compute(ok: list[dict[str, Any]]) -> dict[str, Any]:
    """From stage 1/2 rows without offload or checkpointing on one GPU: seconds per extra sample and seconds per
    step at zero samples (the fixed part), per model, and the share of the peak the per-sample time reaches."""
    from wizard.planner.throughput import flops_per_token, peak_flops

    by_model: dict[str, list[tuple[int, float]]] = {}
    for r in ok:
        c = r["config"]
        if (
            r["world"] != 1
            or c["zero_stage"] not in (1, 2)
            or c["offload_optimizer"] != "none"
            or c["checkpointing"]
            or grad_accum(c) != 1
        ):
            continue
        by_model.setdefault(c["model"], []).append((c["micro_batch"], statistics.median(r["step_s"])))
    out = {}
    gpu = GPUInfo(index=0, name="H200", compute_capability=(9, 0), peak_tflops_bf16=989.4)
    peak, _ = peak_flops(gpu, "bf16")
    for name, xs in sorted(by_model.items()):
        if len({b for b, _ in xs}) < 2:
            continue
        n = len(xs)
        mb = sum(b for b, _ in xs) / n
        mt = sum(t for _, t in xs) / n
        slope = sum((b - mb) * (t - mt) for b, t in xs) / sum((b - mb) ** 2 for b, _ in xs)
        model = bench_spec(name)
        out[name] = {
            "seconds_per_sample": slope,
            "fixed_seconds_per_step": mt - slope * mb,
            "efficiency": SEQ * flops_per_token(model, SEQ) / (slope * peak) if slope > 0 else math.nan,
            "hidden": model.hidden,
            "params": model.total_params,
        }
    return {"per_model": out}


# The throughput constants the bench can refit (MATMUL_EFFICIENCY, the per-parameter optimizer time and the fixed
# shares of the unaligned cases stay as set: the rows do not tell them apart from the rest, see
# wizard/planner/calibration.py).
FIT_CONSTANTS = (
    "ACTIVATION_TRAFFIC_PER_SAVED_BYTE",
    "LOSS_HEAD_TRAFFIC_BYTES_PER_VOCAB",
    "FORWARD_SHARE_OF_TRAFFIC",
    "UNALIGNED_HEAD_MATMUL_SHARE",
    "ATTENTION_SHARE_SMALL_HEAD",
    "MICRO_STEP_SECONDS_PER_LAYER",
    "STAGE0_STEP_SECONDS",
    "STAGE3_SECONDS_PER_LAYER",
    "CPU_ADAM_SECONDS_PER_PARAM",
    "HOST_SECONDS_PER_LAYER[gpt2]",
    "HOST_SECONDS_PER_LAYER[llama]",
    "HOST_SECONDS_PER_LAYER[neox]",
    "STAGE3_SECONDS_PER_PARAM",
)
# The optimizer step's constants, fit to the timed step phase (fit_optimizer_step), not to whole steps: a whole step
# at one micro-step per optimizer step cannot tell them from the per-micro-step terms.
OPTIMIZER_STEP_CONSTANTS = (
    "OPTIMIZER_SECONDS_PER_LAYER",
    "STAGE0_SECONDS_PER_TENSOR",
    *(f"OPTIMIZER_SECONDS_PER_PARAM[{kind}]" for kind in cal.OPTIMIZER_SECONDS_PER_PARAM),
)
# How far (natural log) a fit may move a constant from where it started: a factor of e^12 (~160,000) either way.
FIT_LOG_RANGE = 12.0
# A constant set to 0 starts the fit from this value (a search over log values cannot start at 0).
_FIT_START_IF_ZERO = {
    "OPTIMIZER_SECONDS_PER_LAYER": 1e-3,
    "STAGE0_STEP_SECONDS": 1e-3,
    "HOST_SECONDS_PER_LAYER[gpt2]": 1e-4,
}


def _dict_key(name: str) -> tuple[str, Any] | None:
    """``"TABLE[key]"`` names one entry of a dict constant (an int key where it is digits)."""
    if not name.endswith("]") or "[" not in name:
        return None
    table, key = name[:-1].split("[", 1)
    return table, int(key) if key.isdigit() else key


def _get_constant(name: str) -> float:
    entry = _dict_key(name)
    if entry is not None:
        return float(getattr(cal, entry[0])[entry[1]])
    return float(getattr(cal, name))


def _set_constant(name: str, value: float) -> None:
    entry = _dict_key(name)
    if entry is not None:
        table, key = entry
        setattr(cal, table, {**getattr(cal, table), key: value})
    else:
        setattr(cal, name, value)


def _nelder_mead(f: Any, x0: list[float], step: float = 0.3, iters: int = 4000) -> tuple[list[float], float]:
    n = len(x0)
    pts = [list(x0)] + [[x + (step if i == j else 0.0) for j, x in enumerate(x0)] for i in range(n)]
    vals = [f(p) for p in pts]
    for _ in range(iters):
        order = sorted(range(n + 1), key=vals.__getitem__)
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        if vals[-1] - vals[0] < 1e-12:
            break
        c = [sum(p[j] for p in pts[:-1]) / n for j in range(n)]

        worst = pts[-1]

        def toward(a: float, c: list[float] = c, worst: list[float] = worst) -> list[float]:
            return [c[j] + a * (worst[j] - c[j]) for j in range(n)]

        xr = toward(-1.0)
        fr = f(xr)
        if fr < vals[0]:
            xe = toward(-2.0)
            fe = f(xe)
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = toward(0.5)
            fc = f(xc)
            if fc < vals[-1]:
                pts[-1], vals[-1] = xc, fc
            else:
                pts = [pts[0]] + [[pts[0][j] + 0.5 * (p[j] - pts[0][j]) for j in range(n)] for p in pts[1:]]
                vals = [vals[0]] + [f(p) for p in pts[1:]]
    best = min(range(n + 1), key=vals.__getitem__)
    return pts[best], vals[best]


def _fit_log(
    names: tuple[str, ...], predicted: Any, measured: list[float], step: float = 0.3, iters: int = 4000
) -> dict[str, Any]:
    """Least squares on log(predicted / measured) over the constants ``names`` (Nelder-Mead over their log values,
    from the values they have now, with ``step`` and ``iters``); ``predicted()`` predicts every case with the
    constants as set at the time. The module's constants are restored afterwards."""
    saved = {n: _get_constant(n) for n in names}

    def errors() -> list[float]:
        return [math.log(p / m) for p, m in zip(predicted(), measured, strict=True)]

    def loss(x: list[float]) -> float:
        # Along a constant the rows barely depend on, the loss keeps falling a little (or stays flat) without end,
        # and the search walked it off to exp() overflow (the thin family's 20 host-bound rows did): outside
        # FIT_LOG_RANGE of where it started a point is no better than any.
        if any(abs(v - v0) > FIT_LOG_RANGE for v, v0 in zip(x, x0, strict=True)):
            return math.inf
        for n, v in zip(names, x, strict=True):
            _set_constant(n, math.exp(v))
        return sum(e * e for e in errors())

    x0 = [math.log(saved[n] or _FIT_START_IF_ZERO.get(n, 1e-6)) for n in names]
    try:
        before = errors()
        x, _ = _nelder_mead(loss, x0, step=step, iters=iters)
        loss(x)
        after = errors()
        fitted = {n: _get_constant(n) for n in names}
    finally:
        for n, v in saved.items():
            _set_constant(n, v)

    def spread(es: list[float]) -> dict[str, float]:
        a = [abs(math.exp(e) - 1) for e in es]
        return {"median": _pct(a, 0.5), "p95": _pct(a, 0.95)}

    return {
        "rows": len(measured),
        "constants": fitted,
        # constants the search stopped at the edge of its range: the rows do not settle them
        "at_range_limit": [
            n for n, v, v0 in zip(names, x, x0, strict=True) if abs(v - v0) >= 0.99 * FIT_LOG_RANGE
        ],
        "error_now": spread(before),
        "error_fitted": spread(after),
    }


def _row_case(r: dict[str, Any]) -> tuple[ModelSpec, Strategy, int]:
    """A row's model (as its file built it), strategy and sequence length, to predict it again."""
    spec = replace(bench_spec(r["config"]["model"]), use_cache=row_use_cache(r))
    return spec, _cfg(r).strategy(r["world"]), r["seq_len"]


def row_throughput(hw: HardwareReport, r: dict[str, Any]) -> ThroughputEstimate:
    """The throughput model's prediction for a recorded row, with the calibration as it is now and its optimizer."""
    return estimate_throughput(hw, *_row_case(r), buffers=row_buffers(_cfg(r)))


def fit_throughput(ok: list[dict[str, Any]], hw: HardwareReport) -> dict[str, Any]:
    """Refit FIT_CONSTANTS to the measured tokens/s of the ok rows: what to write into
    wizard/planner/calibration.py."""
    rows = [r for r in ok if r.get("tokens_per_sec")]
    if len(rows) < len(FIT_CONSTANTS) + 2:
        return {}

    def predicted() -> list[float]:
        return [row_throughput(hw, r).tokens_per_sec for r in rows]

    # tokens/s: a prediction too fast errs the same way as a step predicted too short
    return _fit_log(FIT_CONSTANTS, predicted, [r["tokens_per_sec"] for r in rows])


def optimizer_step_rows(ok: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows whose optimizer step ran on the GPU and was timed as a phase of its own (Row.phase_s "step")."""
    return [
        r
        for r in ok
        if (r.get("phase_s") or {}).get("step")
        and r["config"]["offload_optimizer"] == "none"
        and r["config"]["offload_param"] == "none"
        and r["world"] == 1
        and _row_optimizer(r["config"]) == "ds"  # DeepSpeed's own AdamW, as the constants describe
    ]


def _step_constant_kind(name: str) -> str | None:
    """The optimizer (throughput.optimizer_kind) a step constant times; None: every one."""
    entry = _dict_key(name)
    return str(entry[1]) if entry else {"STAGE0_SECONDS_PER_TENSOR": "stage 0"}.get(name)


def fit_optimizer_step(ok: list[dict[str, Any]], hw: HardwareReport) -> dict[str, Any]:
    """Refit OPTIMIZER_STEP_CONSTANTS to the measured step phase (median of the timed steps) of the rows whose
    optimizer ran on the GPU: the planner's part of the step that runs in DeepSpeed's step (STEP_PARTS). A
    stage's per-parameter time is fit where rows of that stage were timed; the others stay as set."""
    rows = optimizer_step_rows(ok)
    kinds = {optimizer_kind(r["config"]["zero_stage"]) for r in rows}
    names = tuple(n for n in OPTIMIZER_STEP_CONSTANTS if (k := _step_constant_kind(n)) is None or k in kinds)
    if len(rows) < len(names) + 2:
        return {}

    def predicted() -> list[float]:
        return [step_phase_seconds(dict(row_throughput(hw, r).parts)) for r in rows]

    measured = [statistics.median(r["phase_s"]["step"]) for r in rows]
    return _fit_log(names, predicted, measured)


def _label(r: dict[str, Any]) -> str:
    return f"{r['config']['model']} {_describe(r['config'])}"


def _describe(c: dict[str, Any]) -> str:
    s = f"z{c['zero_stage']}"
    if c["offload_optimizer"] != "none":
        s += f"+opt:{c['offload_optimizer']}"
    if c["offload_param"] != "none":
        s += f"+param:{c['offload_param']}"
    if c["checkpointing"]:
        s += "+ckpt"
    s += f" mbs{c['micro_batch']}"
    if c["cap_gib"]:
        s += f" @{c['cap_gib']}GiB"
    if c.get("seq"):
        s += f" seq{c['seq']}"
    if grad_accum(c) != 1:
        s += f" ga{grad_accum(c)}"
    if c.get("repeat"):
        s += f" #{c['repeat'] + 1}"
    for key, value in c.get("zero") or ():
        s += f" {key}={value:.3g}"
    return s + OPTIMIZER_LABELS[_row_optimizer(c)]


def _row_optimizer(c: dict[str, Any]) -> str:
    """A raw row's Config.optimizer (rows from before it existed ran DeepSpeed's: the default)."""
    return str(c.get("optimizer", Config.optimizer))


def _whole_mib(gib: float | None) -> float | None:
    """A GiB figure with less than a MiB shown as 0 (torch's host allocator pins a few bytes for itself)."""
    return None if gib is None else (0.0 if gib < 1 / 1024 else gib)


def _f(x: Any, pct: bool = False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if pct:
        return f"{x * 100:.1f} %"
    if isinstance(x, (int, float)):
        return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"
    return str(x)


def _markdown_header(doc: dict[str, Any], run: dict[str, Any]) -> list[str]:
    """The run's title, what ran, the error table, and the recommendations table's head."""
    hw = doc["hardware"]
    gpu = hw["gpus"][0]["name"] if hw.get("gpus") else "?"
    sources = doc.get("sources") or []
    merged = (
        " Merged from "
        + ", ".join(f"{s['date']} ({s['rows']} rows, tiers {s['tiers'] or 'all'})" for s in sources)
        + "; a config read more than once keeps every reading (where they disagree on running, the newest stands)."
        if len(sources) > 1
        else ""
    )
    alloc = {s.get("alloc_conf") for s in sources} - {None}
    cpus = narrowed_cpus(doc)
    narrowed = f", on {cpus} of the host's {hw['host'].get('logical_cores')} CPUs" if cpus else ""
    md = [
        f"## {doc['world']} x {gpu}{narrowed} ({doc['date']}, {doc['host']}; {doc['optimizer']}; "
        f"torch {doc['versions'].get('torch')}, deepspeed {doc['versions'].get('deepspeed')}, "
        f"transformers {doc['versions'].get('transformers')})",
        "",
        f"{run['rows']} readings ({run['ok']} ok, {run['oom']} OOM, {run['error']} that failed otherwise: error, timeout, killed) of {doc['grid_size']}"
        + (
            f", {run['diagnostic_rows']} more diagnostic rows (shown apart, judged by no target)"
            if run.get("diagnostic_rows")
            else ""
        )
        + (f"; budget stopped at {run['stopped_at']}" if run.get("stopped_at") else "")
        + "."
        + merged
        + (f" PYTORCH_CUDA_ALLOC_CONF: {', '.join(sorted(alloc))}." if alloc else ""),
        "",
        "| metric | median | p95 |",
        "|---|---:|---:|",
        f"| planner: max_memory_allocated error | {_f(run['memory_allocated_abs_error_median'], True)} | "
        f"{_f(run['memory_allocated_abs_error_p95'], True)} |",
        f"| planner: max_memory_reserved error | {_f(run['memory_reserved_abs_error_median'], True)} | "
        f"{_f(run['memory_reserved_abs_error_p95'], True)} |",
        f"| DeepSpeed estimator vs allocated ({run['deepspeed_estimator_rows']} rows) | "
        f"{_f(run['deepspeed_estimator_abs_error_median'], True)} | {_f(run['deepspeed_estimator_abs_error_p95'], True)} |",
        f"| planner: tokens/s error | {_f(run['tokens_per_sec_abs_error_median'], True)} | "
        f"{_f(run['tokens_per_sec_abs_error_p95'], True)} |",
        "",
        f"Signed median memory error {_f(run['memory_allocated_signed_error_median'], True)} (positive: "
        f"over-predicts). Reserved memory under-predicted on {len(run['memory_reserved_under_predicted'])} ok "
        f"row(s){': ' + ', '.join(run['memory_reserved_under_predicted']) if run['memory_reserved_under_predicted'] else ''}. "
        f"Outside the allocator (context + NCCL), median: "
        f"{_f((run['outside_allocator_median_bytes'] or 0) / GiB if run['outside_allocator_median_bytes'] else None)} GiB.",
        "",
        'Recommendations re-planned with the calibration as it is now; "inferred": that micro-batch was not run, '
        'a larger one of the same strategy fit the card (or a smaller one OOMed); tok/s "~x": the nearest '
        'measured micro-batch of that strategy scaled by the throughput model (">= y": the largest smaller '
        "micro-batch measured). A config read more than once counts at the median of its readings, on both sides. "
        '"one machine": the same ratio from readings of both on one machine (its GPUs\' UUIDs; the median over the '
        "machines that read both, how many in brackets): machines of one kind differ by several per cent.",
        "",
        "| model | card | recommended now | fits | tok/s | best in grid | tok/s | ratio | one machine |",
        "|---|---|---|---|---:|---|---:|---:|---:|",
    ]
    return md


def _markdown_recommendations(run: dict[str, Any]) -> list[str]:
    md: list[str] = []
    for r in run["recommendations"]:
        tps = _f(r.get("recommended_tokens_per_sec"))
        ratio = _f(r.get("ratio"))
        if r.get("recommended_tokens_per_sec") is None and r.get("recommended_tokens_per_sec_estimated"):
            tps = "~" + _f(r["recommended_tokens_per_sec_estimated"])
            ratio = "~" + _f(r["ratio_estimated"])
            if r.get("ratio_at_least") is not None:
                ratio += f" (>= {_f(r['ratio_at_least'])})"
        one = r.get("same_run")
        one_run = "-" if one is None else f"{_f(one['ratio'])} ({len(one['machines'])})"
        md.append(
            f"| {r['model']} | {r['card']} | {r['recommended'] or '-'} | {r['status']} | {tps} | "
            f"{r['best_in_grid'] or '-'} | {_f(r['best_tokens_per_sec'])} | {ratio} | {one_run} |"
        )
    return md


def _markdown_fit_checks(run: dict[str, Any]) -> list[str]:
    fc = run["fit_checks"]
    md = [
        "",
        f"Fit checks (every row x card the measurements decide, vs the memory model): {fc['checks']} checks, "
        f"{fc['agree']} agree, {fc['conservative']} conservative (fits, predicted not to with the margin), "
        f"{len(fc['unsafe'])} unsafe (predicted to fit with the margin, OOMed), "
        f"{len(fc['unsafe_without_margin'])} that fit only by the margin's grace.",
    ]
    md += [f"- OOM predicted to fit: {c['config']} on {c['card']}" for c in fc["unsafe"]]
    md += [
        f"- OOM that only the margin kept out: {c['config']} on {c['card']}"
        for c in fc["unsafe_without_margin"]
        if c not in fc["unsafe"]
    ]
    return md


def _margin_checks(
    rows: list[dict[str, Any]], hw: HardwareReport, world: int, recommendations: list[dict[str, Any]]
) -> dict[str, Any]:
    """The --family margin rows: each config under a cap at what the planner lets a MARGIN_CARD_GIB card hold with
    its safety margin kept free -- did it run there (it fits that card with the margin), and did the planner say it
    would (its under-pressure need vs the card's budget); per model, the best of them that ran beside today's
    recommendation for the card, both read under that cap."""
    total = hw.min_gpu_memory_bytes or 0
    checks = []
    for r in rows:
        c = r["config"]
        if c.get("cap_gib") != MARGIN_CAP_GIB or r["status"] not in ("ok", "oom"):
            continue
        cfg = _cfg(r)
        card = card_for_cap(total, MARGIN_CARD_GIB, world, cfg.strategy(world))
        needed = r["now"]["needed"]
        fits = needed <= card * (1 - cal.DEFAULT_SAFETY_MARGIN)
        ran = r["status"] == "ok"
        # the same config on the card itself (a row's seq is None at the family's length, or that length given)
        same = _config_at(c, r["seq_len"])
        at_card = [
            x
            for x in rows
            if x["config"].get("cap_gib") == MARGIN_CARD_GIB and _config_at(x["config"], x["seq_len"]) == same
        ]
        checks.append(
            {
                "config": _label(r),
                "model": c["model"],
                "seq_len": r["seq_len"],
                "key": same,
                "described": _describe({**c, "cap_gib": MARGIN_CARD_GIB}),
                "ran": ran,
                "tokens_per_sec": r.get("tokens_per_sec"),
                "max_reserved": r.get("max_reserved"),
                "at_card": [x["status"] for x in at_card],
                "needed_share_of_card": needed / card,
                "planner_fits_with_margin": fits,
                "verdict": "agree" if fits == ran else "conservative" if ran else "unsafe",
            }
        )
    picks = []
    for model, seq in dict.fromkeys((ch["model"], ch["seq_len"]) for ch in checks):
        mine = [ch for ch in checks if (ch["model"], ch["seq_len"]) == (model, seq)]
        rec = next(
            (
                e
                for e in recommendations
                if e["model"] == model
                and e["card"] == f"{MARGIN_CARD_GIB}GiB"
                and (e.get("recommended_config") or {}).get("seq_len") == seq
            ),
            None,
        )
        rec_label, rec_key = None, None
        if rec is not None and rec.get("recommended_config"):
            rc = rec["recommended_config"]
            rec_label, rec_key = rec["recommended"], _config_at(rc, seq)
        rec_check = next((ch for ch in mine if ch["key"] == rec_key), None)
        ran = [ch for ch in mine if ch["ran"] and ch["tokens_per_sec"]]
        best = max(ran, key=lambda ch: ch["tokens_per_sec"], default=None)
        ratio = None
        if best is not None and rec_check is not None and rec_check["ran"] and rec_check["tokens_per_sec"]:
            ratio = round(min(1.0, rec_check["tokens_per_sec"] / best["tokens_per_sec"]), 3)
        picks.append(
            {
                "model": model,
                "recommended": rec_label,
                "recommended_ran": None if rec_check is None else rec_check["ran"],
                "best": None if best is None else best["described"],
                "ratio": ratio,
            }
        )
    return {"checks": checks, "picks": picks}


def _config_at(c: dict[str, Any], seq: int) -> tuple[Any, ...]:
    """A config as run at sequence length ``seq``, whatever its cap and however its row names the length."""
    return (*_strategy_key(c, seq), c["micro_batch"])


def _markdown_margin(margin: dict[str, Any]) -> list[str]:
    if not margin["checks"]:
        return []
    md = [
        "",
        f"Within the margin: configs under a {MARGIN_CAP_GIB:g} GiB cap, what the planner lets a {MARGIN_CARD_GIB} GiB "
        f"card hold with its {cal.DEFAULT_SAFETY_MARGIN:.0%} kept free (the CUDA context outside the cap): one that "
        f"runs there fits the card with the margin; one that runs out of memory fits only by using it.",
        "",
        f"| config | under {MARGIN_CAP_GIB:g} GiB | tok/s | reserved GiB | at {MARGIN_CARD_GIB} GiB | planner: need "
        f"/ card | planner: fits with the margin | verdict |",
        "|---|---|---:|---:|---|---:|---|---|",
    ]
    for ch in margin["checks"]:
        res = "-" if ch["max_reserved"] is None else f"{ch['max_reserved'] / GiB:.2f}"
        md.append(
            f"| {ch['config']} | {'ran' if ch['ran'] else 'OOM'} | {_f(ch['tokens_per_sec'])} | {res} | "
            f"{', '.join(ch['at_card']) or '-'} | {ch['needed_share_of_card']:.3f} | "
            f"{'yes' if ch['planner_fits_with_margin'] else 'no'} | {ch['verdict']} |"
        )
    md += [
        "",
        f"Per model, today's recommendation for the {MARGIN_CARD_GIB} GiB card against the best config that ran "
        f"within its margin (both read under the {MARGIN_CAP_GIB:g} GiB cap):",
        "",
        "| model | recommended now | ran within the margin | best within the margin | ratio |",
        "|---|---|---|---|---:|",
    ]
    for p in margin["picks"]:
        ran = {True: "yes", False: "no", None: "not read"}[p["recommended_ran"]]
        ratio = "-" if p["ratio"] is None else f"{p['ratio']:.3f}"
        md.append(f"| {p['model']} | {p['recommended'] or '-'} | {ran} | {p['best'] or '-'} | {ratio} |")
    return md


def _markdown_rows(rows: list[dict[str, Any]]) -> list[str]:
    md = [
        "",
        "<details><summary>every row</summary>",
        "",
        "| config | status | alloc GiB | pred | reserved GiB | pred | DS est | tok/s | pred |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        n = r["now"]
        g = lambda x: "-" if x is None else f"{x / GiB:.2f}"  # noqa: E731
        md.append(
            f"| {_label(r)} | {r['status']} | {g(r.get('max_allocated'))} | "
            f"{g(n['allocated'])} | {g(r.get('max_reserved'))} | {g(n['reserved'])} | "
            f"{g(n['ds_estimate_gpu'])} | {_f(r.get('tokens_per_sec'))} | {_f(n['tokens_per_sec'])} |"
        )
    md += ["", "</details>", ""]
    return md


def _markdown_phases(rows: list[dict[str, Any]]) -> list[str]:
    """Rows whose steps were split at the forward / backward / step boundaries (Row.phase_s): median seconds of each,
    beside the planner's whole step and the part of it that runs in DeepSpeed's step (STEP_PARTS)."""
    split = [r for r in rows if r["status"] == "ok" and r.get("phase_s") and r.get("tokens_per_sec")]
    if not split:
        return []
    md = [
        "Steps split at the forward / backward / optimizer-step boundaries (CUDA events; median seconds of the timed "
        "steps; the planner's step and, of it, the optimizer's parts: DeepSpeed's step, CPU Adam, weight copies):",
        "",
        "| config | forward | backward | step | whole step | planner: whole step | planner: optimizer |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in split:
        ph = {k: statistics.median(v) for k, v in r["phase_s"].items()}
        tokens = samples_per_step(r["config"]) * r["seq_len"] * r["world"]
        whole, predicted = tokens / r["tokens_per_sec"], tokens / r["now"]["tokens_per_sec"]
        md.append(
            f"| {_label(r)} | {ph.get('forward', math.nan):.3f} | {ph.get('backward', math.nan):.3f} | "
            f"{ph.get('step', math.nan):.3f} | {whole:.3f} | {predicted:.3f} | {r['now'].get('optimizer_s', math.nan):.3f} |"
        )
    return [*md, ""]


STREAM_ROLES = ("default", "all-gather", "reduce")
_PHASE_ORDER = {"forward": 0, "backward": 1}


def stream_roles(growth: dict[str, Any]) -> dict[str, int]:
    """Which stream of a Row.segment_growth record is which (its stream numbers follow the start snapshot, then first
    use, so they name no stream): the default stream is the one still holding memory at the end (the model's states
    and DeepSpeed's persistent buffers; a side stream's blocks are transient); a side stream whose first segment came
    in a forward is ZeRO-3's all-gather stream (it fetches the parameters the forward runs), one whose first came in a
    backward the reduce stream. A role that two streams would share, or a stream none fits, leaves that role out:
    the report shows it unread."""
    held = {int(n): int(h) for n, _, h in growth["by_stream_at_end"]}
    if not held:
        return {}
    default = max(held, key=lambda n: held[n])
    first: dict[int, tuple[int, int]] = {}
    for moment, n, *_ in growth["added"]:
        words = str(moment).split()  # "step 0 forward 0" (bench/_peak_anatomy.py segment_growth's moments)
        if len(words) >= 3 and words[0] == "step" and words[1].isdigit():
            key = (int(words[1]), _PHASE_ORDER.get(words[2], len(_PHASE_ORDER)))
            first[int(n)] = min(first.get(int(n), key), key)
    found: dict[str, list[int]] = {"default": [default]}
    for n in held:
        if n != default and n in first and first[n][1] < len(_PHASE_ORDER):
            found.setdefault(STREAM_ROLES[1 + first[n][1]], []).append(n)
    return {role: ns[0] for role, ns in found.items() if len(ns) == 1}


def _markdown_streams(rows: list[dict[str, Any]]) -> list[str]:
    """Rows read with --segment-growth where ZeRO-3 gathers parameters: reserved at the end of the warm-up by stream
    (Row.segment_growth, each stream named by ``stream_roles``) and all streams together then, which can be less than
    the run's max reserved, beside the planner's side pools (memory.stream_pools) and the rest of its reserved, which
    the default stream holds (the planner's three add up to its peak reserved)."""
    read = [
        r
        for r in rows
        if r["status"] == "ok" and r.get("segment_growth") and any(r["now"].get("pools") or ())
    ]
    if not read:
        return []
    md = [
        "Reserved by stream at the end of the warm-up (--segment-growth; GiB, measured / planner; the planner's "
        "default stream is its reserved less its side pools; ? a stream the record does not name):",
        "",
        "| config | max reserved | all streams at the end | default stream | all-gather stream | reduce stream |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in read:
        growth = r["segment_growth"]
        by = {int(n): int(res) for n, res, _ in growth["by_stream_at_end"]}
        roles = stream_roles(growth)
        fetch, reduce = r["now"]["pools"]
        planner = dict(zip(STREAM_ROLES, (r["now"]["reserved"] - fetch - reduce, fetch, reduce), strict=True))
        cells = [
            f"{by[roles[role]] / GiB:.2f} / {planner[role] / GiB:.2f}"
            if role in roles
            else f"? / {planner[role] / GiB:.2f}"
            for role in STREAM_ROLES
        ]
        md.append(
            f"| {_label(r)} | {r['max_reserved'] / GiB:.2f} / {r['now']['reserved'] / GiB:.2f} | "
            f"{sum(by.values()) / GiB:.2f} | {' | '.join(cells)} |"
        )
    return [*md, ""]


def _markdown_gpu_busy(rows: list[dict[str, Any]]) -> list[str]:
    """Rows read with --gpu-busy: how much of the profiled step (the last untimed one) the GPU was busy, in all and
    per phase, by kind, beside the planner's GPU work and the host time it says the GPU waits for."""
    read = [r for r in rows if r["status"] == "ok" and r.get("gpu_busy")]
    if not read:
        return []
    md = [
        "GPU busy in the last untimed step (--gpu-busy; seconds; idle = the phase's time less the GPU's busy time "
        "in it: the GPU waiting on the host; the planner's GPU work is its matmuls, element-wise, ZeRO-3 copies and "
        "communication, its host time what it says the GPU waits for in the micro-steps):",
        "",
        "| config | step (profiled / timed median) | GPU busy | forward idle | backward idle | step idle | "
        "matmuls | attention | other kernels | copies | planner: GPU work | planner: host waited for | "
        "planner: step phase |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in read:
        busy = r["gpu_busy"]
        kinds = busy.get("by_kind", {})
        copies = sum(v for k, v in kinds.items() if k.startswith("copy"))
        idle = []
        for phase in PHASES:
            p = busy.get("phases", {}).get(phase)
            idle.append("-" if not p else f"{p['seconds'] - p['busy_s']:.3f}")
        now = r.get("now") or r["predicted"]
        md.append(
            f"| {_label(r)} | {busy['wall_s']:.3f} / {statistics.median(r['step_s']):.3f} | {busy['busy_s']:.3f} | "
            f"{' | '.join(idle)} | {kinds.get('matrix multiplications', 0.0):.3f} | {kinds.get('attention', 0.0):.3f} | "
            f"{kinds.get('other kernels', 0.0):.3f} | {copies:.3f} | {_f3(now.get('gpu_work_s'))} | "
            f"{_f3(now.get('host_exposed_s'))} | {_f3(now.get('optimizer_s'))} |"
        )
    return [*md, ""]


def _f3(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def _markdown_calibration(run: dict[str, Any]) -> list[str]:
    """What the measurements say the calibration constants should be."""
    md: list[str] = []
    fits = run["fits"]
    md += [
        f"Calibration hints: measured/predicted bytes per sample, median: no checkpointing "
        f"{_f(fits['activation_scale_no_ckpt'])}, checkpointing {_f(fits['activation_scale_ckpt'])}; "
        f"measured/predicted tokens/s median {_f(fits['measured_over_predicted_tokens_per_sec_median'])} "
        "(edit wizard/planner/calibration.py, then re-run --analyze).",
        "",
    ]
    md += _markdown_refit(fits.get("allocator_cache"), "Allocator-cache constants", "device memory")
    compute = fits["compute"]
    if compute.get("per_model"):
        md += ["| model | s per sample | fixed s per step | share of peak |", "|---|---:|---:|---:|"]
        for mname, v in compute["per_model"].items():
            md.append(
                f"| {mname} | {v['seconds_per_sample']:.4f} | {v['fixed_seconds_per_step']:.4f} | "
                f"{_f(v['efficiency'], True)} |"
            )
        md.append("")
    md += _markdown_refit(fits.get("throughput"), "Throughput constants", "tokens/s")
    md += _markdown_refit(
        fits.get("optimizer_step"), "The optimizer step's constants", "timed step phase (GPU optimizer)"
    )
    return md


def _markdown_refit(fit: dict[str, Any] | None, what: str, error: str) -> list[str]:
    """One refit's table: the constants as calibrated and as fit, and the error before and after."""
    if not fit:
        return []
    md = [
        f"{what} refit to these {fit['rows']} rows ({error} error median "
        f"{_f(fit['error_now']['median'], True)} -> {_f(fit['error_fitted']['median'], True)}, p95 "
        f"{_f(fit['error_now']['p95'], True)} -> {_f(fit['error_fitted']['p95'], True)}):",
        "",
        "| constant | calibration | fit |",
        "|---|---:|---:|",
    ]
    limit = set(fit.get("at_range_limit", ()))
    md += [
        f"| {n} | {_get_constant(n):.4g} | {v:.4g}{' (at the search limit: not settled by these rows)' if n in limit else ''} |"
        for n, v in fit["constants"].items()
    ]
    return [*md, ""]


def _reading_key(r: dict[str, Any]) -> tuple[Any, ...]:
    """What makes two rows readings of one config: the config without its repeat number, at the sequence it ran,
    with the DeepSpeed buffer sizes it ran (--zero-set)."""
    c = r["config"]
    return (*(c[k] for k in ("model", "zero_stage", "offload_optimizer", "offload_param", "checkpointing",
                              "micro_batch", "cap_gib")), r.get("seq_len"), _row_optimizer(c),
            grad_accum(c), tuple(tuple(kv) for kv in c.get("zero") or ()))  # fmt: skip


def families(ok: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (model, stage, offloads, checkpointing): signed errors of the re-prediction against the measured rows --
    tokens/s, device memory (reserved + outside the allocator vs the predicted device total), max-allocated -- and
    the measured host memory (peak RSS, pinned) beside the predicted host RAM (issue 19's targets are per family).
    A config read more than once (``Config.repeat``) counts once, at the median of its readings' errors: two
    processes of one config measured up to ~10 % apart in tokens/s, so one reading cannot tell the physics from the
    noise."""
    groups: dict[tuple[Any, ...], dict[tuple[Any, ...], list[dict[str, Any]]]] = {}
    for r in ok:
        c = r["config"]
        key = (
            c["model"],
            c["zero_stage"],
            c["offload_optimizer"],
            c["offload_param"],
            c["checkpointing"],
            _row_optimizer(c),  # the script's own AdamW (--family optimizer) is a family of its own
            grad_accum(c),  # and so is gradient accumulation
        )
        groups.setdefault(key, {}).setdefault(_reading_key(r), []).append(r)

    def per_config(configs: list[list[dict[str, Any]]], error: Any) -> list[float]:
        out = []
        for readings in configs:
            errs = [e for e in map(error, readings) if e is not None]
            if errs:
                out.append(statistics.median(errs))
        return out

    out = []
    for key, by_config in groups.items():
        configs = list(by_config.values())
        rs = [r for readings in configs for r in readings]
        tps = per_config(
            configs,
            lambda r: (
                r["now"]["tokens_per_sec"] / r["tokens_per_sec"] - 1 if r.get("tokens_per_sec") else None
            ),
        )
        dev = per_config(
            configs,
            lambda r: (
                predicted_device(r, r["now"]["reserved"]) / measured_device(r) - 1  # type: ignore[operator]
                if measured_device(r)
                else None
            ),
        )
        alloc = per_config(
            configs,
            lambda r: r["now"]["allocated"] / r["max_allocated"] - 1 if r.get("max_allocated") else None,
        )
        host = [r for r in rs if r.get("host_rss_peak")]
        family_config = {**rs[0]["config"], "micro_batch": "*", "cap_gib": None, "repeat": 0}
        out.append(
            {
                "family": f"{key[0]} " + _describe(family_config),
                "rows": len(rs),
                "configs": len(configs),
                "tokens_per_sec_error_median": _pct(tps, 0.5),
                "tokens_per_sec_error_max_abs": max((abs(e) for e in tps), default=math.nan),
                "device_error_max_abs": max((abs(e) for e in dev), default=math.nan),
                "allocated_error_max_abs": max((abs(e) for e in alloc), default=math.nan),
                "host_rss_peak_gib": max((r["host_rss_peak"] / GiB for r in host), default=None),
                "host_pinned_peak_gib": max(
                    ((r.get("host_pinned_peak") or 0) / GiB for r in host), default=None
                ),
                "host_predicted_gib": rs[0]["now"].get("cpu", 0) / GiB,
                "key": list(key),
            }
        )
    return out


def _markdown_families(run: dict[str, Any]) -> list[str]:
    fams = run.get("families") or []
    if not fams:
        return []
    md = [
        "Per family (issue 19 targets: tokens/s |median| <= 5 %, max <= 10 %; device <= 8 %; max-allocated <= 3 %; "
        "signed errors: positive = over-predicts; under an allocator cap a predicted reserved above the cap counts "
        "as the cap; a config read more than once counts once, at the median of its readings):",
        "",
        "| family | configs (readings) | tok/s median | tok/s max | device max | allocated max | host RSS peak GiB "
        "| pinned GiB | host pred GiB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for f in fams:
        md.append(
            f"| {f['family']} | {f['configs']} ({f['rows']}) | "
            f"{_f(f['tokens_per_sec_error_median'], True)} | "
            f"{_f(f['tokens_per_sec_error_max_abs'], True)} | {_f(f['device_error_max_abs'], True)} | "
            f"{_f(f['allocated_error_max_abs'], True)} | {_f(f['host_rss_peak_gib'])} | "
            f"{_f(_whole_mib(f['host_pinned_peak_gib']))} | {_f(f['host_predicted_gib'])} |"
        )
    met = family_targets(fams)
    md += [
        "",
        f"Families within issue 19's targets, of {len(fams)}: tokens/s {met['tokens_per_sec']}, device memory "
        f"{met['device']}, max-allocated {met['allocated']}, all three {met['all']}.",
    ]
    return [*md, ""]


def family_targets(fams: list[dict[str, Any]]) -> dict[str, int]:
    """How many families meet each of issue 19's targets: tokens/s |median| <= 5 % and max <= 10 %, device memory
    <= 8 %, max-allocated <= 3 % (a family without that reading does not meet it)."""

    def within(value: float | None, limit: float) -> bool:
        return value is not None and not math.isnan(value) and abs(value) <= limit

    checks = {
        "tokens_per_sec": lambda f: (
            within(f["tokens_per_sec_error_median"], 0.05) and within(f["tokens_per_sec_error_max_abs"], 0.10)
        ),
        "device": lambda f: within(f["device_error_max_abs"], 0.08),
        "allocated": lambda f: within(f["allocated_error_max_abs"], 0.03),
    }
    out = {name: sum(1 for f in fams if check(f)) for name, check in checks.items()}
    out["all"] = sum(1 for f in fams if all(check(f) for check in checks.values()))
    return out


def _markdown_run(
    doc: dict[str, Any],
    run: dict[str, Any],
    rows: list[dict[str, Any]],
    diagnostic: list[dict[str, Any]],
) -> list[str]:
    return [
        *_markdown_header(doc, run),
        *_markdown_recommendations(run),
        *_markdown_families(run),
        *_markdown_fit_checks(run),
        *_markdown_margin(run["margin"]),
        *_markdown_rows(rows),
        *_markdown_phases(rows),
        *_markdown_streams(rows),
        *_markdown_gpu_busy(rows),
        *_markdown_diagnostic(diagnostic),
        *_markdown_calibration(run),
    ]


def _markdown_diagnostic(rows: list[dict[str, Any]]) -> list[str]:
    """The diagnostic rows (is_diagnostic), apart from the judged ones: what they were run to show."""
    if not rows:
        return []
    return [
        "Diagnostic rows, judged by no target, in no refit: `--family thin`'s shapes (a model's depth and vocabulary "
        "at hidden 256, so that what is left of a step is mostly the host's) and rows run with `--zero-set` (DeepSpeed "
        "buffer sizes beyond what dswiz writes; their label names them):",
        *_markdown_rows(rows),
        *_markdown_phases(rows),
        *_markdown_streams(rows),
        *_markdown_gpu_busy(rows),
    ]


def _targets(runs: list[dict[str, Any]]) -> dict[str, tuple[str, bool | None]]:
    med = [
        r["memory_allocated_abs_error_median"]
        for r in runs
        if not math.isnan(r["memory_allocated_abs_error_median"])
    ]
    p95 = [
        r["memory_allocated_abs_error_p95"]
        for r in runs
        if not math.isnan(r["memory_allocated_abs_error_p95"])
    ]
    recs = [x for r in runs for x in r["recommendations"] if x.get("recommended")]
    # a ratio read on one machine where one read both configs (_same_run_ratio), else the pooled one
    ratios = [
        x["same_run"]["ratio"] if x.get("same_run") else x["ratio"]
        for x in recs
        if x.get("ratio") is not None
    ]
    estimates = [
        x["ratio_estimated"] for x in recs if x.get("ratio") is None and x.get("ratio_estimated") is not None
    ]
    worst = min(ratios + estimates, default=math.nan)
    ratio_met: bool | None = bool(ratios or estimates) and worst >= 0.95
    if not ratio_met and ratios and min(ratios) >= 0.95:
        ratio_met = None  # only an estimate falls short: the verify run decides
    ooms = sum(x["fits"] is False for x in recs)
    count = {how: sum(x["how"] == how for x in recs) for how in ("measured", "inferred", "unknown")}
    unknown = count["unknown"]
    oom_met: bool | None = False if ooms else (None if unknown else True)
    judged = f"{count['measured']} measured, {count['inferred']} inferred, {unknown} unknown"
    unsafe = sum(len(r["fit_checks"]["unsafe"]) for r in runs)
    return {
        "memory error median <= 10 %": (_f(max(med, default=math.nan), True), bool(med) and max(med) <= 0.10),
        "memory error p95 <= 20 %": (_f(max(p95, default=math.nan), True), bool(p95) and max(p95) <= 0.20),
        "recommended / best-in-grid tokens/s >= 0.95 (worst case; read on one machine where one read both)": (
            _f(worst) + (f" ({len(ratios)} measured, {len(estimates)} estimated)" if estimates else ""),
            ratio_met,
        ),
        "OOMs among recommended configs == 0": (f"{ooms} ({judged})", oom_met),
        "fit checks predicted to fit with the margin that OOMed == 0": (str(unsafe), unsafe == 0),
    }


# ----------------------------------------------------------------------------------------------------- main


def held_out_constants_table(names: Sequence[str], by_model: dict[str, dict[str, float]]) -> list[str]:
    """A refit script's leave-one-model-out table: per held-out model, the constants fit without it (``names``)."""
    return [
        "| held out | " + " | ".join(names) + " |",
        "|---|" + "---:|" * len(names),
        *[f"| {m} | " + " | ".join(f"{v:.3g}" for v in c.values()) + " |" for m, c in by_model.items()],
    ]


def refit_main(
    description: str | None,
    stem: str,
    run: Callable[[], dict[str, Any]],
    markdown: Callable[[dict[str, Any]], str],
) -> int:
    """The main() of a script that refits constants on the committed rows (no GPU run): ``--out`` (default
    bench/results); prints the page and writes STEM.json and STEM.md there."""
    ap = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results", help="folder for the results")
    args = ap.parse_args()
    res = run()
    text = markdown(res)
    print(text)
    write_result(args.out, stem, res, text, sort_keys=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, default=1, help="GPUs (ranks) on this machine to use")
    ap.add_argument(
        "--budget-s",
        type=float,
        default=400.0,
        help="stop starting configs after this many seconds from the launch (default 400)",
    )
    ap.add_argument(
        "--out",
        type=Path,
        default=None,
        help="where results go (default bench/results; with --analyze, the first raw file's folder)",
    )
    ap.add_argument("--smoke", action="store_true", help="CPU, 2 gloo ranks, tiny GPT-2, 2 configs")
    ap.add_argument(
        "--ds-fused-adam", action="store_true", help="DeepSpeed's FusedAdam (JIT build) for non-offload rows"
    )
    ap.add_argument(
        "--analyze", nargs="+", type=Path, metavar="RAW_JSON", help="summarise raw results and stop"
    )
    ap.add_argument(
        "--report-name",
        default=None,
        metavar="STEM",
        help="with --analyze: write STEM.md and STEM-summary.json (default: the first file's name, + -merged)",
    )
    ap.add_argument(
        "--include",
        default=None,
        metavar="IDS",
        help="GPU ids to use instead of the first --gpus (e.g. 1), so other work can share the machine",
    )
    ap.add_argument(
        "--tiers",
        default="0,1,2,3",
        metavar="LIST",
        help="grid tiers to run (default all); --tiers 0 = the recommendations plus one boundary check each, "
        "written to a separate ...-verify.json that --analyze merges with the full run",
    )
    ap.add_argument("--label", default="", help="appended to the raw file's name (e.g. expandable)")
    ap.add_argument(
        "--zero-set",
        action="append",
        metavar="KEY=N",
        help="run every config with this zero_optimization buffer size instead of DeepSpeed's default (repeatable; "
        "e.g. reduce_bucket_size=250000000): rows of their own configs, predicted with the same setting",
    )
    ap.add_argument(
        "--family",
        choices=FAMILIES,
        default="gpt2",
        help="gpt2: the GPT-2 grid above; zero3: stage 3 / offload / checkpointing on LLaMA-style and GPT-2 "
        "models of ~1B-7B, one process per config; sweep: stages 0-2 of LLaMA-style and Qwen2 models at seq 2048 "
        "across micro-batches 1-16, one process per config; heldout: configs no constant was fitted to; recs: "
        "today's recommendation for every (model, card); repeats: second readings of the configs whose one reading "
        "missed by > 10 %%; pressure: micro-batches above the fit rule's limit under a cap, to find where each runs out "
        "of memory; allocator: the configs whose allocator cache varied most, to run with expandable_segments; thin: "
        "the host's per-layer and per-tensor work, on models at hidden 256, beside host-bound full-width rows; pairs: "
        "a recommendation and the best config measured for its card, back to back on one machine; one process per "
        "config",
    )
    ap.add_argument(
        "--indices",
        default="",
        help="--family zero3/sweep: only these grid positions, in this order (e.g. 23,24,10)",
    )
    ap.add_argument(
        "--models", default="", help="--family zero3/sweep/recs: only these models (comma-separated)"
    )
    ap.add_argument(
        "--cards",
        default="",
        help="per-process families: only configs for these cards (comma-separated: full, 24, 40, 80); with "
        "--family recs, e.g. --models gpt2-large --cards full runs that recommendation",
    )
    ap.add_argument(
        "--config-timeout-s", type=float, default=300.0, help="--family zero3/sweep: a config's process limit"
    )
    ap.add_argument(
        "--peak-anatomy",
        action="store_true",
        help="record what holds each row's allocated peak in its last untimed step (Row.peak_anatomy: PyTorch's "
        "memory history of that step, what is live at the peak by block size and stream)",
    )
    ap.add_argument(
        "--segment-growth",
        action="store_true",
        help="record where the allocator reserved each row's segments over the warm-up steps (Row.segment_growth: "
        "by step, phase, stream and the request each was added for); not with --peak-anatomy",
    )
    ap.add_argument(
        "--gpu-busy",
        action="store_true",
        help="profile each row's last untimed step (CUDA activity only) and record how much of it, and of each "
        "phase, the GPU was busy, by kind and stream (Row.gpu_busy); not with --peak-anatomy or --segment-growth",
    )
    ap.add_argument(
        "--host-while-idle",
        action="store_true",
        help="--gpu-busy with the host's side recorded too (CPU activity, Python stacks; that step runs slower): "
        "what Python frame, DeepSpeed frame and CUDA runtime call the host was in while the GPU waited "
        "(Row.gpu_busy host_while_idle)",
    )
    ap.add_argument(
        "--cpus",
        type=positive_int,
        default=None,
        metavar="N",
        help="run on the first N CPUs of this process's affinity mask (every config's process inherits it): the "
        "host of a Slurm task or a container with N CPUs; the hardware the rows are predicted with says so "
        "(HostInfo.usable_cores)",
    )
    ap.add_argument(
        "--nvme-path",
        type=Path,
        default=None,
        metavar="DIR",
        help="a directory on the drive rows with NVMe offload swap to (not tmpfs; default /tmp): they swap into "
        "its dswiz-bench-nvme folder, removed after each such config",
    )
    ap.add_argument(
        "--nvme-rate",
        type=Path,
        default=None,
        metavar="JSON",
        help="bench/nvme_rate.py's result for the --nvme-path drive: the rows are predicted with its rates",
    )
    ap.add_argument("--index", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--master-port", type=int, default=29533)
    ap.add_argument("--collective-timeout-s", type=float, default=120.0)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--name", default="plan_accuracy.json", help=argparse.SUPPRESS)
    ap.add_argument("--t0", type=float, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.t0 is None:
        args.t0 = time.time()
    parse_zero_set(args.zero_set)  # a bad --zero-set stops here, before any GPU time
    if args.peak_anatomy and args.segment_growth:
        ap.error("--peak-anatomy and --segment-growth each record PyTorch's memory history: pick one")
    if (args.gpu_busy or args.host_while_idle) and (args.peak_anatomy or args.segment_growth):
        ap.error("--gpu-busy profiles the step that --peak-anatomy / --segment-growth record: pick one")
    if args.analyze:
        out_dir = args.out or args.analyze[0].parent
        stem = report_stem(args.analyze, args.report_name)
        if args.out is None and args.report_name is None and (out_dir / f"{stem}.md").exists():
            # a committed report records what the planner said when its readings were taken: a re-analysis with
            # today's calibration goes under a name of its own
            print(
                f"{out_dir / (stem + '.md')} exists: not overwritten (printed only); pass --report-name STEM "
                "(and --out DIR) to write this analysis as a report of its own",
                file=sys.stderr,
            )
            out_dir = None
        analyze(args.analyze, out_dir, args.report_name)
        return 0
    args.out = args.out or ROOT / "bench" / "results"
    if args.cpus is not None and not args.worker:
        mask = sorted(os.sched_getaffinity(0))
        if args.cpus > len(mask):
            ap.error(f"--cpus {args.cpus}: this process may use {len(mask)} CPUs; pass at most that")
        os.sched_setaffinity(0, mask[: args.cpus])
    if args.nvme_path is not None:
        os.environ[NVME_PATH_VAR] = str(args.nvme_path.resolve())
    if args.nvme_rate is not None:
        os.environ[NVME_RATE_VAR] = str(args.nvme_rate.resolve())
    if args.worker:
        return worker(args)
    args.out.mkdir(parents=True, exist_ok=True)
    return launch(args)


if __name__ == "__main__":
    sys.exit(main())
