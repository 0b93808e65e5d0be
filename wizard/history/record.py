"""One run as the history keeps it: where it ran, what the planner predicted, what was measured, how it ended.

Records are plain facts (frozen, JSON-able): the store writes them, the calibration reads them, export files carry
them between machines. Reading a record back never trusts the stored JSON: a hand-edited or foreign export with a
wrong-typed field gives a record with that field empty, not an exception.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from wizard.hardware.report import HardwareReport
from wizard.strategy import Strategy

# "ended": a job watched by `dswiz monitor` whose processes are gone without an exit code to tell how.
OUTCOMES = ("running", "success", "oom", "failed", "interrupted", "lost", "ended")
SOURCES = ("launch", "monitor", "probe", "import")

# A JSON number bigger than this is not a measurement (bytes of GPU memory or tokens/s of any machine that exists).
_MAX_MAGNITUDE = 1e18


@dataclass(frozen=True)
class Hardware:
    """The hardware fingerprint: runs on the same ``key`` calibrate each other."""

    gpu_name: str = ""
    gpu_memory_bytes: int | None = None
    gpus_per_node: int = 0
    nodes: int = 1
    interconnect: str = ""  # "nvlink", "pcie", "cpu" ...
    host_ram_bytes: int | None = None
    host_cores: int | None = None
    host_cpu: str = ""  # the host's CPU model: host-bound families calibrate only from runs of the same one
    driver: str = ""
    torch: str = ""
    deepspeed: str = ""

    @property
    def key(self) -> str:
        """What must match for one run to teach another: the GPU model, its memory, the GPU count and nodes."""
        gib = round((self.gpu_memory_bytes or 0) / 1024**3)
        return f"{self.gpu_name or 'cpu'}|{gib}GiB|{self.nodes}x{self.gpus_per_node}"

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v not in (None, "")}

    @classmethod
    def from_json(cls, data: Any) -> Hardware:
        d = data if isinstance(data, Mapping) else {}
        return cls(
            gpu_name=_text(d.get("gpu_name")),
            gpu_memory_bytes=_int(d.get("gpu_memory_bytes")),
            gpus_per_node=_int(d.get("gpus_per_node")) or 0,
            nodes=_int(d.get("nodes")) or 1,
            interconnect=_text(d.get("interconnect")),
            host_ram_bytes=_int(d.get("host_ram_bytes")),
            host_cores=_int(d.get("host_cores")),
            host_cpu=_text(d.get("host_cpu")),
            driver=_text(d.get("driver")),
            torch=_text(d.get("torch")),
            deepspeed=_text(d.get("deepspeed")),
        )


@dataclass(frozen=True)
class Figures:
    """Predicted or measured figures of one run (each optional: a run that died early measured little)."""

    tokens_per_sec: float | None = None
    step_time_s: float | None = None
    peak_gpu_bytes: int | None = None  # the largest over the ranks / GPUs
    peak_gpu_bytes_per_rank: tuple[int, ...] = ()
    host_ram_peak_bytes: int | None = None
    steps: int | None = None
    # predicted only: the planner put a quarter or more of the step on the host (its kernel launches, Python), so the
    # run's speed is its host CPU's as much as its GPU's
    host_bound: bool | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in self.__dict__.items():
            if v is None or v == ():
                continue
            out[k] = list(v) if isinstance(v, tuple) else v
        return out

    @classmethod
    def from_json(cls, data: Any) -> Figures:
        d = data if isinstance(data, Mapping) else {}
        per_rank = d.get("peak_gpu_bytes_per_rank")
        ranks = (
            tuple(v for v in (_int(x) for x in per_rank) if v is not None)
            if isinstance(per_rank, list)
            else ()
        )
        return cls(
            tokens_per_sec=_float(d.get("tokens_per_sec")),
            step_time_s=_float(d.get("step_time_s")),
            peak_gpu_bytes=_int(d.get("peak_gpu_bytes")),
            peak_gpu_bytes_per_rank=ranks,
            host_ram_peak_bytes=_int(d.get("host_ram_peak_bytes")),
            steps=_int(d.get("steps")),
            host_bound=d.get("host_bound") if isinstance(d.get("host_bound"), bool) else None,
        )


@dataclass(frozen=True)
class Measurement:
    hardware: Hardware
    model: Mapping[str, Any]  # the model spec the planner used (name, parameters, layers, hidden, ...)
    strategy: Mapping[str, Any]  # stage, offloads, micro-batch, accumulation, checkpointing, precision
    predicted: Figures = field(default_factory=Figures)
    measured: Figures = field(default_factory=Figures)
    seq_len: int | None = None
    outcome: str = "running"
    source: str = "launch"
    run_dir: str = ""
    started_at: float = field(default_factory=time.time)
    ended_at: float | None = None
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    # wizard.planner.calibration.physics_version() of the physics that made ``predicted`` ("" where not known)
    physics: str = ""
    # the planner's whole ModelSpec (ModelSpec.to_dict), to predict the run again under other physics
    model_spec: Mapping[str, Any] | None = None
    # whether the job ran with PyTorch's expandable segments (wizard.alloc_conf): its prediction, made again under
    # other physics, counts the allocator it ran with
    expandable_segments: bool = False
    # whether its config's optimizer section makes DeepSpeed build its FusedAdam where the optimizer stays on the GPU
    # (wizard.config.optimizer_op): stage 0's step, predicted again, counts the optimizer it ran with
    fused_optimizer: bool = False

    @property
    def family(self) -> str:
        """The strategy family the calibration corrects as one: ZeRO stage and where the states live."""
        return strategy_family(self.strategy)

    @property
    def group(self) -> str:
        """The families that do the same work on this run's GPUs (``family_group``)."""
        world = _int(self.strategy.get("world_size"))
        return family_group(self.family, world or 1)

    @property
    def host_bound(self) -> bool:
        """A run whose speed its host CPU sets as much as its GPU: of a host-bound family, or predicted to wait a
        quarter of its step or more on the host (micro-batch 1-2 of a ~1B model at any stage: such configs ran 1.37x
        apart from one process to the next at the median on H200 machines, docs/measurements.md)."""
        return host_bound_family(self.family) or self.predicted.host_bound is True

    def ended(self, outcome: str, measured: Figures, *, at: float | None = None) -> Measurement:
        return replace(self, outcome=outcome, measured=measured, ended_at=time.time() if at is None else at)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "source": self.source,
            "outcome": self.outcome,
            "run_dir": self.run_dir,
            "hardware": self.hardware.to_json(),
            "model": dict(self.model),
            "strategy": dict(self.strategy),
            "seq_len": self.seq_len,
            "predicted": self.predicted.to_json(),
            "measured": self.measured.to_json(),
            **({"physics": self.physics} if self.physics else {}),
            **({"model_spec": dict(self.model_spec)} if self.model_spec else {}),
            **({"expandable_segments": True} if self.expandable_segments else {}),
            **({"fused_optimizer": True} if self.fused_optimizer else {}),
        }

    @classmethod
    def from_json(cls, data: Any) -> Measurement | None:
        """None when ``data`` is not a record at all (no id); wrong-typed fields read as empty."""
        if not isinstance(data, Mapping):
            return None
        rid = data.get("id")
        if not isinstance(rid, str) or not rid or len(rid) > 64:
            return None
        outcome = data.get("outcome")
        source = data.get("source")
        return cls(
            id=rid,
            started_at=_float(data.get("started_at")) or 0.0,
            ended_at=_float(data.get("ended_at")),
            source=source if source in SOURCES else "import",
            outcome=outcome if outcome in OUTCOMES else "failed",
            run_dir=_text(data.get("run_dir")),
            hardware=Hardware.from_json(data.get("hardware")),
            model=_mapping(data.get("model")),
            strategy=_mapping(data.get("strategy")),
            seq_len=_int(data.get("seq_len")),
            predicted=Figures.from_json(data.get("predicted")),
            measured=Figures.from_json(data.get("measured")),
            physics=_text(data.get("physics"))[:64],
            model_spec=_spec(data.get("model_spec")),
            expandable_segments=data.get("expandable_segments") is True,
            fused_optimizer=data.get("fused_optimizer") is True,
        )


def hardware_fingerprint(hw: HardwareReport) -> Hardware:
    """What must match for runs to calibrate each other, plus the versions that explain a difference."""
    gpu = hw.gpus[0] if hw.gpus else None
    if gpu is None:
        link = "cpu"
    elif gpu.nvlink_gbs:
        link = "nvlink"
    else:
        link = f"pcie{gpu.pcie_gen}" if gpu.pcie_gen else "pcie"
    sw = hw.software
    return Hardware(
        gpu_name=gpu.name if gpu else "",
        gpu_memory_bytes=gpu.memory_total_bytes if gpu else None,
        gpus_per_node=len(hw.gpus),
        nodes=max(1, hw.nodes),
        interconnect=link,
        host_ram_bytes=hw.host.ram_total_bytes,
        host_cores=hw.host.work_cores,
        host_cpu=hw.host.cpu_model or "",
        driver=sw.nvidia_driver or "",
        torch=sw.torch or "",
        deepspeed=sw.deepspeed or "",
    )


def strategy_family(strategy: Mapping[str, Any]) -> str:
    """The family of a recorded strategy (a sidecar's ``stage``/``offload_*`` keys)."""
    stage = strategy.get("stage")
    return family_key(
        stage if isinstance(stage, int) else None,
        str(strategy.get("offload_optimizer") or "none"),
        str(strategy.get("offload_param") or "none"),
        strategy.get("activation_checkpointing") is True,
    )


def family_key(stage: int | None, offload_optimizer: str, offload_param: str, checkpointing: bool) -> str:
    """One name per calibration family: the ZeRO stage, where the optimizer states and parameters live, and
    activation checkpointing (its recomputation moves the step time the other way: measured on the H200, llama-1b
    ZeRO-3 was predicted -25 % without it and +6 % with it, bench/results/calibration_replay-*.md)."""
    ckpt = "-ckpt" if checkpointing else ""
    return f"z{'?' if stage is None else stage}-opt:{offload_optimizer}-param:{offload_param}{ckpt}"


def strategy_lineage(s: Strategy) -> tuple[str, str]:
    """(family, group) of a planned strategy: what the calibration corrects it by (``family_key``,
    ``family_group``)."""
    family = family_key(s.zero_stage, s.offload_optimizer, s.offload_param, s.activation_checkpointing)
    return family, family_group(family, s.world_size)


def host_bound_family(family: str) -> bool:
    """Families whose speed the host sets as much as the GPU: stage 3's per-layer fetch hooks run in Python on the
    host (the same ZeRO-3 config measured 6-10 % apart in two processes on one H200, and Qwen2-1.5B's 33.1k vs 23.5k
    tokens/s on two hosts), and offload runs the optimizer on the host's cores. Their runs teach only runs of the
    same host CPU, and no GPU-bound family borrows from them."""
    return family.startswith("z3") or "opt:none-param:none" not in family


def family_group(family: str, world_size: int) -> str:
    """Families that do the same work here and so teach each other before the machine-wide figure does: on one GPU,
    ZeRO stages 0-2 without offload shard nothing and communicate nothing (measured on the H200 within 1-6 % of each
    other: bench/results/plan_accuracy-2026-12-01-1gpu-sweep.md), so they are one group; every other family is a group
    of its own."""
    stage, _, rest = family.partition("-")
    if world_size == 1 and stage in ("z0", "z1", "z2") and rest.startswith("opt:none-param:none"):
        return f"z0-2-{rest}"
    return family


def _text(v: Any) -> str:
    return v[:200] if isinstance(v, str) else ""


def _float(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if math.isfinite(f) and 0 <= f <= _MAX_MAGNITUDE else None


def _int(v: Any) -> int | None:
    f = _float(v)
    return int(f) if f is not None else None


def _spec(v: Any) -> dict[str, Any] | None:
    """A stored model spec as JSON gave it (nested: its fine-tuning part), or None when it is not one or is too big to
    be one; its fields are only trusted once ModelSpec.from_dict has read them (wizard.service.history)."""
    if not isinstance(v, Mapping):
        return None
    try:
        size = len(json.dumps(v))
    except (TypeError, ValueError):
        return None
    return dict(v) if size <= 20_000 else None


def _mapping(v: Any) -> dict[str, Any]:
    """A flat copy of scalar fields (nested structures are not part of a model spec or a strategy)."""
    if not isinstance(v, Mapping):
        return {}
    out: dict[str, Any] = {}
    for k, x in list(v.items())[:100]:
        if isinstance(k, str) and (x is None or isinstance(x, (bool, int, float, str))):
            if isinstance(x, float) and not math.isfinite(x):
                continue
            out[k[:100]] = x[:200] if isinstance(x, str) else x
    return out
