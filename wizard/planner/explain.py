"""The planner's words: why each candidate fits or not (memory at the peak, what the stage shards, the batch, the
speed), what the recommendation would cost against the alternatives, and the advice when nothing fits. Numbers in,
English out; nothing here decides what fits."""

from __future__ import annotations

import shlex

from wizard.hardware.report import HardwareReport
from wizard.planner import calibration as cal
from wizard.planner.memory import (
    CUBLAS_WORKSPACE_ITEM,
    KV_CACHE_ITEM,
    MemoryEstimate,
    estimate_memory,
    sdpa_padded_head_dim,
    sdpa_padding_bytes_per_sample,
)
from wizard.planner.throughput import (
    CPU_ADAM_PART,
    ThroughputEstimate,
    estimate_throughput,
    host_bound,
    host_share,
)
from wizard.planner.types import Candidate, GenerationCost, Plan, PlanContext, WhatIfs, budget
from wizard.planner.zero3 import stage3_training_gathers
from wizard.strategy import Strategy
from wizard.units import GiB, fmt_bytes, fmt_percent


def intrinsic_reasons(
    ctx: PlanContext,
    c: Candidate,
    mem: MemoryEstimate,
    tp: ThroughputEstimate,
    generation: GenerationCost | None = None,
) -> list[str]:
    """One candidate's reasons on its own: fits or by how much not, the batch, the memory at the peak, what its
    stage shards, the speed and where the step's time goes, and what an inference (``generation``: what generating
    would add) or MoE prediction assumes."""
    s, m = c.strategy, ctx.model
    out: list[str] = []
    if ctx.gpu_cap is None:
        out.append("no GPU to fit on: plan for described hardware with --hardware")
    elif "gpu" in c.limits:
        out.append(
            f"does not fit: needs {fmt_bytes(mem.needed)} per GPU, {fmt_bytes(-c.headroom_bytes)} more than the "
            f"{fmt_bytes(ctx.gpu_cap)} "
            + ("planned for (--gpu-memory) allows" if ctx.request.gpu_memory_bytes else "card allows")
            + (
                f" with the {fmt_percent(ctx.request.safety_margin)} margin"
                if ctx.request.safety_margin
                else ""
            )
        )
    elif "unsupported" in c.limits:  # the memory of the config as written, which DeepSpeed does not run
        out.append(
            f"memory as written: {fmt_bytes(mem.needed)} of {fmt_bytes(ctx.gpu_cap)} per GPU would be room enough, "
            "but the combination above is not one DeepSpeed runs"
        )
    else:
        out.append(
            f"fits: needs {fmt_bytes(mem.needed)} of {fmt_bytes(ctx.gpu_cap)} per GPU ({fmt_bytes(c.headroom_bytes)} "
            f"spare, {fmt_percent(ctx.request.safety_margin)} margin kept)"
            + (
                f"; a card with room shows up to {fmt_bytes(mem.device)}: PyTorch's allocator keeps freed blocks "
                "cached, and gives back the whole ones before it runs out"
                if mem.device > mem.needed + GiB // 2
                else ""
            )
        )
    if ctx.cpu_cap is None and (s.offload_optimizer != "none" or s.offload_param != "none"):
        out.append(
            f"needs {fmt_bytes(mem.cpu)} host RAM per node (not checked: RAM unknown; describe it, e.g. ram=1TiB)"
        )
    if "cpu" in c.limits and ctx.cpu_cap is not None:
        out.append(f"host RAM short: needs {fmt_bytes(mem.cpu)} per node, {fmt_bytes(ctx.cpu_cap)} available")
    if "nvme" in c.limits:
        have = fmt_bytes(ctx.nvme_cap) if ctx.nvme_cap is not None else "no NVMe disk"
        out.append(f"NVMe short: needs {fmt_bytes(mem.nvme)} per node, {have}")
    target = ctx.request.global_batch
    if target is not None or s.gradient_accumulation_steps > 1:
        text = (
            f"batch: micro-batch {s.micro_batch_size} x {s.gradient_accumulation_steps} accumulation steps x "
            f"{s.world_size} GPUs = global batch {s.global_batch_size}"
        )
        out.append(text + (f" (the target is {target})" if target not in (None, s.global_batch_size) else ""))
    elif c.fits and ctx.gpu_cap:
        nxt = mem.needed + mem.per_sample_device
        if s.micro_batch_size >= ctx.request.max_micro_batch:
            out.append(f"micro-batch {s.micro_batch_size} (the cap; more would fit)")
        elif s.micro_batch_size < c.max_micro_batch:
            out.append(f"micro-batch {s.micro_batch_size} fits; up to {c.max_micro_batch} would")
        else:
            out.append(
                f"micro-batch {s.micro_batch_size} is the largest that fits "
                f"({s.micro_batch_size + 1} would need {fmt_bytes(nxt, up=True)})"
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
    out.append(f"~{tp.tokens_per_sec:,.0f} tokens/s, MFU {fmt_percent(tp.mfu)}; {per}: {top}")
    host = _host_bound_reason(tp, s.mode)
    if host:
        out.append(host)
    accumulate = _offload_accumulation_reason(ctx, s, tp) if "unsupported" not in c.limits else None
    if accumulate:
        out.append(accumulate)
    history = _history_reason(c.predicted.tokens_factor, c.predicted.memory_factor)
    if history:
        out.append(history)
    if generation is not None:
        out += _inference_reasons(ctx, s, generation)
    if tp.peak_source != "catalog":
        out.append(f"GPU peak {tp.peak_flops_per_gpu / 1e12:.0f} TFLOP/s taken from the {tp.peak_source}")
    padding = _head_dim_padding_reason(ctx, s)
    if padding:
        out.append(padding)
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


def _head_dim_padding_reason(ctx: PlanContext, s: Strategy) -> str | None:
    """What a head dim SDPA pads costs a training step (memory.sdpa_padding_bytes_per_sample): the padded copies
    every layer keeps, or with checkpointing the recomputed layer's, and a slower attention."""
    m = ctx.model
    padded = sdpa_padded_head_dim(m)
    if s.mode != "train" or padded == m.head_dim:
        return None
    kept, transient = sdpa_padding_bytes_per_sample(m, ctx.seq_len, s.activation_checkpointing)
    where = "while a layer is recomputed" if s.activation_checkpointing else f"over the {m.layers} layers"
    extra = (transient if s.activation_checkpointing else kept) * s.micro_batch_size
    return (
        f"head dim {m.head_dim} is not a multiple of {cal.SDPA_HEAD_DIM_MULTIPLE}: PyTorch pads it to {padded} for "
        f"the fused attention kernel, which keeps {fmt_bytes(extra)} more activations {where} at this micro-batch "
        "and runs attention slower (both counted)"
    )


def _inference_reasons(ctx: PlanContext, s: Strategy, generation: GenerationCost) -> list[str]:
    """What an inference prediction assumes, and what generation would add, in numbers."""
    kv = generation.kv_cache_bytes_per_sample
    decode = generation.seconds_per_new_token
    cache = (
        f"with the KV cache transformers keeps by default (use_cache=True): {fmt_bytes(kv)} per sample at "
        f"{ctx.seq_len} tokens, which evaluating with use_cache=False frees"
        if ctx.model.use_cache
        else f"without a KV cache (use_cache=False); generation's adds {fmt_bytes(kv)} per sample at {ctx.seq_len} tokens"
    )
    return [
        f"counts one forward over micro-batch x {ctx.seq_len} tokens that scores every position (evaluation), "
        + cache,
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
    "activations (partly drained)",
    "loss head (logits, fp32 upcast)",
    "backward transient (one layer)",
    "activations (one layer)",
    "logits (16-bit + fp32 scores)",
)


def _memory_reason(mem: MemoryEstimate) -> str:
    items = dict(mem.gpu_items)
    states = sum(items.get(k, 0) for k in _STATE_ITEMS)
    acts = sum(items.get(k, 0) for k in _ACTIVATION_ITEMS)
    kv = items.get(KV_CACHE_ITEM, 0)
    # cuBLAS's workspaces are the framework's, not DeepSpeed's: told with the CUDA context
    workspaces = items.get(CUBLAS_WORKSPACE_ITEM, 0)
    buffers = mem.allocated - states - acts - kv - workspaces
    outside = mem.device - mem.allocated + workspaces
    text = f"peak during {mem.peak_phase}: " + (
        f"model states {fmt_bytes(states)}" if states else "model states off the GPU"
    )
    if acts:
        head = items.get("loss head (logits, fp32 upcast)", 0)
        of_it = f"the loss head {fmt_bytes(head)} of it, " if head and head < acts else ""
        text += (
            f", activations {fmt_bytes(acts)} ({of_it}each sample more: +{fmt_bytes(mem.per_sample_device)})"
        )
    if kv:
        text += f", KV cache {fmt_bytes(kv)}"
    if buffers:
        text += f", DeepSpeed buffers {fmt_bytes(buffers)}"
    cublas = " + cuBLAS workspaces" if workspaces else ""
    nccl = " + NCCL" if mem.nccl else ""
    return text + f", allocator cache + CUDA context{cublas}{nccl} {fmt_bytes(outside)}"


def _backward_gathers(ctx: PlanContext, s: Strategy) -> str:
    """What a ZeRO-3 training backward gathers again: DeepSpeed keeps up to stage3_max_live_parameters gathered from
    the end of the forward (zero3.stage3_kept_for_backward), a tied embedding is gathered twice more, and with LoRA
    and checkpointing most frozen weights twice."""
    again = stage3_training_gathers(ctx.model, s, ctx.request.buffers) - 1.0
    if again < 0.005:
        return ", all of them kept gathered for backward"
    # a checkpointed LoRA backward gathers frozen weights again after each recompute (zero3._recompute_regathers)
    recompute_regathers = again > 1.05 and ctx.model.finetune.uses_lora and s.activation_checkpointing
    if recompute_regathers:
        return f" and {again:.1f} times again in backward (each block's recompute frees its frozen weights early)"
    if again > 0.995:
        return " and again in backward" + (" (a tied embedding twice more)" if again > 1.05 else "")
    return f", {fmt_percent(again)} of them again in backward"


def _stage_reason(ctx: PlanContext, s: Strategy, mem: MemoryEstimate) -> str:
    N = s.world_size
    items = dict(mem.gpu_items)
    opt = items.get("optimizer states", 0)
    if s.mode == "inference":
        where = (
            "on the CPU"
            if s.offload_param == "cpu"
            else (
                "on NVMe"
                if s.offload_param == "nvme"
                else f"sharded over {N} GPUs"
                if N > 1
                else "on the GPU"
            )
        )
        return f"ZeRO-3 inference: 16-bit weights {where}, gathered layer by layer"
    if s.zero_stage == 0:
        return f"stage 0: every GPU keeps all model states (optimizer {fmt_bytes(opt)})"
    if N == 1:
        text = f"stage {s.zero_stage} on one GPU shards nothing"
        text += ": its fetch hooks still run every micro-step" if s.zero_stage == 3 else ""
    else:
        text = {
            1: f"stage 1: optimizer states sharded over {N} GPUs",
            2: f"stage 2: optimizer states and gradients sharded over {N} GPUs",
            3: f"stage 3: parameters, gradients and optimizer states sharded over {N} GPUs, "
            f"weights gathered in every forward{_backward_gathers(ctx, s)}",
        }[s.zero_stage]
    if s.offload_optimizer == "cpu":
        text += f"; optimizer on the CPU ({fmt_bytes(mem.cpu)} host RAM per node, CPU Adam each step)"
    elif s.offload_optimizer == "nvme":
        text += f"; optimizer states on NVMe ({fmt_bytes(mem.nvme)} per node)"
    elif opt:
        # torch's default (foreach) AdamW holds one more fp32 block in its step: the cache moves by GiBs
        text += f" (optimizer states {fmt_bytes(opt)} per GPU; planned for a fused AdamW step, as the hints write it)"
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
            need = c.predicted.gpu_needed_bytes
            if "gpu" in c.limits:
                out.append(f"{g} does not fit (needs {fmt_bytes(need)} per GPU)")
            else:
                out.append(f"{g} does not fit ({', '.join(c.limits)} short)")
            continue
        loss = 1 - c.predicted.tokens_per_sec / best.predicted.tokens_per_sec
        if loss < -0.005:
            out.append(
                f"{g} is predicted ~{fmt_percent(-loss)} faster (micro-batch {c.strategy.micro_batch_size}): within the "
                "model's accuracy, so the simpler strategy is recommended"
            )
        elif loss > 0.005:
            why = ""
            if g == "activation checkpointing" and c.strategy.micro_batch_size > s.micro_batch_size:
                why = f", even at micro-batch {c.strategy.micro_batch_size}"
            out.append(f"{g} would cost ~{fmt_percent(loss)} throughput{why}")
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
        f"DeepSpeed's own estimator says {fmt_bytes(gpu)} per GPU: model states only "
        f"(no activations, buffers or CUDA context)"
    )


def recommendation_reasons(best: Candidate, others: list[Candidate]) -> tuple[str, ...]:
    """The recommended candidate's reasons: its own, then what the alternatives would cost, then DeepSpeed's own
    estimate beside ours."""
    ds = _ds_reason(best)
    return (*best.reasons, *_comparisons(best, others), *([ds] if ds else []))


def advice(ctx: PlanContext, what_ifs: WhatIfs) -> list[str]:
    """What would make it fit when nothing does -- more GPUs, a larger card, more host RAM, an NVMe disk, a shorter
    sequence -- in numbers, from what the search found when asked again (``wizard.planner.search.what_ifs``)."""
    hw = ctx.hardware
    if not hw.gpus:
        reason = f" ({hw.no_gpu_reason})" if hw.no_gpu_reason else ""
        return [
            f"no NVIDIA GPU here{reason}: plan for the machine you will train on, "
            "e.g. --hardware 8xA100-80GB or --hardware 2x8xH100"
        ]
    out: list[str] = []
    # asked for some stages only: what follows is said of those stages, not of the model
    scope = f" at {_stage_words(ctx.request.stages)}" if ctx.request.some_stages_only else ""
    if what_ifs.other_stages is not None:
        c = what_ifs.other_stages
        out.append(
            f"another ZeRO stage fits these GPUs: {c.label} at micro-batch {c.strategy.micro_batch_size}, "
            f"{fmt_bytes(c.predicted.gpu_needed_bytes)} per GPU, ~{c.predicted.tokens_per_sec:,.0f} tokens/s "
            f"(only {_stage_words(ctx.request.stages)} {'was' if len(set(ctx.request.stages)) == 1 else 'were'} "
            "asked for)"
        )
    if what_ifs.more_gpus is not None:
        bigger, c = what_ifs.more_gpus
        out.append(
            f"{bigger.nodes} nodes x {hw.gpus_per_node} GPUs ({bigger.total_gpus} GPUs) would fit: {c.label}, "
            f"{fmt_bytes(c.predicted.gpu_needed_bytes)} per GPU, ~{c.predicted.tokens_per_sec:,.0f} tokens/s"
        )
    else:
        out.append(f"even 1024x the GPUs would not fit this model{scope} at this sequence length")
    if what_ifs.larger_gpu is not None:
        need, c = what_ifs.larger_gpu
        out.append(f"a GPU with at least {fmt_bytes(need, up=True)} would fit {c.label} at micro-batch 1")
    if what_ifs.more_host_ram is not None and ctx.cpu_cap is not None:
        need, c = what_ifs.more_host_ram
        out.append(
            f"{fmt_bytes(need - ctx.cpu_cap, up=True)} more host RAM per node ({fmt_bytes(need, up=True)} in all) "
            f"would fit {c.label}"
        )
    if what_ifs.with_nvme is not None:
        c = what_ifs.with_nvme
        out.append(
            f"an NVMe disk with {fmt_bytes(c.predicted.nvme_bytes, up=True)} free per node (and libaio) would fit "
            f"{c.label}"
        )
    if what_ifs.shorter_seq is not None:
        seq, c = what_ifs.shorter_seq
        out.append(f"sequence length {seq} would fit: {c.label}, micro-batch {c.strategy.micro_batch_size}")
    elif ctx.seq_len > 128:
        out.append(f"a shorter sequence alone would not help: the model states themselves do not fit{scope}")
    return out


def _stage_words(stages: tuple[int, ...]) -> str:
    """(0,) -> 'stage 0'; (0, 1) -> 'stages 0 and 1'; (0, 1, 2) -> 'stages 0, 1 and 2'."""
    names = [str(s) for s in sorted(set(stages))]
    if len(names) == 1:
        return f"stage {names[0]}"
    return f"stages {', '.join(names[:-1])} and {names[-1]}"


def why_it_does_not_fit(c: Candidate) -> list[str]:
    """The reasons of a candidate that say what does not fit or cannot run (GPU, host RAM, NVMe, unsupported)."""
    return [r for r in c.reasons if r.startswith(("does not fit", "host RAM", "NVMe", "not "))]


def choice_advice_given(chosen: Candidate, plan: Plan, keeps_batch: Candidate | None) -> list[str]:
    """For one strategy a user chose (``wizard.planner.search.choose``): what to change when it does not fit
    ("needs 131 GiB per GPU, more than the 76 GiB an 80 GiB card allows with the 5 % margin: lower the micro-batch
    to 3, or ..."; ``keeps_batch``: the split that keeps its global batch, ``search.keeping_the_global_batch``), or,
    when it fits, how it compares with the planner's own recommendation. ``search.choice_advice`` finds the split."""
    s, p, cap = chosen.strategy, chosen.predicted, plan.gpu_capacity_bytes
    best = plan.best
    out: list[str] = []
    if "gpu" in chosen.limits and cap:
        fixes = []
        if 0 < chosen.max_micro_batch < s.micro_batch_size:
            fixes.append(f"lower the micro-batch to {chosen.max_micro_batch}")
        pick_said = (
            best is not None
            and bool(fixes)
            and (best.label, best.strategy.micro_batch_size) == (chosen.label, chosen.max_micro_batch)
        )
        if (
            best is not None and pick_said
        ):  # the planner's pick is this strategy at that micro-batch: say it once
            fixes[0] += f" (~{best.predicted.tokens_per_sec:,.0f} tokens/s, the planner's pick)"
        if keeps_batch is not None:
            k = keeps_batch.strategy
            fixes.insert(
                min(1, len(fixes)),
                f"keep the global batch {k.global_batch_size:,} with micro-batch {k.micro_batch_size} x accumulation "
                f"{k.gradient_accumulation_steps} (~{keeps_batch.predicted.tokens_per_sec:,.0f} tokens/s)",
            )
        if best is not None and not pick_said:
            fixes.append(
                f"use {best.label} (micro-batch {best.strategy.micro_batch_size}, "
                f"{fmt_bytes(best.predicted.gpu_needed_bytes)} per GPU, ~{best.predicted.tokens_per_sec:,.0f} tokens/s)"
            )
        card = fmt_bytes(cap)
        smallest = plan.hardware.min_gpu_memory_bytes
        if plan.request.gpu_memory_bytes and smallest and fmt_bytes(smallest) != card:  # part of a card
            subject = f"the {card} planned for (of the {fmt_bytes(smallest)} card)"
        else:
            subject = f"{'an' if card[:1] == '8' or card.startswith(('11 ', '11.', '18 ', '18.')) else 'a'} {card} card"
        margin = plan.request.safety_margin
        # the margin said with the figure it leaves: "needs 23.1 GiB" beside "24.0 GiB" alone reads as a fit
        limit = (
            f"more than the {fmt_bytes(budget(cap, margin) or 0)} {subject} allows with the {fmt_percent(margin)} margin"
            if margin
            else f"more than {subject} holds"
        )
        head = f"this config needs {fmt_bytes(p.gpu_needed_bytes)} per GPU, {limit}"
        out.append(head + (": " + ", or ".join(fixes) if fixes else ": nothing the planner tried fits"))
        if best is None:
            out += list(plan.advice)
    elif not chosen.fits and _topology_short(s, plan.hardware):
        hw = plan.hardware
        first = hw.gpus[0]
        gpu = first.catalog_key or shlex.quote(first.name.removeprefix("NVIDIA "))
        out.append(
            f"ask for at most {hw.nodes} node(s) of {hw.gpus_per_node} GPU(s), as the hardware is, or plan for the "
            f"machines you will train on: --hardware {s.nodes}x{s.gpus_per_node}x{gpu}"
        )
    elif "unsupported" in chosen.limits and best is not None:
        out.append(
            f"DeepSpeed does not run this combination (the first reason says why): use {best.label} (micro-batch "
            f"{best.strategy.micro_batch_size}, {fmt_bytes(best.predicted.gpu_needed_bytes)} per GPU, "
            f"~{best.predicted.tokens_per_sec:,.0f} tokens/s), the planner's pick"
        )
    elif chosen.fits and best is not None and best.strategy != s:
        gain = best.predicted.tokens_per_sec / max(p.tokens_per_sec, 1e-9) - 1
        if gain > 0.005:
            out.append(
                f"the planner's recommendation is {best.label} at micro-batch {best.strategy.micro_batch_size}: "
                f"~{best.predicted.tokens_per_sec:,.0f} tokens/s, {fmt_percent(gain)} faster"
            )
    return out


OFFLOAD_ACCUMULATION_STEPS = 4  # the accumulation the offload reason prices


def _host_bound_reason(tp: ThroughputEstimate, mode: str) -> str | None:
    """A step that waits mostly on the host runs as fast as the CPU and the process let it: say how far apart such
    steps ran from one run to the next (calibration.HOST_BOUND_SPREAD), so that one run's figure is not read as the
    plan's error, and what makes the GPU the bottleneck instead."""
    if not host_bound(tp):
        return None
    share = host_share(tp)
    median, largest = cal.HOST_BOUND_SPREAD
    what = "step" if mode == "train" else "forward pass"
    return (
        f"host-bound: {fmt_percent(share)} of each {what} waits on the host (kernel launches, Python), so its speed "
        f"moves with the CPU and the process: on H200 machines one such config ran {median:.2f}x apart from one run "
        f"to the next at the median, up to {largest:.2f}x (GPU-bound ones {cal.OTHER_SPREAD_MEDIAN:.2f}x); a larger "
        "micro-batch or sequence makes the GPU the bottleneck"
    )


def _offload_accumulation_reason(ctx: PlanContext, s: Strategy, tp: ThroughputEstimate) -> str | None:
    """With the optimizer on the CPU and no global batch asked for, the planner sizes one micro-step per optimizer
    step, so CPU Adam runs after every micro-step. Accumulating runs it once per OFFLOAD_ACCUMULATION_STEPS: what
    that would give, when it is worth saying (measured on one H200: Qwen2-1.5B ZeRO-2 + CPU offload at micro-batch
    4, 7.4k tokens/s at one micro-step, 14.1k at four; docs/measurements.md). A larger global batch is a training
    choice, so this is a hint, not the plan."""
    if s.mode != "train" or s.offload_optimizer == "none" or ctx.request.global_batch is not None:
        return None
    if s.gradient_accumulation_steps != 1 or ctx.gpu_cap is None:
        return None
    accumulating = s.with_(gradient_accumulation_steps=OFFLOAD_ACCUMULATION_STEPS)
    needed = estimate_memory(
        ctx.model, accumulating, ctx.seq_len, ctx.request.buffers, ctx.request.expandable_segments
    ).needed
    if needed > ctx.gpu_budget:  # ZeRO-1 keeps its 16-bit gradients between micro-steps: it may not fit
        return None
    adam = dict(tp.parts).get(CPU_ADAM_PART, 0.0)
    more = estimate_throughput(ctx.hardware, ctx.model, accumulating, ctx.seq_len)
    gain = more.tokens_per_sec / estimate_throughput(ctx.hardware, ctx.model, s, ctx.seq_len).tokens_per_sec
    if gain < 1.1:
        return None
    batch = OFFLOAD_ACCUMULATION_STEPS * s.micro_batch_size * s.world_size
    return (
        f"CPU Adam takes {adam * 1000:,.0f} ms of this {tp.step_seconds * 1000:,.0f} ms step, once per micro-step here: "
        f"accumulating {OFFLOAD_ACCUMULATION_STEPS} micro-steps per optimizer step (--global-batch "
        f"{batch}) would run it once per {OFFLOAD_ACCUMULATION_STEPS}, ~{tp.tokens_per_sec * gain:,.0f} tokens/s "
        f"({fmt_percent(gain - 1)} more), if your training can take the larger batch"
    )


def _topology_short(s: Strategy, hardware: HardwareReport) -> bool:
    """More nodes or GPUs per node than the hardware has (feasibility.problems says it in words)."""
    return bool(hardware.gpus) and (s.nodes > hardware.nodes or s.gpus_per_node > hardware.gpus_per_node)


def _history_reason(tokens_factor: float, memory_factor: float) -> str | None:
    """What the run history changed in this candidate's figures (None when nothing)."""
    parts = [
        f"{what} x{factor:.2f}"
        for what, factor in (("tokens/s", tokens_factor), ("GPU memory", memory_factor))
        if abs(factor - 1) >= 0.005
    ]
    return f"corrected by this hardware's recorded runs: {', '.join(parts)}" if parts else None
