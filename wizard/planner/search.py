"""The search: every strategy this machine can run (stage, offloads, checkpointing, ZeRO++), each sized to the
largest micro-batch (or the target batch) that fits and predicted; ranked "fastest that fits with the safety
margin", ties to the simpler strategy with more headroom.

Pure: no I/O, no terminal.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from typing import Any

from wizard.errors import DswizError
from wizard.hardware.report import HardwareReport
from wizard.history.record import strategy_lineage
from wizard.model import ModelSpec
from wizard.planner import calibration as cal
from wizard.planner import finetune as ft
from wizard.planner.buffers import DEFAULT_BUFFERS, ZeroBuffers
from wizard.planner.ds_estimator import deepspeed_estimate
from wizard.planner.explain import advice, choice_advice_given, intrinsic_reasons, recommendation_reasons
from wizard.planner.feasibility import capacities, hardware_problems, nvme_usable, usable_precisions
from wizard.planner.memory import (
    MemoryEstimate,
    allocator_remaps,
    estimate_memory,
    fragmentation,
    kv_cache_bytes_per_token,
    max_micro_batch_for_capacity,
    phases_for,
)
from wizard.planner.throughput import ThroughputEstimate, estimate_throughput, host_bound
from wizard.planner.types import (
    ZERO_STAGES,
    Candidate,
    GenerationCost,
    MaxBatchRow,
    Plan,
    PlanContext,
    PlanRequest,
    Prediction,
    StrategyChoice,
    WhatIfs,
    budget,
)
from wizard.strategy import OFFLOAD_DEVICES, OffloadDevice, Precision, Strategy, batch_for_global
from wizard.units import fmt_bytes


def _context(
    hardware: HardwareReport, model: ModelSpec, request: PlanRequest
) -> tuple[PlanContext, list[str]]:
    """The question with its capacities resolved, and the capacity notes (host RAM unknown, ...)."""
    c = capacities(hardware, request)
    ctx = PlanContext(hardware, model, request, request.resolved_seq_len(model), c.gpu, c.cpu, c.nvme)
    return ctx, list(c.notes)


def _strategies(
    hardware: HardwareReport, request: PlanRequest, precisions: list[Precision], nvme_ok: bool
) -> list[Strategy]:
    nodes, gpn = hardware.nodes, hardware.gpus_per_node
    offloads: list[OffloadDevice] = [
        d for d in OFFLOAD_DEVICES if d == "none" or (request.allow_offload and (d == "cpu" or nvme_ok))
    ]
    ckpts = (False, True) if request.allow_activation_checkpointing and request.mode == "train" else (False,)
    zeropp = (False, True) if request.allow_zeropp and nodes > 1 and gpn > 1 else (False,)
    out: list[Strategy] = []
    stages = (3,) if request.mode == "inference" else request.stages
    for precision, stage, opt, param, ckpt, zpp in itertools.product(
        precisions, stages, offloads, offloads, ckpts, zeropp
    ):
        if request.mode == "inference" and opt != "none":
            continue
        if zpp and stage != 3:
            continue
        s = Strategy(
            zero_stage=stage,
            offload_optimizer=opt,
            offload_param=param,
            precision=precision,
            activation_checkpointing=ckpt,
            zero_quantized_weights=zpp,
            zero_quantized_gradients=zpp and request.mode == "train",
            zero_hpz_partition_size=gpn if zpp else 1,
            nodes=nodes,
            gpus_per_node=gpn,
            mode=request.mode,
        )
        if not s.problems() and not hardware_problems(hardware, s, request):
            out.append(s)
    return out


def _divisors_desc(n: int, limit: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    all_d = sorted({*small, *(n // d for d in small)}, reverse=True)
    return [d for d in all_d if d <= limit]


@dataclass(frozen=True)
class _Sized:
    """One strategy at its chosen micro-batch and accumulation, predicted."""

    strategy: Strategy
    max_micro_batch: int
    memory: MemoryEstimate
    throughput: ThroughputEstimate
    limits: tuple[str, ...]


def _size(ctx: PlanContext, base: Strategy) -> _Sized:
    """Pick the micro-batch (and accumulation) for one strategy and predict it."""
    phases = phases_for(ctx.model, base, ctx.seq_len, ctx.request.buffers)
    # Accumulating gradients across micro-steps changes what stays resident: size for it when the batch needs it.
    per_gpu = None
    if ctx.request.global_batch is not None:
        per_gpu = ctx.request.global_batch // base.world_size
    accumulates = per_gpu is not None and per_gpu > 1 and base.mode == "train"
    probe = base.with_(gradient_accumulation_steps=2) if accumulates else base
    phases_acc = (
        phases_for(ctx.model, probe, ctx.seq_len, ctx.request.buffers) if probe is not base else phases
    )
    limit = ctx.request.max_micro_batch
    frag = fragmentation(
        ctx.model,
        base,
        ctx.seq_len,
        ctx.request.buffers,
        True,
        ctx.request.expandable_segments,
        phases=phases,
    )
    budget = int(ctx.gpu_budget / _memory_factor(ctx, base))  # sized for the memory the history says it takes
    max_b = max_micro_batch_for_capacity(phases, frag, base, budget, limit=limit)
    if per_gpu is None:
        mbs, gas = max(1, max_b), 1
    elif (
        base.mode == "inference"
    ):  # no accumulation without gradients: the batch per forward is the micro-batch
        mbs, gas = per_gpu, 1
    else:
        max_b_acc = max_micro_batch_for_capacity(phases_acc, frag, probe, budget, limit=limit)
        if per_gpu <= max_b:
            mbs = per_gpu
        else:
            fitting = _divisors_desc(per_gpu, max_b_acc)
            mbs = fitting[0] if fitting else 1
        gas = per_gpu // mbs
        if gas > 1:
            max_b = max_b_acc  # the largest micro-batch of the strategy as chosen, accumulating
    s = base.with_(micro_batch_size=mbs, gradient_accumulation_steps=gas)
    mem, tp = _predict(ctx, s)
    if per_gpu is None and _remaps(ctx, mem):
        # Past where the cache a roomy card keeps fits the budget, expandable segments remap every micro-step: the
        # largest micro-batch that stays short of that may be the faster one.
        roomy = fragmentation(ctx.model, base, ctx.seq_len, ctx.request.buffers, phases=phases)
        calm = max_micro_batch_for_capacity(phases, roomy, base, budget, limit=limit)
        if 1 <= calm < mbs:
            calm_s = base.with_(micro_batch_size=calm)
            calm_mem, calm_tp = _predict(ctx, calm_s)
            if calm_tp.tokens_per_sec >= tp.tokens_per_sec:
                s, mem, tp = calm_s, calm_mem, calm_tp
    return _Sized(s, max_b, mem, tp, _limits(ctx, mem))


def _remaps(ctx: PlanContext, mem: MemoryEstimate) -> bool:
    return allocator_remaps(mem, ctx.gpu_budget if ctx.gpu_cap else None, ctx.request.expandable_segments)


def _memory_factor(ctx: PlanContext, s: Strategy) -> float:
    """The device-memory factor the run history gives this strategy's family on this hardware."""
    history = ctx.request.calibration
    return 1.0 if history is None else history.for_family(*strategy_lineage(s)).peak_gpu_bytes.value


def _tokens_factor(ctx: PlanContext, s: Strategy, tp: ThroughputEstimate) -> float:
    """The tokens/s factor the run history gives this strategy's family on this hardware, from the runs of the
    regime the physics puts ``tp`` in (host-bound or not: the correction does not move that share)."""
    history = ctx.request.calibration
    if history is None:
        return 1.0
    return history.for_family(*strategy_lineage(s), host_bound=host_bound(tp)).tokens_per_sec.value


def _predict(ctx: PlanContext, s: Strategy) -> tuple[MemoryEstimate, ThroughputEstimate]:
    """The physics' memory and throughput for exactly ``s``, corrected by the run history where it has runs."""
    mem = estimate_memory(ctx.model, s, ctx.seq_len, ctx.request.buffers, ctx.request.expandable_segments)
    m = _memory_factor(ctx, s)
    if m != 1.0:
        delta = round(mem.device * (m - 1))
        needed = mem.needed + round(mem.needed * (m - 1))
        mem = replace(mem, device=mem.device + delta, needed=needed, history_correction=delta)
    tp = estimate_throughput(
        ctx.hardware,
        ctx.model,
        s,
        ctx.seq_len,
        buffers=ctx.request.buffers,
        allocator_remaps=_remaps(ctx, mem),
    )
    t = _tokens_factor(ctx, s, tp)
    if t != 1.0:
        tp = replace(
            tp,
            tokens_per_sec=tp.tokens_per_sec * t,
            samples_per_sec=tp.samples_per_sec * t,
            mfu=tp.mfu * t,
            step_seconds=tp.step_seconds / t,
            parts=tuple((cause, seconds / t) for cause, seconds in tp.parts),
        )
    return mem, tp


def _limits(ctx: PlanContext, mem: MemoryEstimate) -> tuple[str, ...]:
    """What does not fit: "gpu", "cpu" (host RAM), "nvme"."""
    limits = []
    if ctx.gpu_cap is None or mem.needed > ctx.gpu_budget:
        limits.append("gpu")
    if ctx.cpu_budget is not None and mem.cpu > ctx.cpu_budget:
        limits.append("cpu")
    if mem.nvme and (ctx.nvme_cap is None or mem.nvme > ctx.nvme_cap):
        limits.append("nvme")
    return tuple(limits)


def _prediction(ctx: PlanContext, s: Strategy, mem: MemoryEstimate, tp: ThroughputEstimate) -> Prediction:
    t, m = _tokens_factor(ctx, s, tp), _memory_factor(ctx, s)
    return Prediction(
        tokens_factor=t,
        memory_factor=m,
        gpu_bytes=mem.device,
        gpu_needed_bytes=mem.needed,
        cpu_bytes=mem.cpu,
        nvme_bytes=mem.nvme,
        tokens_per_sec=tp.tokens_per_sec,
        mfu=tp.mfu,
        step_seconds=tp.step_seconds,
        gpu_allocated_bytes=mem.allocated,
        gpu_reserved_bytes=mem.reserved,
        peak_phase=mem.peak_phase,
        breakdown=tuple(mem.breakdown().items()),
        cpu_breakdown=mem.cpu_items,
        time_parts=tp.parts,
        host_bound=host_bound(tp),
    )


def _candidate(ctx: PlanContext, sized: _Sized, problems: tuple[str, ...] = ()) -> Candidate:
    """The candidate for a sized strategy, with its reasons; ``problems`` (why this machine or DeepSpeed cannot run
    it) make it "unsupported" and come first."""
    mem, s = sized.memory, sized.strategy
    limits = sized.limits + (("unsupported",) if problems else ())
    c = Candidate(
        strategy=s,
        fits=not limits,
        predicted=_prediction(ctx, s, mem, sized.throughput),
        reasons=(),
        headroom_bytes=(ctx.gpu_budget - mem.needed) if ctx.gpu_cap else -mem.needed,
        max_micro_batch=sized.max_micro_batch,
        limits=limits,
        deepspeed_estimate=deepspeed_estimate(ctx.model, s),
    )
    generation = _generation_cost(ctx, s) if s.mode == "inference" else None
    reasons = [f"not possible here: {p}" for p in problems] + intrinsic_reasons(
        ctx, c, mem, sized.throughput, generation
    )
    return replace(c, reasons=tuple(reasons))


def _generation_cost(ctx: PlanContext, s: Strategy) -> GenerationCost:
    """What generating would add to an inference strategy: its KV cache per sample, and one decoding forward (a
    sequence of one new token) of the micro-batch."""
    return GenerationCost(
        kv_cache_bytes_per_sample=kv_cache_bytes_per_token(ctx.model) * ctx.seq_len,
        seconds_per_new_token=estimate_throughput(ctx.hardware, ctx.model, s, 1).step_seconds,
    )


def _complexity(s: Strategy) -> int:
    """What a strategy asks of the user beyond picking a stage: host RAM or disks, a code change, ZeRO++."""
    return (
        2 * (s.offload_optimizer != "none")
        + 2 * (s.offload_param != "none")
        + s.activation_checkpointing
        + s.zero_quantized_weights
    )


def _rank_key(c: Candidate) -> tuple[Any, ...]:
    s = c.strategy
    simplicity = (_complexity(s), s.zero_stage)
    if c.fits:
        speed = math.floor(
            math.log(max(c.predicted.tokens_per_sec, 1e-9)) / math.log(1.005)
        )  # 0.5 % buckets: ties
        return (0, -speed, -c.headroom_bytes, simplicity)
    need = c.predicted.gpu_needed_bytes
    over = need / max(1, need + c.headroom_bytes)
    return (1, len(c.limits), round(over, 3), -c.predicted.tokens_per_sec, simplicity)


def _prefer_simpler(cands: list[Candidate]) -> list[Candidate]:
    """Within the model's accuracy (RECOMMEND_SIMPLER_WITHIN) of the fastest, recommend the simplest strategy:
    a 1 % predicted gain does not justify offloading or a code change, nor stage 3's per-layer hooks, whose cost
    depends on the host (the same ZeRO-3 config measured 10 % apart in two processes on one H200:
    bench/results/plan_accuracy-2026-12-02-1gpu-heldout.md)."""
    if not cands or not cands[0].fits:
        return cands
    floor = cands[0].predicted.tokens_per_sec * (1 - cal.RECOMMEND_SIMPLER_WITHIN)
    pool = [i for i, c in enumerate(cands) if c.fits and c.predicted.tokens_per_sec >= floor]
    pick = min(pool, key=lambda i: (_complexity(cands[i].strategy), cands[i].strategy.zero_stage == 3, i))
    return [cands[pick], *cands[:pick], *cands[pick + 1 :]]


def _check_global_batch(hardware: HardwareReport, request: PlanRequest) -> None:
    world = max(1, hardware.total_gpus)
    if request.global_batch is not None and request.global_batch % world:
        lo = request.global_batch // world * world
        fix = f"use {lo} or {lo + world}" if lo else f"use a multiple of {world}, e.g. {world}"
        raise DswizError(
            f"global batch {request.global_batch} is not a multiple of the {world} GPUs "
            "(DeepSpeed needs micro-batch x accumulation x GPUs = global batch)",
            fix,
        )


def _offered(
    hardware: HardwareReport, request: PlanRequest, ctx: PlanContext
) -> tuple[list[Precision], bool, list[str]]:
    """The precisions to plan with, whether NVMe offload is offered, and the notes on what was not and why."""
    precisions, notes = usable_precisions(hardware, request)
    nvme_ok, nvme_note = nvme_usable(hardware, request, ctx.nvme_cap)
    if nvme_note and request.allow_offload:
        notes.append(nvme_note)
    return precisions, nvme_ok, notes


def _rank(
    hardware: HardwareReport, model: ModelSpec, request: PlanRequest
) -> tuple[PlanContext, list[Candidate], list[str]]:
    """The ranked candidates, best first, with the notes; raises DswizError for an indivisible global batch."""
    ctx, notes = _context(hardware, model, request)
    precisions, nvme_ok, offer_notes = _offered(hardware, request, ctx)
    notes += offer_notes
    _check_global_batch(hardware, request)
    if not hardware.gpus:
        return ctx, [], notes
    bases = [
        b for b in _strategies(hardware, request, precisions, nvme_ok) if not ft.strategy_problems(model, b)
    ]
    out = [_candidate(ctx, _size(ctx, base)) for base in bases]
    out.sort(key=_rank_key)
    return ctx, _prefer_simpler(out), notes


def _ranked(hardware: HardwareReport, model: ModelSpec, request: PlanRequest) -> list[Candidate]:
    """The ranked candidates alone, or none for an indivisible global batch: a what-if that cannot be asked."""
    try:
        return _rank(hardware, model, request)[1]
    except DswizError:
        return []


_MORE_GPU_FACTORS = (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


def _more_gpus(ctx: PlanContext) -> tuple[HardwareReport, Candidate] | None:
    """The first doubling of the nodes (or, without a node shape, the hardware as it is) whose best fits."""
    hw, req = ctx.hardware, ctx.request
    for factor in _MORE_GPU_FACTORS:
        bigger = replace(hw, nodes=hw.nodes * factor) if hw.gpus_per_node else hw
        if req.global_batch is not None and req.global_batch % bigger.total_gpus:
            continue
        more = _ranked(bigger, ctx.model, req)
        if more and more[0].fits:
            return bigger, more[0]
    return None


def _larger_gpu(ctx: PlanContext, cands: list[Candidate]) -> tuple[float, Candidate] | None:
    """The card size (bytes, the margin added back) that fits the most frugal candidate short only of GPU memory."""
    gpu_short = [c for c in cands if c.limits == ("gpu",)]
    if not gpu_short:
        return None
    frugal = min(gpu_short, key=lambda c: c.predicted.gpu_needed_bytes)
    return frugal.predicted.gpu_needed_bytes / (1 - ctx.request.safety_margin), frugal


def _more_host_ram(ctx: PlanContext, cands: list[Candidate]) -> tuple[float, Candidate] | None:
    """The host RAM per node (bytes, the host margin added back) that fits the most frugal candidate short only of
    host RAM; None when the RAM is unknown."""
    cpu_short = [c for c in cands if c.limits == ("cpu",)]
    if not cpu_short or ctx.cpu_cap is None:
        return None
    c = min(cpu_short, key=lambda c: c.predicted.cpu_bytes)
    return c.predicted.cpu_bytes / (1 - cal.HOST_SAFETY_MARGIN), c


def _with_nvme(ctx: PlanContext) -> Candidate | None:
    """The best candidate that fits with its offload on an NVMe disk as large as it needs (inference too: NVMe
    parameter offload runs a model larger than GPUs and RAM)."""
    if not ctx.request.allow_offload:
        return None
    nvme_try = replace(ctx.request, nvme_bytes=1 << 60, allow_nvme=True)
    fitting = [c for c in _ranked(ctx.hardware, ctx.model, nvme_try) if c.fits and c.predicted.nvme_bytes]
    return fitting[0] if fitting else None


def _shorter_seq(ctx: PlanContext) -> tuple[int, Candidate] | None:
    """The longest sequence length, halving down to 128 tokens, whose best fits."""
    seq = ctx.seq_len // 2
    while seq >= 128:
        shorter = _ranked(ctx.hardware, ctx.model, replace(ctx.request, seq_len=seq))
        if shorter and shorter[0].fits:
            return seq, shorter[0]
        seq //= 2
    return None


def _other_stages(ctx: PlanContext) -> Candidate | None:
    """Asked for some ZeRO stages only (training): the best of every stage, where it fits."""
    if not ctx.request.some_stages_only:
        return None
    ranked = _ranked(ctx.hardware, ctx.model, replace(ctx.request, stages=ZERO_STAGES))
    return ranked[0] if ranked and ranked[0].fits else None


def what_ifs(ctx: PlanContext, cands: list[Candidate]) -> WhatIfs:
    """When nothing fits: the search asked again with one thing changed (more GPUs, an NVMe disk, a shorter
    sequence), and what a larger card or more host RAM would need for the closest candidates. Nothing to ask
    without GPUs."""
    if not ctx.hardware.gpus:
        return WhatIfs()
    return WhatIfs(
        more_gpus=_more_gpus(ctx),
        larger_gpu=_larger_gpu(ctx, cands),
        more_host_ram=_more_host_ram(ctx, cands),
        with_nvme=_with_nvme(ctx),
        shorter_seq=_shorter_seq(ctx),
        other_stages=_other_stages(ctx),
    )


def plan(hardware: HardwareReport, model: ModelSpec, request: PlanRequest | None = None) -> Plan:
    """Rank every valid strategy for this hardware and model. Raises DswizError only for contradictory input
    (a global batch that the GPUs cannot divide)."""
    request = request or PlanRequest()
    ctx, cands, notes = _rank(hardware, model, request)
    advice_lines: tuple[str, ...] = ()
    if cands and cands[0].fits:
        cands[0] = replace(cands[0], reasons=recommendation_reasons(cands[0], cands[1:]))
    else:
        advice_lines = tuple(advice(ctx, what_ifs(ctx, cands)))
    return Plan(
        hardware=hardware,
        model=model,
        request=request,
        seq_len=ctx.seq_len,
        candidates=tuple(cands),
        gpu_capacity_bytes=ctx.gpu_cap,
        cpu_capacity_bytes=ctx.cpu_cap,
        nvme_capacity_bytes=ctx.nvme_cap,
        advice=advice_lines,
        notes=tuple(notes) + _allocator_notes(request) + _history_notes(request),
    )


def _allocator_notes(request: PlanRequest) -> tuple[str, ...]:
    if not request.expandable_segments:
        return ()
    kept = fmt_bytes(cal.EXPANDABLE_UNRECLAIMABLE_BYTES)
    return (
        "planned for PyTorch's allocator with expandable segments (PYTORCH_CUDA_ALLOC_CONF="
        f"expandable_segments:True): under memory pressure it keeps about {kept} of cache where the default "
        "allocator keeps split blocks; the job must run with it (launch.sh and dswiz launch set it)",
    )


def _history_notes(request: PlanRequest) -> tuple[str, ...]:
    summary = request.calibration.summary() if request.calibration is not None else None
    return (summary,) if summary else ()


def evaluate(
    hardware: HardwareReport, model: ModelSpec, strategy: Strategy, request: PlanRequest | None = None
) -> Candidate:
    """The planner's prediction for one strategy exactly as given (a hand-edited one: any stage, offloads,
    micro-batch, accumulation, checkpointing), with fits / predicted / reasons like a planned candidate. A strategy
    DeepSpeed rejects (``Strategy.problems``) or this machine cannot run (``hardware_problems``) does not fit, limit
    "unsupported", and says why first."""
    request = request or PlanRequest()
    ctx, _ = _context(hardware, model, request)
    s, seq_len = strategy, ctx.seq_len
    mem, tp = _predict(ctx, s)
    phases = phases_for(model, s, seq_len, request.buffers)
    budget = int(ctx.gpu_budget / _memory_factor(ctx, s))
    max_b = max_micro_batch_for_capacity(
        phases,
        fragmentation(model, s, seq_len, request.buffers, True, request.expandable_segments, phases=phases),
        s,
        budget,
        limit=request.max_micro_batch,
    )
    problems = (*s.problems(), *hardware_problems(hardware, s, request), *ft.strategy_problems(model, s))
    return _candidate(ctx, _Sized(s, max_b, mem, tp, _limits(ctx, mem)), problems)


def candidate_for(plan: Plan, strategy: Strategy) -> Candidate:
    """The candidate for ``strategy`` with the prediction it carries: the plan's own when it ranked exactly this
    strategy, else the planner's evaluation of exactly that strategy (a hand-made choice), once."""
    ranked = next((c for c in plan.candidates if c.strategy == strategy), None)
    return ranked or evaluate(plan.hardware, plan.model, strategy, plan.request)


def choose(plan: Plan, choice: StrategyChoice) -> Candidate:
    """The one strategy a user asked for (``dswiz plan --stage 2 --offload-optimizer cpu ...``, or an existing
    config): the planner's best candidate that agrees with every fixed part, sized by the planner unless the
    micro-batch / accumulation are fixed too -- then evaluated exactly as given. A combination the search never
    offers (NVMe without a disk, stage 1 with parameter offload, ...) is evaluated as given and says why it cannot
    run."""
    choice = _batch_for_the_global_batch(plan, choice)
    ranked = next((c for c in plan.candidates if choice.matches(c.strategy)), None)
    if ranked is not None and not choice.fixes_batch:
        return ranked
    base = ranked.strategy if ranked is not None else _as_given(plan, choice)
    s = base.with_(
        micro_batch_size=choice.micro_batch_size or base.micro_batch_size,
        gradient_accumulation_steps=choice.gradient_accumulation_steps or base.gradient_accumulation_steps,
    )
    return candidate_for(plan, s)


def _batch_for_the_global_batch(plan: Plan, choice: StrategyChoice) -> StrategyChoice:
    """With a global batch asked for (--global-batch), one fixed batch number derives the other (the planner's pick
    had its own micro-batch's accumulation: micro-batch 2 with the accumulation for 4 halved the batch); both fixed
    must give it. DswizError otherwise, naming the flags."""
    target, world = plan.request.global_batch, max(1, plan.hardware.total_gpus)
    micro, accumulation = choice.micro_batch_size, choice.gradient_accumulation_steps
    if target is None or plan.request.mode != "train" or not choice.fixes_batch:
        return choice
    if micro is not None and accumulation is not None:
        if micro * accumulation * world != target:
            raise DswizError(
                f"--micro-batch {micro} x --grad-accum {accumulation} x {world} GPU(s) = "
                f"{micro * accumulation * world}, not --global-batch {target}",
                "give --global-batch with one of --micro-batch / --grad-accum (the other is derived), or leave "
                "--global-batch out",
            )
        return choice
    split = batch_for_global(
        target,
        world,
        micro,
        accumulation,
        target_said=f"--global-batch {target}",
        also="another --global-batch",
    )
    assert split is not None
    return replace(choice, micro_batch_size=split[0], gradient_accumulation_steps=split[1])


def choice_advice(chosen: Candidate, plan: Plan) -> list[str]:
    """What to change about one strategy a user chose, in words (``explain.choice_advice_given``), with the split
    of its batch that keeps the global batch where lowering the micro-batch alone would not."""
    return choice_advice_given(chosen, plan, keeping_the_global_batch(plan, chosen))


def keeping_the_global_batch(plan: Plan, chosen: Candidate) -> Candidate | None:
    """For a chosen strategy too large for the GPU: the largest micro-batch below it that fits with the accumulation
    that keeps its global batch (micro-batch x accumulation x world unchanged), when one does (None otherwise).
    Each split is evaluated: more micro-steps can hold more (accumulated gradients, a reduce bucket kept across
    them)."""
    s = chosen.strategy
    if chosen.fits or "gpu" not in chosen.limits or s.mode != "train" or chosen.max_micro_batch <= 0:
        return None
    per_gpu = s.global_batch_size // s.world_size
    for micro in range(min(chosen.max_micro_batch, s.micro_batch_size - 1), 0, -1):
        if per_gpu % micro:
            continue
        split = candidate_for(
            plan, s.with_(micro_batch_size=micro, gradient_accumulation_steps=per_gpu // micro)
        )
        if split.fits:
            return split
    return None


def _as_given(plan: Plan, choice: StrategyChoice) -> Strategy:
    """A strategy from the fixed parts alone, on the plan's hardware, in the plan's precision."""
    hw, req = plan.hardware, plan.request
    precision = (req.precisions or tuple(c.strategy.precision for c in plan.candidates[:1]) or ("bf16",))[0]
    return Strategy(
        zero_stage=3 if choice.zero_stage is None else choice.zero_stage,
        offload_optimizer=choice.offload_optimizer or "none",
        offload_param=choice.offload_param or "none",
        precision=precision,
        activation_checkpointing=bool(choice.activation_checkpointing),
        nodes=hw.nodes,
        gpus_per_node=max(1, hw.gpus_per_node),
        mode=req.mode,
    )


def max_batch_table(
    hardware: HardwareReport, model: ModelSpec, request: PlanRequest | None = None
) -> list[MaxBatchRow]:
    """For every strategy the planner would consider -- stage 0 (the plain data-parallel baseline), ZeRO-1/2/3,
    each offload choice, with and without activation checkpointing -- the largest micro-batch that fits each GPU
    with the margin, and its predicted tokens/s: the table users otherwise find by trial and error. Ordered by
    stage, optimizer offload, parameter offload, checkpointing. A target global batch in ``request`` is ignored."""
    request = replace(request or PlanRequest(), global_batch=None)
    if not hardware.gpus:
        return []
    ctx, _ = _context(hardware, model, request)
    precisions, nvme_ok, _ = _offered(hardware, request, ctx)
    out = []
    for base in _strategies(hardware, request, precisions, nvme_ok):
        if ft.strategy_problems(model, base):
            continue
        sized = _size(ctx, base)
        max_b = sized.max_micro_batch
        # sized short of the remapping (see _size): the table shows the largest micro-batch, with its own figures
        if 0 < max_b != sized.strategy.micro_batch_size:
            s = sized.strategy.with_(micro_batch_size=max_b)
            mem, tp = _predict(ctx, s)
            sized = _Sized(s, max_b, mem, tp, _limits(ctx, mem))
        out.append(
            MaxBatchRow(
                strategy=sized.strategy,
                max_micro_batch=max_b,
                capped=max_b >= request.max_micro_batch,
                tokens_per_sec=sized.throughput.tokens_per_sec if max_b else None,
                gpu_bytes=sized.memory.needed,
                fits=not sized.limits and max_b > 0,
                limits=sized.limits,
            )
        )
    return out


def max_micro_batch(
    hardware: HardwareReport,
    model: ModelSpec,
    strategy: Strategy,
    seq_len: int,
    *,
    safety_margin: float = cal.DEFAULT_SAFETY_MARGIN,
    buffers: ZeroBuffers = DEFAULT_BUFFERS,
    limit: int = 1 << 20,
    gpu_memory_bytes: int | None = None,
    expandable_segments: bool = False,
) -> int:
    """The largest micro-batch of ``strategy`` (its other fields as given) that fits every GPU of ``hardware`` (or a
    card of ``gpu_memory_bytes``) with the margin; 0 when not even 1 fits or there is no GPU. GPU memory only (host
    RAM does not grow with it). ``expandable_segments``: the job runs PyTorch's allocator with them."""
    cap = gpu_memory_bytes or hardware.min_gpu_memory_bytes
    if not cap:
        return 0
    phases = phases_for(model, strategy, seq_len, buffers)
    frag = fragmentation(model, strategy, seq_len, buffers, True, expandable_segments, phases=phases)
    return max_micro_batch_for_capacity(phases, frag, strategy, budget(cap, safety_margin) or 0, limit=limit)
