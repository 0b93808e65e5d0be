"""What a starting job is doing, from its output, so the terminal is never silent for a minute. Pure.

DeepSpeed JIT-builds ops on first use (fused_adam ~35 s, cpu_adam ~40 s on an H200 machine: docs/measurements.md,
"Throughput") and the
script builds or loads its model; none of that prints progress. The tracker turns the few lines that do appear
into named phases with a start time: "building fused_adam (first run only)" for as long as it lasts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Lines that name an op being built or loaded (DeepSpeed op_builder/builder.py, torch/utils/cpp_extension.py).
_BUILDING_RES = (
    re.compile(r"Building extension module (?P<op>\w+)"),
    re.compile(r"TORCH_EXTENSION_NAME=(?P<op>\w+)"),  # ninja's compile lines
    re.compile(r"/(?P<op>\w+)/build\.ninja"),
)
_LOADING_RE = re.compile(r"Loading extension module (?P<op>\w+)")
_OP_DONE_RES = (
    re.compile(r"Time to load (?P<op>\w+) op: (?P<s>[\d.]+) seconds"),
    re.compile(r"DeepSpeed (?:deepspeed\.ops\.\w+\.)?(?P<op>\w+) built successfully"),
)
_OPTIMIZER_RE = re.compile(r"Using DeepSpeed Optimizer param name (?P<name>\w+) as basic optimizer")
_ZERO_RE = re.compile(r"Creating (?:\S+ )?ZeRO stage (?P<stage>\d) optimizer|Creating ZeRO Offload")
_ENGINE_RE = re.compile(r"distributed groups summary|DeepSpeed Flops Profiler Enabled")
_SPAWN_RE = re.compile(r"process \d+ spawned with command")
_CHECKPOINT_RE = re.compile(r"Saving model checkpoint|\[Torch\] Checkpoint .* is about to be saved")
_TRAINING_KINDS = ("throughput", "step", "loss")
_STEP_ZERO_RE = re.compile(r"\bstep=0, skipped=")  # printed when the engine is built, before any step
# An evaluation / inference job prints eval dicts ({'eval_loss': ...}) and no training loss.
_EVAL_ONLY_RE = re.compile(r"'eval_loss'")
_TRAIN_LOSS_RE = re.compile(r"'(?:loss|train_loss)'")


@dataclass(frozen=True)
class Phase:
    name: str  # "building fused_adam (first run only)"
    started_at: float  # seconds, same clock as the caller's ``now``

    def describe(self, now: float) -> str:
        return f"{self.name}… {max(0, int(now - self.started_at))} s"


class PhaseTracker:
    """Feed each line (and its parsed event kind) with a timestamp; ``current`` is the phase now."""

    def __init__(self, now: float, *, optimizer_op: str | None = None) -> None:
        self.current = Phase("starting the launcher", now)
        self.history: list[Phase] = [self.current]
        self.training = False
        self._optimizer_op = optimizer_op
        self._building: str | None = None

    def _enter(self, name: str, now: float) -> Phase | None:
        if name == self.current.name:
            return None
        self.current = Phase(name, now)
        self.history.append(self.current)
        return self.current

    def steps_seen(self, now: float) -> Phase | None:
        """Training steps seen outside the output (the csv monitor's rows: a job under accelerate or the Trainer
        may print nothing while it trains). Returns the "training" phase when this ended the setting up."""
        if self.training:
            return None
        self.training = True
        return self._enter("training", now)

    def feed(self, line: str, now: float, *, kind: str | None = None) -> Phase | None:
        """Returns the new phase when this line started one."""
        if kind in _TRAINING_KINDS and not _STEP_ZERO_RE.search(line):
            self.training = True
            evaluating = kind == "loss" and _EVAL_ONLY_RE.search(line) and not _TRAIN_LOSS_RE.search(line)
            if evaluating and self.current.name != "training":  # an eval during training stays "training"
                return self._enter("evaluating", now)
            return self._enter("training", now)
        if _CHECKPOINT_RE.search(line):
            return self._enter("saving a checkpoint", now)
        for rx in _OP_DONE_RES:
            m = rx.search(line)
            if m:
                self._building = None
                return self._enter(f"built {m.group('op')}; setting up", now)
        for rx in _BUILDING_RES:
            m = rx.search(line)
            if m:
                self._building = m.group("op")
                return self._enter(f"building {self._building} (first run only)", now)
        m = _LOADING_RE.search(line)
        if m:
            return self._enter(f"loading {m.group('op')}", now)
        if self.training:
            return None  # after the first step only checkpoints and op builds are worth naming
        m = _OPTIMIZER_RE.search(line)
        if m:
            op = self._optimizer_op
            what = (
                f"building {op} (first run only; loads at once when cached)"
                if op
                else "creating the optimizer"
            )
            return self._enter(what, now)
        m = _ZERO_RE.search(line)
        if m:
            stage = m.group("stage")
            return self._enter(f"setting up ZeRO stage {stage}" if stage else "setting up ZeRO offload", now)
        if _ENGINE_RE.search(line):
            return self._enter("setting up the DeepSpeed engine", now)
        if _SPAWN_RE.search(line):
            return self._enter("starting the ranks (importing torch and DeepSpeed, building the model)", now)
        return None
