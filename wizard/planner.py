"""plan(hardware, model, request) -> a ranked list of valid strategies, each with predicted memory and throughput
and its reasons in plain words; advice with numbers when nothing fits.

Pure: no I/O, no terminal. The ranking is "fastest that fits with the safety margin"; ties go to the simpler
strategy with more headroom.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace
from typing import Any

from wizard import calibration as cal
from wizard.errors import DswizError
from wizard.hardware.report import HardwareReport
from wizard.memory import (
    DEFAULT_BUFFERS,
    MemoryEstimate,
    ZeroBuffers,
    deepspeed_estimate,
    estimate_memory,
    fragmentation,
    host_bytes,
    kv_cache_bytes_per_token,
    max_micro_batch_for_capacity,
    phases_for,
)
from wizard.model import ModelSpec
from wizard.strategy import OFFLOAD_DEVICES, Mode, OffloadDevice, Precision, Strategy, strategy_label
from wizard.throughput import ThroughputEstimate, estimate_throughput
from wizard.units import fmt_bytes

DEFAULT_SEQ_LEN = 2048


@dataclass(frozen=True)
class PlanRequest:
    """What the user wants planned. Every field has a sensible default."""

    seq_len: int | None = None  # None: the model's context, at most DEFAULT_SEQ_LEN
    global_batch: int | None = (
        None  # a target train_batch_size; None: the largest micro-batch, no accumulation
    )
    mode: Mode = "train"
    precisions: tuple[Precision, ...] = ()  # empty: the best the GPUs support (bf16, else fp16, else fp32)
    stages: tuple[int, ...] = (0, 1, 2, 3)
    allow_offload: bool = True  # CPU offload of optimizer / parameters
    allow_nvme: bool = True  # NVMe offload, where an NVMe disk and libaio exist
    allow_activation_checkpointing: bool = True
    allow_zeropp: bool = True  # ZeRO++ (hpZ + quantized weights/gradients) on multi-node stage 3
    safety_margin: float = cal.DEFAULT_SAFETY_MARGIN  # share of each GPU's memory left free
    max_micro_batch: int = 1024
    gpu_memory_bytes: int | None = None  # plan for this much per GPU instead of the card's total
    nvme_bytes: int | None = None  # a described NVMe size (overrides the detected disks)
    buffers: ZeroBuffers = DEFAULT_BUFFERS

    def resolved_seq_len(self, model: ModelSpec) -> int:
        if self.seq_len is not None:
            return self.seq_len
        return min(model.max_positions or DEFAULT_SEQ_LEN, DEFAULT_SEQ_LEN)


@dataclass(frozen=True)
class Prediction:
    gpu_bytes: int  # per GPU, device level (reserved + CUDA context + NCCL)
    cpu_bytes: int  # host RAM per node
    nvme_bytes: int  # per node
    tokens_per_sec: float  # whole job
    mfu: float
    step_seconds: float = 0.0
    gpu_allocated_bytes: int = 0  # torch.cuda.max_memory_allocated
    gpu_reserved_bytes: int = 0  # torch.cuda.max_memory_reserved
    peak_phase: str = ""
    breakdown: tuple[tuple[str, int], ...] = ()  # GPU bytes by part at the peak
    cpu_breakdown: tuple[tuple[str, int], ...] = ()
    time_parts: tuple[tuple[str, float], ...] = ()  # seconds per step by cause


@dataclass(frozen=True)
class Candidate:
    strategy: Strategy
    fits: bool
    predicted: Prediction
    reasons: tuple[str, ...]
    headroom_bytes: int  # GPU capacity minus predicted device bytes (negative: short by that much)
    max_micro_batch: int  # the largest micro-batch of this strategy that fits (0: not even 1)
    limits: tuple[str, ...] = ()  # what does not fit: "gpu", "cpu", "nvme"
    deepspeed_estimate: tuple[int, int] | None = None  # (cpu, gpu) bytes from DeepSpeed's own estimator

    @property
    def label(self) -> str:
        return strategy_label(self.strategy)


@dataclass(frozen=True)
class Plan:
    hardware: HardwareReport
    model: ModelSpec
    request: PlanRequest
    seq_len: int
    candidates: tuple[Candidate, ...]  # best first
    gpu_capacity_bytes: int | None
    cpu_capacity_bytes: int | None
    nvme_capacity_bytes: int | None
    advice: tuple[str, ...] = ()  # what would make it fit, when nothing does
    notes: tuple[str, ...] = field(default=())  # what was not offered and why

    @property
    def best(self) -> Candidate | None:
        return self.candidates[0] if self.candidates and self.candidates[0].fits else None


# ----------------------------------------------------------------------------------------------- labels


def _gib(n: float) -> str:
    return fmt_bytes(n)


def _pct(x: float) -> str:
    return f"{x * 100:.0f} %"


# ----------------------------------------------------------------------------------------------- capacities


def _usable_precisions(hardware: HardwareReport, request: PlanRequest) -> tuple[list[Precision], list[str]]:
    notes: list[str] = []
    wanted: tuple[Precision, ...] = request.precisions or ("bf16", "fp16", "fp32")
    ok: list[Precision] = []
    for p in wanted:
        problem = precision_problem(hardware, p)
        if problem:
            notes.append(f"{p} not offered: {problem}")
            continue
        ok.append(p)
    if not request.precisions and ok:
        ok = ok[:1]  # the best supported one; 16-bit halves memory and doubles speed over fp32
    return ok, notes


def _cc(cc: tuple[int, int] | None) -> str:
    return "unknown" if cc is None else f"{cc[0]}.{cc[1]}"


@dataclass(frozen=True)
class Capacities:
    """What each memory tier holds, as the planner judges "fits" against it (None: unknown)."""

    gpu: int | None  # per GPU: the request's cap, else the smallest card
    cpu: int | None  # host RAM per node: available RAM on a detected machine, else the total
    nvme: int | None  # usable NVMe per node: the described size, else the largest free NVMe disk
    notes: tuple[str, ...] = ()


def capacities(hardware: HardwareReport, request: PlanRequest | None = None) -> Capacities:
    """The capacities every plan, evaluation and front door judges against."""
    request = request or PlanRequest()
    notes: list[str] = []
    gpu_cap = request.gpu_memory_bytes or hardware.min_gpu_memory_bytes
    host = hardware.host
    if hardware.source == "detected" and host.ram_available_bytes:
        cpu_cap: int | None = host.ram_available_bytes
    else:
        cpu_cap = host.ram_total_bytes
    if cpu_cap is None:
        notes.append("host RAM unknown: CPU offload is not checked against it")
    nvme_cap: int | None = request.nvme_bytes
    if nvme_cap is None:
        free = [d.free_bytes for d in host.disks if d.nvme]
        nvme_cap = max(free) if free else None
    return Capacities(gpu_cap, cpu_cap, nvme_cap, tuple(notes))


def _capacities(
    hardware: HardwareReport, request: PlanRequest
) -> tuple[int | None, int | None, int | None, list[str]]:
    c = capacities(hardware, request)
    return c.gpu, c.cpu, c.nvme, list(c.notes)


def _nvme_usable(
    hardware: HardwareReport, request: PlanRequest, nvme_cap: int | None
) -> tuple[bool, str | None]:
    if not request.allow_nvme:
        return False, None
    problem = _nvme_problem(hardware, request, nvme_cap)
    return problem is None, None if problem is None else f"NVMe offload not offered: {problem}"


# ----------------------------------------------------------------------------------------------- hardware problems


def precision_problem(hardware: HardwareReport, precision: str) -> str | None:
    """Why these GPUs cannot compute in ``precision`` (from their compute capability), or None."""
    for gpu in hardware.gpus:
        cc = _cc(gpu.compute_capability)
        if precision == "bf16" and gpu.supports_bf16 is False:
            return f"{gpu.name} has compute capability {cc}; bf16 needs 8.0 (Ampere) or newer"
        if precision == "fp16" and gpu.supports_fp16 is False:
            return f"{gpu.name} has compute capability {cc}; fp16 needs 7.0 (Volta) or newer"
    return None


def _nvme_problem(hardware: HardwareReport, request: PlanRequest, nvme_cap: int | None) -> str | None:
    if nvme_cap is None:
        return "no NVMe disk found (describe one with --nvme SIZE)"
    if request.nvme_bytes is not None:
        return None  # described by the user: trusted
    if hardware.host.libaio is False:
        return "libaio is missing, so DeepSpeed's async_io op cannot build (Debian/Ubuntu: apt install libaio-dev)"
    if hardware.host.libaio is None and hardware.source == "detected":
        return "could not tell whether libaio is installed (DeepSpeed's async_io op needs it)"
    return None


def _host_ram_problem(
    hardware: HardwareReport, request: PlanRequest, model: ModelSpec, s: Strategy
) -> str | None:
    if s.offload_optimizer == "none" and s.offload_param == "none":
        return None
    _, cpu_cap, _, _ = _capacities(hardware, request)
    if cpu_cap is None:
        return None
    need, _ = host_bytes(model, s)
    if need <= cpu_cap * (1 - cal.HOST_SAFETY_MARGIN):
        return None
    return (
        f"host RAM too small for this offload: needs {_gib(need)} per node, {_gib(cpu_cap)} available "
        f"({_pct(cal.HOST_SAFETY_MARGIN)} kept free)"
    )


def hardware_problems(
    hardware: HardwareReport,
    strategy: Strategy,
    request: PlanRequest | None = None,
    *,
    model: ModelSpec | None = None,
) -> list[str]:
    """Why this machine cannot run ``strategy`` at all, in words (empty when it can): NVMe offload without an NVMe
    disk or libaio, a precision the GPUs lack (bf16 below compute capability 8.0, fp16 below 7.0), more nodes or
    GPUs per node than the hardware has, and -- when ``model`` is given -- host RAM too small for the offload.

    One source of truth: the planner never proposes a strategy with a problem here (host RAM aside: for the planner
    that is a "does not fit" with advice on how much more RAM would), the wizard disables it with the reason.
    ``Strategy.problems`` holds the combinations DeepSpeed itself rejects."""
    request = request or PlanRequest()
    out: list[str] = []
    problem = precision_problem(hardware, strategy.precision)
    if problem:
        out.append(problem)
    if "nvme" in (strategy.offload_optimizer, strategy.offload_param):
        nvme_cap = _capacities(hardware, request)[2]
        problem = _nvme_problem(hardware, request, nvme_cap)
        if problem:
            out.append(f"NVMe offload: {problem}")
    if hardware.gpus and strategy.nodes > hardware.nodes:
        out.append(f"{strategy.nodes} nodes asked for, the hardware has {hardware.nodes}")
    if hardware.gpus and strategy.gpus_per_node > hardware.gpus_per_node:
        out.append(
            f"{strategy.gpus_per_node} GPUs per node asked for, the hardware has {hardware.gpus_per_node}"
        )
    if model is not None:
        problem = _host_ram_problem(hardware, request, model, strategy)
        if problem:
            out.append(problem)
    return out


# ----------------------------------------------------------------------------------------------- candidates


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
class _Ctx:
    hardware: HardwareReport
    model: ModelSpec
    request: PlanRequest
    seq_len: int
    gpu_cap: int | None
    cpu_cap: int | None
    nvme_cap: int | None

    @property
    def gpu_budget(self) -> int:
        return int((self.gpu_cap or 0) * (1 - self.request.safety_margin))

    @property
    def cpu_budget(self) -> int | None:
        return None if self.cpu_cap is None else int(self.cpu_cap * (1 - cal.HOST_SAFETY_MARGIN))


def _evaluate(
    ctx: _Ctx, base: Strategy
) -> tuple[Strategy, bool, int, tuple[str, ...], MemoryEstimate, ThroughputEstimate]:
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
    frag = fragmentation(ctx.model, base, ctx.seq_len)
    max_b = max_micro_batch_for_capacity(phases, frag, base, ctx.gpu_budget, limit=limit)
    if per_gpu is None:
        mbs, gas = max(1, max_b), 1
    elif (
        base.mode == "inference"
    ):  # no accumulation without gradients: the batch per forward is the micro-batch
        mbs, gas = per_gpu, 1
    else:
        max_b_acc = max_micro_batch_for_capacity(phases_acc, frag, probe, ctx.gpu_budget, limit=limit)
        if per_gpu <= max_b:
            mbs = per_gpu
        else:
            fitting = _divisors_desc(per_gpu, max_b_acc)
            mbs = fitting[0] if fitting else 1
        gas = per_gpu // mbs
        if gas > 1:
            max_b = max_b_acc  # the largest micro-batch of the strategy as chosen, accumulating
    s = base.with_(micro_batch_size=mbs, gradient_accumulation_steps=gas)
    mem = estimate_memory(ctx.model, s, ctx.seq_len, ctx.request.buffers)
    tp = estimate_throughput(ctx.hardware, ctx.model, s, ctx.seq_len)
    limits = _limits(ctx, mem)
    return s, not limits, max_b, limits, mem, tp


def _limits(ctx: _Ctx, mem: MemoryEstimate) -> tuple[str, ...]:
    """What does not fit: "gpu", "cpu" (host RAM), "nvme"."""
    limits = []
    if ctx.gpu_cap is None or mem.device > ctx.gpu_budget:
        limits.append("gpu")
    if ctx.cpu_budget is not None and mem.cpu > ctx.cpu_budget:
        limits.append("cpu")
    if mem.nvme and (ctx.nvme_cap is None or mem.nvme > ctx.nvme_cap):
        limits.append("nvme")
    return tuple(limits)


def _prediction(mem: MemoryEstimate, tp: ThroughputEstimate) -> Prediction:
    return Prediction(
        gpu_bytes=mem.device,
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
    over = c.predicted.gpu_bytes / max(1, c.predicted.gpu_bytes + c.headroom_bytes)
    return (1, len(c.limits), round(over, 3), -c.predicted.tokens_per_sec, simplicity)


def _prefer_simpler(cands: list[Candidate]) -> list[Candidate]:
    """Within the model's accuracy (RECOMMEND_SIMPLER_WITHIN) of the fastest, recommend the simplest strategy:
    a 1 % predicted gain does not justify offloading or a code change."""
    if not cands or not cands[0].fits:
        return cands
    floor = cands[0].predicted.tokens_per_sec * (1 - cal.RECOMMEND_SIMPLER_WITHIN)
    pool = [i for i, c in enumerate(cands) if c.fits and c.predicted.tokens_per_sec >= floor]
    pick = min(pool, key=lambda i: (_complexity(cands[i].strategy), i))
    return [cands[pick], *cands[:pick], *cands[pick + 1 :]]


# ----------------------------------------------------------------------------------------------- reasons


def _intrinsic_reasons(ctx: _Ctx, c: Candidate, mem: MemoryEstimate, tp: ThroughputEstimate) -> list[str]:
    s, m = c.strategy, ctx.model
    out: list[str] = []
    if ctx.gpu_cap is None:
        out.append("no GPU to fit on: plan for described hardware with --hardware")
    elif "gpu" in c.limits:
        out.append(
            f"does not fit: needs {_gib(mem.device)} per GPU, {_gib(-c.headroom_bytes)} more than the "
            f"{_gib(ctx.gpu_cap)} card allows"
            + (f" with the {_pct(ctx.request.safety_margin)} margin" if ctx.request.safety_margin else "")
        )
    else:
        out.append(
            f"fits: {_gib(mem.device)} of {_gib(ctx.gpu_cap)} per GPU ({_gib(c.headroom_bytes)} spare, "
            f"{_pct(ctx.request.safety_margin)} margin kept)"
        )
    if ctx.cpu_cap is None and (s.offload_optimizer != "none" or s.offload_param != "none"):
        out.append(
            f"needs {_gib(mem.cpu)} host RAM per node (not checked: RAM unknown; describe it, e.g. ram=1TiB)"
        )
    if "cpu" in c.limits and ctx.cpu_cap is not None:
        out.append(f"host RAM short: needs {_gib(mem.cpu)} per node, {_gib(ctx.cpu_cap)} available")
    if "nvme" in c.limits:
        have = _gib(ctx.nvme_cap) if ctx.nvme_cap is not None else "no NVMe disk"
        out.append(f"NVMe short: needs {_gib(mem.nvme)} per node, {have}")
    target = ctx.request.global_batch
    if target is not None or s.gradient_accumulation_steps > 1:
        text = (
            f"batch: micro-batch {s.micro_batch_size} x {s.gradient_accumulation_steps} accumulation steps x "
            f"{s.world_size} GPUs = global batch {s.global_batch_size}"
        )
        out.append(text + (f" (the target is {target})" if target not in (None, s.global_batch_size) else ""))
    elif c.fits and ctx.gpu_cap:
        nxt = mem.device + mem.per_sample_device
        if s.micro_batch_size >= ctx.request.max_micro_batch:
            out.append(f"micro-batch {s.micro_batch_size} (the cap; more would fit)")
        elif s.micro_batch_size < c.max_micro_batch:
            out.append(f"micro-batch {s.micro_batch_size} fits; up to {c.max_micro_batch} would")
        else:
            out.append(
                f"micro-batch {s.micro_batch_size} is the largest that fits "
                f"({s.micro_batch_size + 1} would need {_gib(nxt)})"
            )
    if "gpu" in c.limits and ctx.gpu_cap and 0 < c.max_micro_batch < s.micro_batch_size:
        out.append(f"micro-batch {c.max_micro_batch} would fit")
    out.append(_memory_reason(mem))
    out.append(_stage_reason(ctx, s, mem))
    if s.activation_checkpointing:
        out.append(
            "activation checkpointing: keeps one input per layer, recomputes the forward (~33 % more compute)"
        )
    top = ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in tp.parts[:3])
    per = "per step" if s.mode == "train" else "per forward"
    out.append(f"~{tp.tokens_per_sec:,.0f} tokens/s, MFU {_pct(tp.mfu)}; {per}: {top}")
    if s.mode == "inference":
        out += _inference_reasons(ctx, s)
    if tp.peak_source != "catalog":
        out.append(f"GPU peak {tp.peak_flops_per_gpu / 1e12:.0f} TFLOP/s taken from the {tp.peak_source}")
    if m.is_moe:
        out.append(
            f"MoE: memory counts all {m.total_params / 1e9:.1f} B parameters, compute the "
            f"{m.active_params / 1e9:.1f} B a token uses ({m.experts_per_token} of {m.num_experts} experts)"
        )
    if m.is_moe and s.zero_stage == 3 and m.moe_layer_cls_name:
        out.append(
            f"MoE at stage 3: {m.moe_layer_cls_name} must be a ZeRO-3 leaf (its experts fetched together); "
            "dswiz config writes it (zero_optimization.leaf_module, or accelerate's deepspeed_moe_layer_cls_names)"
        )
    return out


def _inference_reasons(ctx: _Ctx, s: Strategy) -> list[str]:
    """What an inference prediction assumes, and what generation would add, in numbers."""
    m = ctx.model
    kv = kv_cache_bytes_per_token(m) * ctx.seq_len
    decode = estimate_throughput(ctx.hardware, m, s, 1).step_seconds
    return [
        f"counts one forward over micro-batch x {ctx.seq_len} tokens that scores every position (evaluation); "
        f"generation's KV cache is not counted: it adds {_gib(kv)} per sample at {ctx.seq_len} tokens",
        f"generation: ~{decode * 1000:,.0f} ms per new token for the micro-batch "
        + (
            "(every token fetches all weights again: bound by the transfers)"
            if s.offload_param != "none" or s.world_size > 1
            else "(every token reads all weights from GPU memory)"
        ),
    ]


_STATE_ITEMS = ("parameters", "optimizer states", "accumulated gradients", "gradients for the update")
_ACTIVATION_ITEMS = (
    "activations",
    "loss head (logits, fp32 upcast)",
    "backward transient (one layer)",
    "activations (one layer)",
    "logits (16-bit + fp32 scores)",
)


def _memory_reason(mem: MemoryEstimate) -> str:
    items = dict(mem.gpu_items)
    states = sum(items.get(k, 0) for k in _STATE_ITEMS)
    acts = sum(items.get(k, 0) for k in _ACTIVATION_ITEMS)
    buffers = mem.allocated - states - acts
    outside = mem.device - mem.allocated
    text = f"peak during {mem.peak_phase}: " + (
        f"model states {_gib(states)}" if states else "model states off the GPU"
    )
    if acts:
        text += f", activations {_gib(acts)} ({_gib(mem.per_sample_device)} per sample)"
    if buffers:
        text += f", DeepSpeed buffers {_gib(buffers)}"
    return text + f", allocator cache + CUDA context + NCCL {_gib(outside)}"


def _stage_reason(ctx: _Ctx, s: Strategy, mem: MemoryEstimate) -> str:
    N = s.world_size
    items = dict(mem.gpu_items)
    opt = items.get("optimizer states", 0)
    if s.mode == "inference":
        where = (
            "on the CPU"
            if s.offload_param == "cpu"
            else ("on NVMe" if s.offload_param == "nvme" else f"sharded over {N} GPUs")
        )
        return f"ZeRO-3 inference: 16-bit weights {where}, gathered layer by layer"
    if s.zero_stage == 0:
        return f"stage 0: every GPU keeps all model states (optimizer {_gib(opt)})"
    if N == 1:
        text = f"stage {s.zero_stage} on one GPU shards nothing"
        text += ": its fetch hooks still run every micro-step" if s.zero_stage == 3 else ""
    else:
        text = {
            1: f"stage 1: optimizer states sharded over {N} GPUs",
            2: f"stage 2: optimizer states and gradients sharded over {N} GPUs",
            3: f"stage 3: parameters, gradients and optimizer states sharded over {N} GPUs, "
            "weights gathered every micro-step",
        }[s.zero_stage]
    if s.offload_optimizer == "cpu":
        text += f"; optimizer on the CPU ({_gib(mem.cpu)} host RAM per node, CPU Adam each step)"
    elif s.offload_optimizer == "nvme":
        text += f"; optimizer states on NVMe ({_gib(mem.nvme)} per node)"
    elif opt:
        text += f" (optimizer states {_gib(opt)} per GPU)"
    if s.offload_param != "none":
        text += (
            f"; parameters on {'the CPU' if s.offload_param == 'cpu' else 'NVMe'}, fetched every micro-step"
        )
    if s.zero_hpz_partition_size > 1:
        text += "; ZeRO++: a second weight copy inside each node, int8 weights and int4 gradients on the wire"
    return text


def _comparisons(best: Candidate, others: list[Candidate]) -> list[str]:
    """For the recommendation: what each simpler or different choice would cost, in numbers."""
    out: list[str] = []
    s = best.strategy
    seen: set[str] = set()

    def group(c: Candidate) -> str:
        t = c.strategy
        if (t.offload_optimizer, t.offload_param) != (s.offload_optimizer, s.offload_param) or (
            t.zero_stage != s.zero_stage
        ):
            return f"stage {t.zero_stage}{_offload_words(t)}"
        if t.activation_checkpointing != s.activation_checkpointing:
            return "activation checkpointing" if t.activation_checkpointing else "no activation checkpointing"
        return ""

    for c in others:
        g = group(c)
        if not g or g in seen:
            continue
        seen.add(g)
        if not c.fits:
            need = c.predicted.gpu_bytes
            if "gpu" in c.limits:
                out.append(f"{g} does not fit (needs {_gib(need)} per GPU)")
            else:
                out.append(f"{g} does not fit ({', '.join(c.limits)} short)")
            continue
        loss = 1 - c.predicted.tokens_per_sec / best.predicted.tokens_per_sec
        if loss < -0.005:
            out.append(
                f"{g} is predicted ~{_pct(-loss)} faster (micro-batch {c.strategy.micro_batch_size}): within the "
                "model's accuracy, so the simpler strategy is recommended"
            )
        elif loss > 0.005:
            why = ""
            if g == "activation checkpointing" and c.strategy.micro_batch_size > s.micro_batch_size:
                why = f", even at micro-batch {c.strategy.micro_batch_size}"
            out.append(f"{g} would cost ~{_pct(loss)} throughput{why}")
        else:
            out.append(f"{g} is as fast (within 1 %)")
    return out[:5]


def _offload_words(t: Strategy) -> str:
    where = {"cpu": "the CPU", "nvme": "NVMe"}
    opt, par = t.offload_optimizer, t.offload_param
    if opt != "none" and opt == par:
        return f" with optimizer and parameters on {where[opt]}"
    words = []
    if opt != "none":
        words.append(f"optimizer on {where[opt]}")
    if par != "none":
        words.append(f"parameters on {where[par]}")
    return (" with " + " and ".join(words)) if words else ""


def _ds_reason(c: Candidate) -> str | None:
    if c.deepspeed_estimate is None:
        return None
    _, gpu = c.deepspeed_estimate
    return (
        f"DeepSpeed's own estimator says {_gib(gpu)} per GPU: model states only "
        f"(no activations, buffers or CUDA context)"
    )


# ----------------------------------------------------------------------------------------------- plan


def _core(
    hardware: HardwareReport, model: ModelSpec, request: PlanRequest
) -> tuple[_Ctx, list[Candidate], list[str]]:
    seq_len = request.resolved_seq_len(model)
    gpu_cap, cpu_cap, nvme_cap, notes = _capacities(hardware, request)
    ctx = _Ctx(hardware, model, request, seq_len, gpu_cap, cpu_cap, nvme_cap)
    precisions, pnotes = _usable_precisions(hardware, request)
    notes += pnotes
    nvme_ok, nvme_note = _nvme_usable(hardware, request, nvme_cap)
    if nvme_note and request.allow_offload:
        notes.append(nvme_note)
    world = max(1, hardware.total_gpus)
    if request.global_batch is not None and request.global_batch % world:
        lo = request.global_batch // world * world
        fix = f"use {lo} or {lo + world}" if lo else f"use a multiple of {world}, e.g. {world}"
        raise DswizError(
            f"global batch {request.global_batch} is not a multiple of the {world} GPUs "
            "(DeepSpeed needs micro-batch x accumulation x GPUs = global batch)",
            fix,
        )
    if not hardware.gpus:
        return ctx, [], notes
    out: list[Candidate] = []
    for base in _strategies(hardware, request, precisions, nvme_ok):
        s, fits, max_b, limits, mem, tp = _evaluate(ctx, base)
        c = Candidate(
            strategy=s,
            fits=fits,
            predicted=_prediction(mem, tp),
            reasons=(),
            headroom_bytes=(ctx.gpu_budget - mem.device) if gpu_cap else -mem.device,
            max_micro_batch=max_b,
            limits=limits,
            deepspeed_estimate=deepspeed_estimate(model, s),
        )
        out.append(replace(c, reasons=tuple(_intrinsic_reasons(ctx, c, mem, tp))))
    out.sort(key=_rank_key)
    return ctx, _prefer_simpler(out), notes


def plan(hardware: HardwareReport, model: ModelSpec, request: PlanRequest | None = None) -> Plan:
    """Rank every valid strategy for this hardware and model. Raises DswizError only for contradictory input
    (a global batch that the GPUs cannot divide)."""
    request = request or PlanRequest()
    ctx, cands, notes = _core(hardware, model, request)
    advice: tuple[str, ...] = ()
    if cands and cands[0].fits:
        best = cands[0]
        extra = _comparisons(best, cands[1:])
        ds = _ds_reason(best)
        reasons = list(best.reasons) + extra + ([ds] if ds else [])
        cands[0] = replace(best, reasons=tuple(reasons))
    else:
        advice = tuple(_advice(ctx, cands))
    return Plan(
        hardware=hardware,
        model=model,
        request=request,
        seq_len=ctx.seq_len,
        candidates=tuple(cands),
        gpu_capacity_bytes=ctx.gpu_cap,
        cpu_capacity_bytes=ctx.cpu_cap,
        nvme_capacity_bytes=ctx.nvme_cap,
        advice=advice,
        notes=tuple(notes),
    )


def evaluate(
    hardware: HardwareReport, model: ModelSpec, strategy: Strategy, request: PlanRequest | None = None
) -> Candidate:
    """The planner's prediction for one strategy exactly as given (a hand-edited one: any stage, offloads,
    micro-batch, accumulation, checkpointing), with fits / predicted / reasons like a planned candidate. A strategy
    DeepSpeed rejects (``Strategy.problems``) or this machine cannot run (``hardware_problems``) does not fit, limit
    "unsupported", and says why first."""
    request = request or PlanRequest()
    seq_len = request.resolved_seq_len(model)
    gpu_cap, cpu_cap, nvme_cap, _ = _capacities(hardware, request)
    ctx = _Ctx(hardware, model, request, seq_len, gpu_cap, cpu_cap, nvme_cap)
    s = strategy
    mem = estimate_memory(model, s, seq_len, request.buffers)
    tp = estimate_throughput(hardware, model, s, seq_len)
    phases = phases_for(model, s, seq_len, request.buffers)
    max_b = max_micro_batch_for_capacity(
        phases, fragmentation(model, s, seq_len), s, ctx.gpu_budget, limit=request.max_micro_batch
    )
    problems = [*s.problems(), *hardware_problems(hardware, s, request)]
    limits = _limits(ctx, mem) + (("unsupported",) if problems else ())
    c = Candidate(
        strategy=s,
        fits=not limits,
        predicted=_prediction(mem, tp),
        reasons=(),
        headroom_bytes=(ctx.gpu_budget - mem.device) if gpu_cap else -mem.device,
        max_micro_batch=max_b,
        limits=limits,
        deepspeed_estimate=deepspeed_estimate(model, s),
    )
    reasons = [f"not possible here: {p}" for p in problems] + _intrinsic_reasons(ctx, c, mem, tp)
    return replace(c, reasons=tuple(reasons))


@dataclass(frozen=True)
class MaxBatchRow:
    """One line of the max-batch table: a strategy at the largest micro-batch that fits (accumulation 1)."""

    strategy: Strategy  # micro_batch_size = max_micro_batch (1 when not even that fits)
    max_micro_batch: int  # 0: not even 1 fits the GPU
    capped: bool  # reached the request's max_micro_batch: more would fit
    tokens_per_sec: float | None  # predicted at max_micro_batch; None when it is 0
    gpu_bytes: int  # predicted device bytes per GPU at that micro-batch
    fits: bool  # max_micro_batch >= 1 and host RAM / NVMe suffice
    limits: tuple[str, ...]  # what does not fit: "gpu", "cpu", "nvme"

    @property
    def label(self) -> str:
        return strategy_label(self.strategy)


def max_batch_table(
    hardware: HardwareReport, model: ModelSpec, request: PlanRequest | None = None
) -> list[MaxBatchRow]:
    """For every strategy the planner would consider -- stage 0 (the plain data-parallel baseline), ZeRO-1/2/3,
    each offload choice, with and without activation checkpointing -- the largest micro-batch that fits each GPU
    with the margin, and its predicted tokens/s: the table users otherwise find by trial and error. Ordered by
    stage, optimizer offload, parameter offload, checkpointing. A target global batch in ``request`` is ignored."""
    request = replace(request or PlanRequest(), global_batch=None)
    seq_len = request.resolved_seq_len(model)
    gpu_cap, cpu_cap, nvme_cap, _ = _capacities(hardware, request)
    if not hardware.gpus:
        return []
    ctx = _Ctx(hardware, model, request, seq_len, gpu_cap, cpu_cap, nvme_cap)
    precisions, _ = _usable_precisions(hardware, request)
    nvme_ok, _ = _nvme_usable(hardware, request, nvme_cap)
    out = []
    for base in _strategies(hardware, request, precisions, nvme_ok):
        s, fits, max_b, limits, mem, tp = _evaluate(ctx, base)
        out.append(
            MaxBatchRow(
                strategy=s,
                max_micro_batch=max_b,
                capped=max_b >= request.max_micro_batch,
                tokens_per_sec=tp.tokens_per_sec if max_b else None,
                gpu_bytes=mem.device,
                fits=fits and max_b > 0,
                limits=limits,
            )
        )
    return out


def max_batch_to_json(rows: list[MaxBatchRow]) -> list[dict[str, Any]]:
    """``dswiz plan --json --max-batch``: the "max_batch_table" list."""
    return [
        {
            "label": r.label,
            "zero_stage": r.strategy.zero_stage,
            "offload_optimizer": r.strategy.offload_optimizer,
            "offload_param": r.strategy.offload_param,
            "precision": r.strategy.precision,
            "activation_checkpointing": r.strategy.activation_checkpointing,
            "zeropp": bool(r.strategy.zero_quantized_weights or r.strategy.zero_hpz_partition_size > 1),
            "max_micro_batch": r.max_micro_batch,
            "capped": r.capped,
            "tokens_per_sec": None if r.tokens_per_sec is None else float(round(r.tokens_per_sec, 1)),
            "gpu_bytes": int(r.gpu_bytes),
            "fits": r.fits,
            "limits": list(r.limits),
        }
        for r in rows
    ]


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
) -> int:
    """The largest micro-batch of ``strategy`` (its other fields as given) that fits every GPU of ``hardware`` (or a
    card of ``gpu_memory_bytes``) with the margin; 0 when not even 1 fits or there is no GPU. GPU memory only (host
    RAM does not grow with it)."""
    cap = gpu_memory_bytes or hardware.min_gpu_memory_bytes
    if not cap:
        return 0
    phases = phases_for(model, strategy, seq_len, buffers)
    frag = fragmentation(model, strategy, seq_len)
    return max_micro_batch_for_capacity(phases, frag, strategy, int(cap * (1 - safety_margin)), limit=limit)


# ----------------------------------------------------------------------------------------------- advice


def _advice(ctx: _Ctx, cands: list[Candidate]) -> list[str]:
    hw, model, req = ctx.hardware, ctx.model, ctx.request
    out: list[str] = []
    if not hw.gpus:
        reason = f" ({hw.no_gpu_reason})" if hw.no_gpu_reason else ""
        out.append(
            f"no NVIDIA GPU here{reason}: plan for the machine you will train on, "
            "e.g. --hardware 8xA100-80GB or --hardware 2x8xH100"
        )
        return out
    gpn = hw.gpus_per_node
    # More GPUs: double the node count (or the GPUs of one node) until something fits.
    for factor in (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024):
        bigger = replace(hw, nodes=hw.nodes * factor) if gpn else hw
        if req.global_batch is not None and req.global_batch % bigger.total_gpus:
            continue
        try:
            _, more, _ = _core(bigger, model, req)
        except DswizError:
            continue
        if more and more[0].fits:
            c = more[0]
            out.append(
                f"{bigger.nodes} nodes x {gpn} GPUs ({bigger.total_gpus} GPUs) would fit: {c.label}, "
                f"{_gib(c.predicted.gpu_bytes)} per GPU, ~{c.predicted.tokens_per_sec:,.0f} tokens/s"
            )
            break
    else:
        out.append("even 1024x the GPUs would not fit this model at this sequence length")
    # What the most frugal strategy needs per GPU.
    gpu_short = [c for c in cands if c.limits == ("gpu",)]
    if gpu_short:
        frugal = min(gpu_short, key=lambda c: c.predicted.gpu_bytes)
        need = frugal.predicted.gpu_bytes / (1 - req.safety_margin)
        out.append(f"a GPU with at least {_gib(need)} would fit {frugal.label} at micro-batch 1")
    # Host RAM for offload.
    cpu_short = [c for c in cands if c.limits == ("cpu",)]
    if cpu_short and ctx.cpu_cap is not None:
        c = min(cpu_short, key=lambda c: c.predicted.cpu_bytes)
        need = c.predicted.cpu_bytes / (1 - cal.HOST_SAFETY_MARGIN)
        out.append(
            f"{_gib(need - ctx.cpu_cap)} more host RAM per node ({_gib(need)} in all) would fit {c.label}"
        )
    # NVMe offload.
    if req.allow_offload:  # inference too: NVMe parameter offload runs a model larger than GPUs and RAM
        nvme_try = replace(req, nvme_bytes=1 << 60, allow_nvme=True)
        _, with_nvme, _ = _core(hw, model, nvme_try)
        fitting = [c for c in with_nvme if c.fits and c.predicted.nvme_bytes]
        if fitting:
            c = fitting[0]
            out.append(
                f"an NVMe disk with {_gib(c.predicted.nvme_bytes)} free per node (and libaio) would fit {c.label}"
            )
    # Shorter sequences.
    seq = ctx.seq_len // 2
    while seq >= 128:
        _, shorter, _ = _core(hw, model, replace(req, seq_len=seq))
        if shorter and shorter[0].fits:
            c = shorter[0]
            out.append(
                f"sequence length {seq} would fit: {c.label}, micro-batch {c.strategy.micro_batch_size}"
            )
            break
        seq //= 2
    else:
        if ctx.seq_len > 128:
            out.append("a shorter sequence alone would not help: the model states themselves do not fit")
    return out


# ----------------------------------------------------------------------------------------------- JSON


def candidate_to_json(c: Candidate) -> dict[str, Any]:
    s = c.strategy
    p = c.predicted
    ds = c.deepspeed_estimate
    return {
        "zero_stage": s.zero_stage,
        "offload_optimizer": s.offload_optimizer,
        "offload_param": s.offload_param,
        "precision": s.precision,
        "micro_batch_size": s.micro_batch_size,
        "gradient_accumulation_steps": s.gradient_accumulation_steps,
        "activation_checkpointing": s.activation_checkpointing,
        "fits": c.fits,
        "predicted": {
            "gpu_bytes": int(p.gpu_bytes),
            "cpu_bytes": int(p.cpu_bytes),
            "nvme_bytes": int(p.nvme_bytes),
            "tokens_per_sec": float(round(p.tokens_per_sec, 1)),
            "mfu": float(round(p.mfu, 4)),
            "step_seconds": float(round(p.step_seconds, 6)),
            "gpu_allocated_bytes": int(p.gpu_allocated_bytes),
            "gpu_reserved_bytes": int(p.gpu_reserved_bytes),
            "peak_phase": p.peak_phase,
            "breakdown": {k: int(v) for k, v in p.breakdown},
            "cpu_breakdown": {k: int(v) for k, v in p.cpu_breakdown},
            "time_seconds": {k: float(round(v, 6)) for k, v in p.time_parts},
        },
        "reasons": list(c.reasons),
        "label": c.label,
        "headroom_bytes": int(c.headroom_bytes),
        "max_micro_batch": int(c.max_micro_batch),
        "limits": list(c.limits),
        "deepspeed_estimate": None if ds is None else {"cpu_bytes": int(ds[0]), "gpu_bytes": int(ds[1])},
        "strategy": s.to_dict(),
    }


def plan_to_json(plan: Plan, candidates: tuple[Candidate, ...] | None = None) -> dict[str, Any]:
    """The stable ``dswiz plan --json`` document (issue 3): hardware, model, candidates best first; more fields are
    additions."""
    cands = plan.candidates if candidates is None else candidates
    req = plan.request
    return {
        "hardware": plan.hardware.to_dict(),
        "model": plan.model.to_dict(),
        "request": {
            "seq_len": plan.seq_len,
            "global_batch": req.global_batch,
            "mode": req.mode,
            "precisions": list(req.precisions),
            "safety_margin": req.safety_margin,
        },
        "capacity": {
            "gpu_bytes": plan.gpu_capacity_bytes,
            "cpu_bytes": plan.cpu_capacity_bytes,
            "nvme_bytes": plan.nvme_capacity_bytes,
        },
        "best": None if plan.best is None else 0,
        "candidates": [candidate_to_json(c) for c in cands],
        "advice": list(plan.advice),
        "notes": list(plan.notes),
    }


__all__ = [
    "Candidate",
    "MaxBatchRow",
    "Plan",
    "PlanRequest",
    "Prediction",
    "candidate_to_json",
    "evaluate",
    "hardware_problems",
    "max_batch_table",
    "max_batch_to_json",
    "max_micro_batch",
    "plan",
    "plan_to_json",
    "strategy_label",
]
