"""What the plan predicted for a run, read from the optional ``plan`` section of run.json (all numbers optional).

The planner and ``dswiz launch`` write it; the monitor compares the live job against it (memory above the predicted
peak, tokens/s and MFU need the sequence length, FLOPs per token and the GPUs' peak)::

    "plan": {"predicted_peak_gpu_bytes": 22000000000, "predicted_tokens_per_sec": 61858, "flops_per_token": 2.1e9,
             "seq_len": 1024, "global_batch_size": 8, "total_steps": 1000, "num_gpus": 1,
             "peak_tflops_per_gpu": 989.4, "pinned_host_bytes": 4000000000}

When the plan is absent, a few of these come from the job's own command line (``--steps``, ``--max_steps``,
``--seq-len``…) so a plain ``deepspeed train.py --max_steps 100`` still gets an ETA.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from wizard.units import whole_number

MAX_FIGURE = 10**18  # any plan figure above this (bytes, tokens/s, steps) is not one: ignored
_INT_FIELDS = frozenset(
    {
        "predicted_peak_gpu_bytes",
        "seq_len",
        "global_batch_size",
        "total_steps",
        "num_gpus",
        "pinned_host_bytes",
    }
)


@dataclass(frozen=True)
class PlanInfo:
    predicted_peak_gpu_bytes: int | None = None
    predicted_tokens_per_sec: float | None = None
    flops_per_token: float | None = None
    seq_len: int | None = None
    global_batch_size: int | None = None
    total_steps: int | None = None
    num_gpus: int | None = None
    peak_tflops_per_gpu: float | None = None
    pinned_host_bytes: int | None = None

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> PlanInfo:
        """Unknown keys and non-numbers are ignored (a hand-edited run.json must not break the monitor)."""
        if not isinstance(data, Mapping):
            return cls()
        kw: dict[str, Any] = {}
        for f in fields(cls):
            value = data.get(f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if not 0 < value <= MAX_FIGURE:  # NaN fails this too
                continue
            kw[f.name] = int(value) if f.name in _INT_FIELDS else float(value)
        return cls(**kw)

    @classmethod
    def from_run_json(cls, run: Mapping[str, Any] | None) -> PlanInfo:
        if not isinstance(run, Mapping):
            return cls()
        plan = cls.from_mapping(run.get("plan"))
        args = run.get("script_args")
        if isinstance(args, (list, tuple)):
            plan = plan.filled_from_args([str(a) for a in args])
        world = run.get("world_size")
        if plan.num_gpus is None and type(world) is int and 0 < world <= MAX_FIGURE:
            plan = replace(plan, num_gpus=world)
        return plan

    def filled_from_args(self, argv: Sequence[str]) -> PlanInfo:
        """Fill total_steps / seq_len the plan left unknown from the training script's arguments."""
        updates: dict[str, Any] = {}
        if self.total_steps is None:
            steps = int_arg(argv, ("--max_steps", "--max-steps", "--train_iters", "--train-iters", "--steps"))
            if steps:
                updates["total_steps"] = steps
        if self.seq_len is None:
            seq = int_arg(
                argv,
                (
                    "--seq-len",
                    "--seq_len",
                    "--seq-length",
                    "--seq_length",
                    "--max_seq_length",
                    "--block_size",
                ),
            )
            if seq:
                updates["seq_len"] = seq
        return replace(self, **updates) if updates else self

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


def int_arg(argv: Sequence[str], names: Sequence[str]) -> int | None:
    """The positive int after ``--name`` or in ``--name=N``; the last occurrence wins (argparse does the same)."""
    found: int | None = None
    for i, arg in enumerate(argv):
        for name in names:
            text = None
            if arg == name and i + 1 < len(argv):
                text = argv[i + 1]
            elif arg.startswith(name + "="):
                text = arg.split("=", 1)[1]
            if text is not None:
                value = whole_number(text.strip(), limit=MAX_FIGURE)
                if value is not None and value > 0:
                    found = value
    return found
