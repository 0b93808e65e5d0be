"""Planning again from a recorded plan (``dswiz-plan.json``): the prediction for the strategy a config folder holds,
the sidecar itself, and the advice after a CUDA out-of-memory error -- the same model on the same hardware, planned
with the failed micro-batch as the upper bound, ending in the exact ``dswiz config`` command that writes the config
that fits. Pure: no I/O (the planner is deterministic for a given model, hardware and request).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from wizard import planner
from wizard.config.optimizer_op import builds_fused_adam
from wizard.config.sidecar import PlanSidecar, PredictedNumbers, config_command, strategy_of_config
from wizard.errors import DswizError
from wizard.hardware.report import HardwareReport
from wizard.model import ModelSpec
from wizard.planner import calibration as cal
from wizard.planner.throughput import flops_per_token, peak_flops
from wizard.strategy import Strategy, strategy_label
from wizard.units import fmt_bytes


def predict(
    hardware: HardwareReport, model: ModelSpec, strategy: Strategy, request: planner.PlanRequest
) -> planner.Candidate:
    """The planner's prediction for exactly ``strategy`` (``planner.evaluate``: any hand-edited combination)."""
    return planner.evaluate(hardware, model, strategy, request)


def make_sidecar(
    *,
    model_arg: str,
    model: ModelSpec,
    hardware_arg: str | None,
    hardware: HardwareReport,
    request: planner.PlanRequest,
    candidate: planner.Candidate,
    config_args: Sequence[str] = (),
) -> PlanSidecar:
    """What ``dswiz config`` and the wizard record about the plan behind the files they write: the chosen
    candidate, with the prediction the planner made for it (no second evaluation)."""
    strategy = candidate.strategy
    seq_len = request.resolved_seq_len(model)
    predicted = None
    if hardware.gpus:
        p = candidate.predicted
        predicted = PredictedNumbers(
            peak_gpu_bytes=int(p.gpu_bytes),
            needed_gpu_bytes=int(p.gpu_needed_bytes),
            host_bytes=int(p.cpu_bytes),
            nvme_bytes=int(p.nvme_bytes),
            tokens_per_sec=round(float(p.tokens_per_sec), 1),  # as written: a sidecar reads back equal
            mfu=round(float(p.mfu), 4),
            tokens_factor=round(p.tokens_factor, 4),
            memory_factor=round(p.memory_factor, 4),
        )
    peak = None
    if hardware.gpus:
        flops, _source = peak_flops(hardware.gpus[0], strategy.precision)
        peak = round(flops / 1e12, 3)
    return PlanSidecar(
        model_arg=model_arg,
        model=model,
        hardware_arg=hardware_arg,
        hardware=hardware,
        seq_len=seq_len,
        global_batch=request.global_batch,
        strategy=strategy,
        flops_per_token=float(flops_per_token(model, seq_len, mode=strategy.mode)),
        predicted=predicted,
        peak_tflops_per_gpu=peak,
        config_args=tuple(config_args),
        expandable_segments=request.expandable_segments,
        fused_optimizer=request.buffers.fused_optimizer,
        gpu_memory_bytes=request.gpu_memory_bytes,
        safety_margin=None if request.safety_margin == cal.DEFAULT_SAFETY_MARGIN else request.safety_margin,
    )


def planned_request(sidecar: PlanSidecar, request: planner.PlanRequest | None = None) -> planner.PlanRequest:
    """``request`` (default: the planner's defaults) with what the sidecar's config was planned for beyond the
    strategy: without a ``request``, the allocator and the memory of each card it planned against (--gpu-memory,
    --margin); always, the optimizer DeepSpeed builds from its optimizer section (stage 0's step), which a re-plan of
    that config keeps whatever was asked."""
    base = request or planner.PlanRequest(
        expandable_segments=sidecar.expandable_segments,
        gpu_memory_bytes=sidecar.gpu_memory_bytes,
        safety_margin=cal.DEFAULT_SAFETY_MARGIN if sidecar.safety_margin is None else sidecar.safety_margin,
    )
    return replace(base, buffers=replace(base.buffers, fused_optimizer=sidecar.fused_optimizer))


# ----------------------------------------------------------------------------------------- after a CUDA OOM


def _words(s: Strategy) -> str:
    return f"{strategy_label(s)} ({s.precision})"


def _batch(s: Strategy) -> str:
    return f"micro-batch {s.micro_batch_size} x accumulation {s.gradient_accumulation_steps}"


def oom_advice(sidecar: PlanSidecar, ds_config: Mapping[str, Any] | None, *, config_dir: str) -> list[str]:
    """What to run after the config in ``config_dir`` ran out of GPU memory: the same model and hardware planned
    again with micro-batches below the one that failed (global batch and precision kept), as advice lines, each
    ending in the ``dswiz config`` command that writes that config into ``config_dir``. Empty when the planner
    finds nothing that fits (the caller then gives its generic advice)."""
    failed = strategy_of_config(sidecar, ds_config)
    hw = sidecar.hardware
    global_batch = failed.global_batch_size
    inference = failed.mode == "inference"
    request = replace(
        planned_request(sidecar),
        seq_len=sidecar.seq_len,
        # Inference has no global batch to keep: the largest micro-batch below the failed one that fits.
        global_batch=None if inference else global_batch,
        mode=failed.mode,
        precisions=(failed.precision,),
        max_micro_batch=max(1, failed.micro_batch_size - 1),
    )
    # the optimizer the config that ran made DeepSpeed build (it may have been edited since it was written)
    if ds_config is not None:
        request = replace(
            request, buffers=replace(request.buffers, fused_optimizer=builds_fused_adam(ds_config))
        )
    try:
        result = planner.plan(hw, sidecar.model, request)
        before = predict(hw, sidecar.model, failed, replace(request, max_micro_batch=failed.micro_batch_size))
    except DswizError:
        return []  # e.g. the failed global batch does not divide this hardware's GPUs
    # The failed config needed more than the GPU has although the planner predicted it below that: whatever is
    # advised must at least be predicted to need less than it (on one GPU, ZeRO-1 needs what ZeRO-0 needs).
    ceiling = before.predicted.gpu_needed_bytes

    def viable(c: planner.Candidate) -> bool:
        # Not the failed config again: the same kind must now take a smaller micro-batch.
        same = c.strategy.kind == failed.kind
        smaller = c.predicted.gpu_needed_bytes < ceiling
        return c.fits and smaller and not (same and c.strategy.micro_batch_size >= failed.micro_batch_size)

    fitting = [c for c in result.candidates if viable(c)]
    if not fitting:
        return []
    cap = result.gpu_capacity_bytes or hw.min_gpu_memory_bytes  # --gpu-memory's, where the plan had one
    same_kind = next((c for c in fitting if c.strategy.kind == failed.kind), None)
    best = fitting[0]
    lines: list[str] = []

    def fits_text(c: planner.Candidate) -> str:
        of = f" of {fmt_bytes(cap)}" if cap else ""
        return f"fits {fmt_bytes(c.predicted.gpu_needed_bytes)}{of} per GPU (predicted)"

    def command(c: planner.Candidate) -> str:
        return shlex.join(config_command(sidecar, c.strategy, config_dir))

    keeps = "a smaller batch per forward" if inference else f"keeps the global batch {global_batch}"
    if same_kind is not None:
        lines.append(
            f"{_batch(same_kind.strategy)} {keeps} and {fits_text(same_kind)}, still {_words(same_kind.strategy)}: "
            f"{command(same_kind)}"
        )
    # Another kind of strategy only when nothing of the failed kind fits, or when it is clearly faster (by more than
    # the planner's own "prefer the simpler one" band).
    faster = same_kind is not None and best.predicted.tokens_per_sec > same_kind.predicted.tokens_per_sec * (
        1 + cal.RECOMMEND_SIMPLER_WITHIN
    )
    if same_kind is None or (faster and best.strategy.kind != failed.kind):
        speed = ""
        if same_kind is not None:
            speed = f", ~{best.predicted.tokens_per_sec:,.0f} tokens/s vs ~{same_kind.predicted.tokens_per_sec:,.0f}"
        lead = "faster, and fits" if same_kind is not None else "what fits instead"
        lines.append(
            f"{lead}: {_words(best.strategy)}, {_batch(best.strategy)} ({keeps}; {fits_text(best)}{speed}): "
            f"{command(best)}"
        )
    if cap and ceiling > cap:
        lines.append(
            f"by the planner's estimate the config that failed needs {fmt_bytes(ceiling)} per GPU, more than the "
            f"{fmt_bytes(cap)} {'planned for (--gpu-memory)' if sidecar.gpu_memory_bytes else 'the GPU has'} "
            "(`dswiz plan` shows what fits before a launch)"
        )
    else:
        lines.append(
            f"the planner had predicted {fmt_bytes(ceiling)} per GPU for the config that failed, so treat these "
            "figures as optimistic and watch the peak on the dashboard"
        )
    return lines


OomAdvisor = Callable[[Mapping[str, Any] | None], Sequence[str]]


def oom_advisor(sidecar: PlanSidecar, config_dir: str, fallback: OomAdvisor | None = None) -> OomAdvisor:
    """The verdict's CUDA-OOM advisor (runner.verdict.OomAdvisor) for a launch from ``config_dir``: the planner's
    advice, else ``fallback``'s (the generic advice from the config alone)."""

    def advise(ds_config: Mapping[str, Any] | None) -> Sequence[str]:
        lines = oom_advice(sidecar, ds_config, config_dir=config_dir)
        if lines:
            return lines
        return list(fallback(ds_config)) if fallback is not None else []

    return advise
