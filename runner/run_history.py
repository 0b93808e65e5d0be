"""What a launch tells the run history: its measurement at start (the prediction) and at the end (what was measured).

The launch writes the entry when the job starts (outcome ``running``) and again when it ends, so a launch that is
killed still leaves its entry. Nothing here may stop or fail a launch: a history that cannot be written is a
warning (returned as text for the caller to print), never an exception.

Steady state: the first quarter of the steps (and at least the first two) are warm-up (compilation, allocator
growth, the first optimizer step); tokens/s and step time are the medians of the snapshots after it.
"""

from __future__ import annotations

import os
import statistics
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.metrics.history import iter_metrics
from runner.metrics.snapshot import Snapshot
from runner.rundir import (
    METRICS_JSONL,
    STATUS_INTERRUPTED,
    STATUS_RUNNING,
    STATUS_SUPERVISOR_LOST,
    RunRecord,
    effective_status,
    read_run_record,
)
from wizard.config.optimizer_op import builds_fused_adam
from wizard.config.sidecar import PlanSidecar, stated_strategy_fields, strategy_of_config
from wizard.errors import DswizError
from wizard.history.record import SOURCES, Figures, Hardware, Measurement
from wizard.history.store import HistoryStore, default_path
from wizard.planner.calibration import physics_version
from wizard.strategy import Strategy

if TYPE_CHECKING:
    from wizard.hardware.report import HardwareReport
    from wizard.model import ModelSpec

SOURCE_ENV = "DSWIZ_HISTORY_SOURCE"
WARMUP_SHARE = 0.25
WARMUP_MIN_STEPS = 2


def entry_at_start(
    *,
    run_id: str,
    run_dir: Path,
    hardware: Hardware,
    sidecar: PlanSidecar | None = None,
    applies: bool = False,
    script: str = "",
    source: str | None = None,
    ds_config: Mapping[str, Any] | None = None,
    expandable_segments: bool = False,
) -> Measurement:
    """The entry a launch writes when its job starts; the run id is the run directory's (one entry per run).

    The strategy is what the launched DeepSpeed config holds (``ds_config``): the plan's, with the numbers the user
    edited since (micro-batch, accumulation, stage, offload), or, without a plan, what the config states. The plan's
    prediction is kept only when it ``applies`` (made for this GPU model and count): a prediction for other hardware
    says nothing about this run; for an edited config it is the physics' prediction of exactly what runs, so that the
    history never compares a measurement with the prediction of another strategy, nor of another allocator:
    ``expandable_segments`` is the job's own setting (wizard.alloc_conf), whatever the plan was made for. ``source``
    defaults to ``$DSWIZ_HISTORY_SOURCE`` (``dswiz probe`` sets it for the launches it starts), else "launch"."""
    model: dict[str, Any] = {"name": Path(script).name or "script"}
    strategy: dict[str, Any] = _config_strategy(ds_config)
    predicted = Figures()
    physics = ""
    model_spec = None
    seq_len = None
    fused = builds_fused_adam(ds_config)  # the optimizer the launched config makes DeepSpeed build
    if sidecar is not None:
        m = sidecar.model
        model = {
            "name": m.name,
            "arg": sidecar.model_arg,
            "parameters": m.total_params,
            "layers": m.layers,
            "hidden": m.hidden,
            "type": m.model_type,
        }
        model_spec = m.to_dict()  # to predict the run again once the physics changes (wizard.service.history)
        ran = strategy_of_config(sidecar, ds_config)
        strategy = strategy_record(ran)
        seq_len = sidecar.seq_len
        if applies:
            # The physics of this dswiz (no history) for exactly what runs: the plan's own figures may come from
            # an older dswiz, or a strategy the user has edited since.
            predicted = _physics_prediction(sidecar, ran, expandable_segments, fused)
            physics = physics_version() if predicted.tokens_per_sec is not None else ""
    chosen = source or os.environ.get(SOURCE_ENV, "") or "launch"
    return Measurement(
        id=run_id,
        hardware=hardware,
        model=model,
        strategy=strategy,
        predicted=predicted,
        physics=physics,
        model_spec=model_spec,
        seq_len=seq_len,
        expandable_segments=expandable_segments,
        fused_optimizer=fused,
        run_dir=str(run_dir),
        source=chosen if chosen in SOURCES else "launch",
    )


# The run history's names for a strategy's parts (Strategy attribute -> record key).
_RECORD_KEYS = {
    "zero_stage": "stage",
    "offload_optimizer": "offload_optimizer",
    "offload_param": "offload_param",
    "precision": "precision",
    "micro_batch_size": "micro_batch",
    "gradient_accumulation_steps": "grad_accum",
    "activation_checkpointing": "activation_checkpointing",
    "mode": "mode",
    "world_size": "world_size",
}


def strategy_record(s: Strategy) -> dict[str, Any]:
    """A strategy as the run history stores it."""
    return {key: getattr(s, attr) for attr, key in _RECORD_KEYS.items()}


def recorded_strategy(record: Mapping[str, Any], gpus_per_node: int) -> Strategy | None:
    """``strategy_record`` read back, on nodes of ``gpus_per_node`` GPUs; None where the record lacks a part or holds
    one no strategy has (a hand-edited or foreign export)."""
    try:
        world = int(record["world_size"])
        per_node = gpus_per_node if gpus_per_node > 0 and world % gpus_per_node == 0 else world
        s = Strategy(
            zero_stage=int(record["stage"]),
            offload_optimizer=str(record.get("offload_optimizer") or "none"),  # type: ignore[arg-type]
            offload_param=str(record.get("offload_param") or "none"),  # type: ignore[arg-type]
            precision=str(record["precision"]),  # type: ignore[arg-type]
            micro_batch_size=int(record["micro_batch"]),
            gradient_accumulation_steps=int(record.get("grad_accum") or 1),
            activation_checkpointing=record.get("activation_checkpointing") is True,
            mode=str(record.get("mode") or "train"),  # type: ignore[arg-type]
            gpus_per_node=per_node,
            nodes=world // per_node,
        )
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    sane = (
        s.zero_stage in (0, 1, 2, 3)
        and {s.offload_optimizer, s.offload_param} <= {"none", "cpu", "nvme"}
        and s.precision in ("bf16", "fp16", "fp32")
        and s.mode in ("train", "inference")
        and s.micro_batch_size >= 1
        and s.gradient_accumulation_steps >= 1
        and world >= 1
    )
    return s if sane else None


def physics_figures(
    hardware: HardwareReport,
    model: ModelSpec,
    strategy: Strategy,
    seq_len: int,
    *,
    expandable_segments: bool,
    fused_optimizer: bool,
) -> Figures:
    """The planner's physics (no history) for exactly the run a record describes: its strategy, model, hardware and
    sequence, the allocator it ran with and the optimizer its config made DeepSpeed build -- at launch and when a
    newer physics predicts the run again (wizard.service.history). Raises what the planner raises."""
    from wizard.planner import PlanRequest, evaluate, history_figures
    from wizard.planner.buffers import ZeroBuffers

    request = PlanRequest(
        seq_len=seq_len,
        expandable_segments=expandable_segments,
        buffers=ZeroBuffers(fused_optimizer=fused_optimizer),
    )
    return history_figures(evaluate(hardware, model, strategy, request).predicted)


def _physics_prediction(
    sidecar: PlanSidecar, strategy: Strategy, expandable_segments: bool, fused_optimizer: bool
) -> Figures:
    """``physics_figures`` of the plan's model, hardware and sequence, or none where it cannot be predicted."""
    try:
        return physics_figures(
            sidecar.hardware,
            sidecar.model,
            strategy,
            sidecar.seq_len,
            expandable_segments=expandable_segments,
            fused_optimizer=fused_optimizer,
        )
    except (
        DswizError,
        ValueError,
        ArithmeticError,
    ):  # nothing to compare with: the run still lists its figures
        return Figures()


def _config_strategy(ds_config: Mapping[str, Any] | None) -> dict[str, Any]:
    """What a DeepSpeed config without a plan states of its strategy (wizard.config.sidecar.stated_strategy_fields),
    in the history's names."""
    return {_RECORD_KEYS[k]: v for k, v in stated_strategy_fields(ds_config).items()}


def outcome(run: RunRecord) -> str:
    if run.status == STATUS_INTERRUPTED:
        return "interrupted"
    kind = run.verdict.kind if run.verdict else ""
    if kind == "success":
        return "success"
    if kind in ("cuda_oom", "host_oom"):
        return "oom"
    if kind == "supervisor_lost":
        return "lost"
    return "failed" if run.ended_at is not None else "running"


class FiguresSoFar:
    """What the snapshots of one job measured so far: steady-state tokens/s and step time (the first quarter of the
    steps, and at least the first two, are warm-up), the peak GPU memory per GPU, the host RAM peak (the job's
    processes' resident memory where sampled, else the machine's). Bounded: it
    keeps the last ``TIMED_KEPT`` timed snapshots (a week of 1 s polls fits a day of steady state)."""

    TIMED_KEPT = 100_000

    def __init__(self) -> None:
        self._timed: deque[tuple[int, float | None, float | None]] = deque(maxlen=self.TIMED_KEPT)
        self._peaks: dict[int, int] = {}
        self._host_peak: int | None = None
        self.first_step: int | None = None
        self.last_step: int | None = None

    def add(self, s: Snapshot) -> None:
        if s.step is not None:
            self.first_step = s.step if self.first_step is None else self.first_step
            self.last_step = s.step
            if s.tokens_per_sec is not None or s.step_time_s is not None:
                self._timed.append((s.step, s.tokens_per_sec, s.step_time_s))
        for g in s.gpus:
            used = g.job_memory_bytes if g.job_memory_bytes is not None else g.memory_used_bytes
            if used is not None:
                self._peaks[g.index] = max(self._peaks.get(g.index, 0), used)
        host = (
            s.job_rss_bytes if s.job_rss_bytes is not None else s.host_ram_used_bytes
        )  # the job's, else the host's
        if host is not None:
            self._host_peak = max(self._host_peak or 0, host)

    def figures(self) -> Figures:
        steady: list[tuple[int, float | None, float | None]] = []
        if self.last_step is not None:
            cut = max(WARMUP_MIN_STEPS, int(self.last_step * WARMUP_SHARE))
            steady = [t for t in self._timed if t[0] > cut] or list(self._timed)[-1:]
        tps = [t[1] for t in steady if t[1] is not None]
        step_time = [t[2] for t in steady if t[2] is not None]
        per_gpu = tuple(self._peaks[i] for i in sorted(self._peaks))
        return Figures(
            tokens_per_sec=statistics.median(tps) if tps else None,
            step_time_s=statistics.median(step_time) if step_time else None,
            peak_gpu_bytes=max(per_gpu) if per_gpu else None,
            peak_gpu_bytes_per_rank=per_gpu,
            host_ram_peak_bytes=self._host_peak,
            steps=self.last_step,
        )


def measured(snapshots: Iterable[Snapshot]) -> Figures:
    """Steady-state tokens/s and step time, the peak GPU memory per GPU, the host RAM peak (``FiguresSoFar``)."""
    so_far = FiguresSoFar()
    for s in snapshots:
        so_far.add(s)
    return so_far.figures()


# `dswiz monitor` on a job dswiz did not start: how its end state reads as a history outcome.
_WATCHED_OUTCOMES = {
    "finished": "success",
    "failed": "failed",
    "interrupted": "interrupted",
    "ended": "ended",
}


class WatchedJob:
    """What `dswiz monitor` records of a job it watched but did not start (one attached by PID): a measurement
    with source "monitor", when it saw the job from its start (its first step seen is at most the warm-up) to its
    end. A job dswiz launched records itself (``entry_at_start``/``entry_at_end``); one joined half-way measured
    too little to teach anything and is not recorded."""

    def __init__(self, hardware: Callable[[], Hardware]) -> None:
        self._hardware = hardware  # detected only when there is something to record
        self._figures = FiguresSoFar()
        self._started_at = time.time()
        self._state = "unknown"

    def observe(self, snap: Snapshot) -> None:
        self._figures.add(snap)
        self._state = snap.job_state

    def measurement(self) -> Measurement | None:
        first = self._figures.first_step
        whole = first is None or first <= WARMUP_MIN_STEPS
        if self._state not in _WATCHED_OUTCOMES or not whole or self._figures.last_step is None:
            return None
        return Measurement(
            hardware=self._hardware(),
            model={},
            strategy={},
            measured=self._figures.figures(),
            outcome=_WATCHED_OUTCOMES[self._state],
            source="monitor",
            started_at=self._started_at,
            ended_at=time.time(),
        )


def entry_at_end(start: Measurement, run: RunRecord) -> Measurement:
    metrics = Path(run.run_dir) / METRICS_JSONL
    figures = measured(iter_metrics(metrics)) if metrics.exists() else Figures()
    return start.ended(outcome(run), figures, at=run.ended_at)


def record(entry: Measurement, store_path: Path | None = None) -> str | None:
    """Write ``entry`` to the history; a warning line when that failed, None when it worked or is turned off."""
    path = store_path or default_path()
    if path is None:
        return None
    try:
        HistoryStore(path).put(entry)
    except DswizError as e:
        return f"warning: run history not updated: {e.problem} ({e.fix})"
    except Exception as e:  # a broken history never breaks a launch
        return f"warning: run history not updated: {type(e).__name__}: {e}"
    return None


def reconcile(store: HistoryStore) -> int:
    """Give their end to entries still "running" whose run has ended without its dswiz: killed, its reaper wrote
    the end into run.json ("supervisor lost"), or nothing did and its pid is gone. Returns how many were updated."""
    updated = 0
    for entry in store.runs():
        if entry.outcome != "running" or not entry.run_dir:
            continue
        try:
            run = read_run_record(entry.run_dir)
        except DswizError:
            continue  # its run dir is gone or unreadable: nothing to learn, the entry stays as it is
        status = effective_status(run)
        if status == STATUS_RUNNING:
            continue
        end = entry_at_end(entry, run)
        if status == STATUS_SUPERVISOR_LOST:
            end = end.ended("lost", end.measured, at=run.ended_at or time.time())
        store.put(end)
        updated += 1
    return updated
