"""The planning core: plan(hardware, model, request) -> a ranked list of valid strategies, each with predicted memory
and throughput and its reasons in plain words; advice with numbers when nothing fits.

Pure: no I/O, no terminal. The modules, from the ground up:
  calibration  every measured or sourced constant, with where it comes from
  finetune     LoRA / QLoRA: trainable parameters as PEFT counts them, 4-bit storage, frozen-layer terms
  host_memory  host RAM and NVMe per node: processes, the model while it loads, what is offloaded, pinned buffers
  ds_estimator DeepSpeed's own memory estimator, reproduced to the byte, to show beside ours
  memory       the memory model: bytes per GPU of one step (moments, the allocator's cache, the side streams' pools)
  throughput   the time model: seconds per step by cause, tokens/s, MFU
  types        the request, predictions, candidates, the plan
  feasibility  what this machine can run at all (capacities, precisions, NVMe, host RAM)
  explain      the reasons, comparisons and advice, in words (numbers in, English out; imports no search)
  search       strategy enumeration, sizing, ranking: plan, evaluate, candidate_for, choose, max_batch_table; the what-if
               searches behind the advice
  serialize    the stable JSON of ``dswiz plan --json``; a prediction as the run history records it
This module re-exports the public API; import from ``wizard.planner``.
"""

from __future__ import annotations

from wizard.planner.explain import why_it_does_not_fit
from wizard.planner.feasibility import capacities, hardware_problems, precision_problem
from wizard.planner.finetune import trainable_params, with_finetune
from wizard.planner.search import (
    candidate_for,
    choice_advice,
    choose,
    evaluate,
    max_batch_table,
    max_micro_batch,
    plan,
)
from wizard.planner.serialize import candidate_to_json, history_figures, max_batch_to_json, plan_to_json
from wizard.planner.types import (
    DEFAULT_SEQ_LEN,
    Candidate,
    Capacities,
    MaxBatchRow,
    Plan,
    PlanRequest,
    Prediction,
    StrategyChoice,
)

__all__ = [
    "DEFAULT_SEQ_LEN",
    "Candidate",
    "Capacities",
    "MaxBatchRow",
    "Plan",
    "PlanRequest",
    "Prediction",
    "StrategyChoice",
    "candidate_for",
    "candidate_to_json",
    "capacities",
    "choice_advice",
    "choose",
    "evaluate",
    "hardware_problems",
    "history_figures",
    "max_batch_table",
    "max_batch_to_json",
    "max_micro_batch",
    "plan",
    "plan_to_json",
    "precision_problem",
    "trainable_params",
    "why_it_does_not_fit",
    "with_finetune",
]
