"""The stable JSON of a plan (``dswiz plan --json``): candidates, the plan, the max-batch table. Sorted-key output
is the caller's; ints and rounded floats here, so the document is the same on every run."""

from __future__ import annotations

from typing import Any

from wizard.history.record import Figures
from wizard.planner.types import Candidate, MaxBatchRow, Plan, Prediction


def history_figures(p: Prediction) -> Figures:
    """A prediction as the run history records it beside what the run measures: tokens/s, the device memory a card
    with room shows, and whether the step is host-bound (then the run teaches only runs of its own host CPU)."""
    return Figures(tokens_per_sec=p.tokens_per_sec, peak_gpu_bytes=p.gpu_bytes, host_bound=p.host_bound)


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
            # what the card must hold (fits and headroom_bytes are judged on it): gpu_bytes less the cache the
            # allocator gives back under pressure
            "gpu_needed_bytes": int(p.gpu_needed_bytes),
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
            # measured / physics factors from the run history already in the figures above (1.0: none)
            "history_factors": {
                "tokens_per_sec": round(p.tokens_factor, 4),
                "gpu_bytes": round(p.memory_factor, 4),
            },
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
            "expandable_segments": req.expandable_segments,
        },
        "capacity": {
            "gpu_bytes": plan.gpu_capacity_bytes,
            "cpu_bytes": plan.cpu_capacity_bytes,
            "nvme_bytes": plan.nvme_capacity_bytes,
        },
        # the index of the planner's pick among the candidates shown (None: not among them, e.g. an exact strategy)
        "best": next((i for i, c in enumerate(cands) if plan.best is not None and c == plan.best), None),
        "candidates": [candidate_to_json(c) for c in cands],
        "advice": list(plan.advice),
        "notes": list(plan.notes),
    }


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
            "zeropp": r.strategy.uses_zeropp,
            "max_micro_batch": r.max_micro_batch,
            "capped": r.capped,
            "tokens_per_sec": None if r.tokens_per_sec is None else float(round(r.tokens_per_sec, 1)),
            "gpu_bytes": int(r.gpu_bytes),
            "fits": r.fits,
            "limits": list(r.limits),
        }
        for r in rows
    ]
