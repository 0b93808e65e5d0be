"""The end-of-job summary: folded from snapshots one at a time (constant memory), printed as the last ``--json``
object and shown when the dashboard sees the job end."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runner.metrics.snapshot import Snapshot


@dataclass
class Summary:
    source: str = ""
    first_time: float | None = None
    last_time: float | None = None
    first_step: int | None = None
    last_step: int | None = None
    job_state: str = "unknown"
    exit_code: int | None = None
    final_loss: float | None = None
    best_samples_per_sec: float | None = None
    _rate_sum: float = 0.0
    _rate_n: int = 0
    peak_gpu_memory_bytes: dict[int, int] = field(default_factory=dict)
    peak_host_ram_bytes: int | None = None  # the machine's RAM in use (other jobs' too)
    # The job's own processes (their resident memory, pinned buffers included).
    peak_job_rss_bytes: int | None = None
    alerts: dict[str, dict[str, Any]] = field(default_factory=dict)  # code -> first alert seen with it
    snapshots: int = 0

    def add(self, snap: Snapshot) -> None:
        self.snapshots += 1
        self.source = snap.source or self.source
        self.first_time = snap.time if self.first_time is None else self.first_time
        self.last_time = snap.time
        if snap.step is not None:
            self.first_step = snap.step if self.first_step is None else self.first_step
            self.last_step = snap.step
        self.job_state = snap.job_state
        self.exit_code = snap.exit_code if snap.exit_code is not None else self.exit_code
        self.final_loss = snap.loss if snap.loss is not None else self.final_loss
        if snap.samples_per_sec is not None:
            self._rate_sum += snap.samples_per_sec
            self._rate_n += 1
            self.best_samples_per_sec = max(self.best_samples_per_sec or 0.0, snap.samples_per_sec)
        for g in snap.gpus:
            if g.memory_used_bytes is not None:
                self.peak_gpu_memory_bytes[g.index] = max(
                    self.peak_gpu_memory_bytes.get(g.index, 0), g.memory_used_bytes
                )
        if snap.host_ram_used_bytes is not None:
            self.peak_host_ram_bytes = max(self.peak_host_ram_bytes or 0, snap.host_ram_used_bytes)
        if snap.job_rss_bytes is not None:
            self.peak_job_rss_bytes = max(self.peak_job_rss_bytes or 0, snap.job_rss_bytes)
        for a in snap.alerts:
            self.alerts.setdefault(a.code, a.to_json())

    def to_json(self) -> dict[str, Any]:
        duration = (
            self.last_time - self.first_time
            if self.first_time is not None and self.last_time is not None
            else None
        )
        return {
            "event": "summary",
            "source": self.source,
            "job_state": self.job_state,
            "exit_code": self.exit_code,
            "first_step": self.first_step,
            "last_step": self.last_step,
            "watched_s": round(duration, 3) if duration is not None else None,
            "final_loss": self.final_loss,
            "mean_samples_per_sec": self._rate_sum / self._rate_n if self._rate_n else None,
            "best_samples_per_sec": self.best_samples_per_sec,
            "peak_gpu_memory_bytes": [
                {"index": i, "bytes": b} for i, b in sorted(self.peak_gpu_memory_bytes.items())
            ],
            "peak_host_ram_bytes": self.peak_host_ram_bytes,
            "peak_job_rss_bytes": self.peak_job_rss_bytes,
            "alerts": [self.alerts[c] for c in sorted(self.alerts)],
            "snapshots": self.snapshots,
        }
