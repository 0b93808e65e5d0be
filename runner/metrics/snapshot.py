"""What the monitor knows at one instant: a frozen ``Snapshot``. The dashboard renders it, ``--json`` prints it,
metrics.jsonl stores one per interval. ``to_json`` is the documented stream format (null where unknown)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from wizard.typed_json import MAX_TEXT, typed_fields

MAX_ITEMS = 256  # GPUs, alerts, notes kept from one snapshot line

SEVERITIES = ("info", "warning", "error")
# "ended": gone, exit code unknown (attached by PID); "interrupted": stopped by dswiz; "supervisor_lost": dswiz died
# before writing the end (runner.rundir.STATUS_SUPERVISOR_LOST).
JOB_STATES = (
    "starting",
    "running",
    "finished",
    "failed",
    "ended",
    "interrupted",
    "supervisor_lost",
    "unknown",
)


@dataclass(frozen=True)
class Alert:
    code: str  # oom_risk, above_prediction, oom, stall, hang, host_oom_kill, host_ram, overflow_storm, …
    severity: str  # SEVERITIES
    message: str  # one sentence: what is happening and what to do
    rank: int | None = None
    gpu: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class GpuState:
    index: int
    name: str | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    utilization: float | None = None  # percent, 0-100
    power_watts: float | None = None
    power_limit_watts: float | None = None
    temperature_c: float | None = None
    job_memory_bytes: int | None = None  # the job's processes on this GPU (None: NVML cannot say, e.g. MIG)
    predicted_peak_bytes: int | None = None

    @property
    def memory_fraction(self) -> float | None:
        if self.memory_used_bytes is None or not self.memory_total_bytes:
            return None
        return self.memory_used_bytes / self.memory_total_bytes


@dataclass(frozen=True)
class TrainingFigures:
    """What an instant (``Snapshot``) and a point of the charts (``HistoryPoint``) both say about training."""

    time: float
    step: int | None = None
    samples_per_sec: float | None = None
    tokens_per_sec: float | None = None
    tflops_per_gpu: float | None = None
    mfu: float | None = None
    loss: float | None = None
    lr: float | None = None
    step_time_s: float | None = None


@dataclass(frozen=True)
class HistoryPoint(TrainingFigures):
    """One point of the charts' history (averaged when downsampled; time and step are the bucket's last)."""

    gpu_util: float | None = None  # mean over GPUs
    gpu_mem_fraction: float | None = None  # max over GPUs
    host_ram_fraction: float | None = None
    gpu_utils: tuple[float | None, ...] = ()  # per GPU, index order (the dashboard's per-GPU sparklines)


@dataclass(frozen=True)
class Snapshot(TrainingFigures):
    total_steps: int | None = None
    eta_s: float | None = None
    world_size: int | None = None
    gpus: tuple[GpuState, ...] = ()
    gpu_note: str | None = None  # why there are no GPU numbers ("no NVIDIA GPU on this machine: …")
    host_ram_used_bytes: int | None = None
    host_ram_total_bytes: int | None = None
    host_swap_used_bytes: int | None = None
    pinned_estimate_bytes: int | None = None
    job_rss_bytes: int | None = None
    job_cpu_percent: float | None = None
    disk_device: str | None = None
    disk_read_bytes_per_sec: float | None = None
    disk_write_bytes_per_sec: float | None = None
    predicted_tokens_per_sec: float | None = None
    measured_peak_gpu_bytes: int | None = (
        None  # the most any GPU held so far (the job's own use where NVML says)
    )
    predicted_peak_gpu_bytes: int | None = None  # the plan's (run.json "plan")
    # figure -> where it came from ("samples_per_sec": "csv monitor", "loss": "script prints"; aggregate.SOURCE_*)
    sources: Mapping[str, str] = field(default_factory=dict)
    job_state: str = "unknown"  # JOB_STATES
    exit_code: int | None = None
    alerts: tuple[Alert, ...] = ()
    source: str = ""  # what is watched, in words ("run 20261130-014135", "pid 4242")
    notes: tuple[str, ...] = ()  # what the monitor can and cannot see
    # In memory only (not in --json / metrics.jsonl): the UI's log panel and charts.
    log_tail: tuple[str, ...] = field(default=(), compare=False)
    history: tuple[HistoryPoint, ...] = field(default=(), compare=False)

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` / metrics.jsonl object: every field, null where unknown, alerts as objects."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name in ("log_tail", "history"):
                continue
            value = getattr(self, f.name)
            if f.name == "gpus":
                value = [
                    {g.name: _clean(getattr(gpu, g.name)) for g in fields(GpuState)} for gpu in self.gpus
                ]
            elif f.name == "alerts":
                value = [a.to_json() for a in self.alerts]
            elif f.name == "notes":
                value = list(self.notes)
            elif f.name == "sources":
                value = dict(self.sources)
            out[f.name] = _clean(value)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Snapshot:
        """Inverse of ``to_json``; total: unknown keys are ignored, a value of the wrong type (``"notes": 1``,
        ``"host_ram_used_bytes": "5"``, NaN, a 5,000-digit number) becomes the field's default (None mostly)."""
        if not isinstance(data, Mapping):
            return cls(time=0.0)
        kw = typed_fields(cls, data, skip=("log_tail", "history", "gpus", "alerts", "notes", "sources"))
        kw.setdefault("time", 0.0)
        if kw.get("job_state") not in JOB_STATES:
            kw.pop("job_state", None)
        gpus = [
            GpuState(**typed_fields(GpuState, g))
            for g in _items(data.get("gpus"))
            if isinstance(g, Mapping) and "index" in typed_fields(GpuState, g)
        ][:MAX_ITEMS]
        alerts = []
        for a in _items(data.get("alerts"))[:MAX_ITEMS]:
            kw_alert = typed_fields(Alert, a) if isinstance(a, Mapping) else {}
            if "code" in kw_alert:
                if kw_alert.get("severity") not in SEVERITIES:
                    kw_alert["severity"] = "warning"
                kw_alert.setdefault("message", "")
                alerts.append(Alert(**kw_alert))
        notes = tuple(n[:MAX_TEXT] for n in _items(data.get("notes")) if isinstance(n, str))[:MAX_ITEMS]
        raw_sources = data.get("sources")
        sources = (
            {
                str(k)[:MAX_TEXT]: v[:MAX_TEXT]
                for k, v in list(raw_sources.items())[:MAX_ITEMS]
                if isinstance(v, str)
            }
            if isinstance(raw_sources, Mapping)
            else {}
        )
        return cls(**kw, gpus=tuple(gpus), alerts=tuple(alerts), notes=notes, sources=sources)

    def history_point(self) -> HistoryPoint:
        utils = [g.utilization for g in self.gpus if g.utilization is not None]
        fracs = [f for f in (g.memory_fraction for g in self.gpus) if f is not None]
        ram = (
            self.host_ram_used_bytes / self.host_ram_total_bytes
            if self.host_ram_used_bytes is not None and self.host_ram_total_bytes
            else None
        )
        return HistoryPoint(
            **{f.name: getattr(self, f.name) for f in fields(TrainingFigures)},
            gpu_util=sum(utils) / len(utils) if utils else None,
            gpu_mem_fraction=max(fracs) if fracs else None,
            host_ram_fraction=ram,
            gpu_utils=tuple(g.utilization for g in self.gpus),
        )


def _items(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else []


def _clean(value: Any) -> Any:
    """JSON has no NaN/inf: they become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
