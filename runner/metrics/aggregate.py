"""Events and samples in, one ``Snapshot`` out: the pure arithmetic of the monitor (no files, no clocks).

Where each number comes from, best first:
- step: DeepSpeed's ``step=`` / throughput lines, the script's loss dicts, csv samples / global batch.
- samples/s: wall-clock rate between two progress observations that carry log timestamps (data loading included),
  else DeepSpeed's CurrSamplesPerSec (which excludes the time between steps).
- tokens/s = samples/s x seq_len; TFLOP/s per GPU = tokens/s x FLOPs/token / GPUs; MFU = that / the GPU's peak.
- step time: wall time per step between progress observations, else global batch / samples/s.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from itertools import pairwise
from typing import Any

from runner.metrics.alerts import AlertFacts, AlertThresholds, Failure, evaluate
from runner.metrics.csvmon import CsvPoint
from runner.metrics.host import HostSample
from runner.metrics.parse import LogEvent
from runner.metrics.plan import PlanInfo
from runner.metrics.snapshot import GpuState, HistoryPoint, Snapshot
from wizard.units import fmt_bytes, whole_number

_WINDOW = 64


@dataclass(frozen=True)
class _Obs:
    step: int
    time: float


class Aggregator:
    """Feed it with ``add_events``/``add_csv``/``set_gpus``/``set_host``/``set_job_ended``; read ``snapshot(now)``."""

    def __init__(
        self,
        plan: PlanInfo | None = None,
        *,
        source: str = "",
        notes: Sequence[str] = (),
        thresholds: AlertThresholds | None = None,
    ) -> None:
        self.plan = plan or PlanInfo()
        self.source = source
        self.notes = tuple(notes)
        self.thresholds = thresholds or AlertThresholds()
        self._obs: deque[_Obs] = deque(maxlen=_WINDOW)
        self._last_progress_at: float | None = None
        self._step: int | None = None
        self._ds_samples_per_sec: float | None = None
        self._global_batch: int | None = self.plan.global_batch_size
        self._world: int | None = self.plan.num_gpus
        self._loss: float | None = None
        self._lr: float | None = None
        self._skipped: deque[tuple[int, int]] = deque(maxlen=_WINDOW)  # (step, skipped) from step lines
        self._overflow_times: deque[float] = deque(maxlen=_WINDOW)
        self._min_scale_hit = False
        self._spawned: dict[int, int | None] = {}  # pid -> local rank
        self._ok_exits: set[int] = set()
        self._exit_codes: list[int] = []
        self._failures: list[Failure] = []
        self._ended = False
        self._ended_code: int | None = None
        self._gpus: tuple[GpuState, ...] = ()
        self._gpu_note: str | None = None
        self._host: HostSample | None = None
        self._host_peak: int | None = None
        self._rank_activity: deque[dict[int, float]] = deque(maxlen=8)
        self._activity_unit = "GPU utilisation"
        self._last_event_time: float | None = None

    # ------------------------------------------------------------------ inputs
    def add_events(self, events: Iterable[LogEvent], received_at: float) -> None:
        for e in events:
            self._add_event(e, received_at)

    def _add_event(self, e: LogEvent, received_at: float) -> None:
        at = e.timestamp if e.timestamp is not None else received_at
        v = e.values
        if e.timestamp is not None:
            self._last_event_time = e.timestamp
        if e.kind == "step":
            lr = v.get("lr") or ()
            if lr:
                self._lr = lr[0]
            self._skipped.append((v["step"], v["skipped"]))
            self._progress(v["step"], at, received_at, has_clock=e.timestamp is not None)
        elif e.kind == "throughput":
            self._ds_samples_per_sec = v.get("curr_samples_per_sec") or self._ds_samples_per_sec
            self._progress(v["global_step"], at, received_at, has_clock=e.timestamp is not None)
        elif e.kind == "loss":
            loss = v.get("loss", v.get("train_loss", v.get("eval_loss")))
            if loss is not None:
                self._loss = float(loss)
            if v.get("learning_rate") is not None:
                self._lr = float(v["learning_rate"])
            if isinstance(v.get("step"), int):
                self._progress(v["step"], at, received_at, has_clock=False)
        elif e.kind == "overflow":
            self._overflow_times.append(received_at)
            if v.get("new_scale") is not None and v["new_scale"] <= 1:
                self._min_scale_hit = True
        elif e.kind == "ds_config":
            self._config(v["key"], v["value"])
        elif e.kind == "world":
            self._world = self._world or v["world_size"]
        elif e.kind == "spawn":
            self._spawned[v["pid"]] = v.get("local_rank")
        elif e.kind == "exit":
            if v["return_code"] == 0 and v.get("pid") is not None:
                self._ok_exits.add(v["pid"])
            elif v["return_code"] != 0:
                self._exit_codes.append(v["return_code"])
        elif e.kind == "oom":
            size = fmt_bytes(v["tried_bytes"]) if v.get("tried_bytes") else "unknown size"
            where = f" on GPU {v['gpu']}" if v.get("gpu") is not None else ""
            self._failures.append(Failure("oom", e.rank, f"tried to allocate {size}{where}", v.get("gpu")))
        elif e.kind == "nccl_timeout":
            op = v.get("op") or "collective"
            after = f" after {v['ran_ms'] / 1000:.0f} s" if v.get("ran_ms") else ""
            self._failures.append(Failure("nccl_timeout", e.rank, f"{op}{after}"))
        elif e.kind == "exception":
            self._failures.append(Failure("exception", e.rank, f"{v['type']}: {v['message']}"[:300]))

    def _config(self, key: str, value: str) -> None:
        number = whole_number(value.strip())
        if number is None:
            return
        if key == "train_batch_size" and number > 0 and self.plan.global_batch_size is None:
            self._global_batch = number
        elif key == "world_size" and number > 0 and self._world is None:
            self._world = number

    def _progress(self, step: int, at: float, received_at: float, *, has_clock: bool) -> None:
        if self._step is not None and step < self._step:
            # A smaller step: the job restarted (or resumed from an older checkpoint). Start the window over.
            self._obs.clear()
            self._skipped.clear()
        if self._step is None or step != self._step:
            self._last_progress_at = max(at, self._last_progress_at or at) if has_clock else received_at
        # step 0 is DeepSpeed's report at initialisation: a rate measured from it would count the setup time.
        if has_clock and step > 0 and (not self._obs or self._obs[-1].step != step):
            self._obs.append(_Obs(step, at))
        self._step = step

    def add_csv(self, points: Iterable[CsvPoint], received_at: float) -> None:
        for p in points:
            if p.metric == "lr":
                self._lr = p.value
            elif p.metric in ("train_loss", "loss"):
                self._loss = p.value
            elif p.metric == "loss_scale" and p.value <= 1:
                self._min_scale_hit = True
            if self._global_batch and p.metric == "lr":
                step = p.samples // self._global_batch
                if self._step is None or step > self._step:
                    self._progress(step, received_at, received_at, has_clock=False)

    def set_gpus(self, gpus: Sequence[GpuState], note: str | None = None) -> None:
        self._gpus = tuple(gpus)
        self._gpu_note = note

    def set_host(self, host: HostSample) -> None:
        self._host = host
        if host.job_alive:
            self._host_peak = max(self._host_peak or 0, host.ram_used_bytes)
        activity: dict[int, float] = {}
        if self._gpus and all(g.utilization is not None for g in self._gpus) and len(self._gpus) > 1:
            activity = {g.index: float(g.utilization or 0.0) for g in self._gpus}
            self._activity_unit = "GPU utilisation"
        else:
            ranks = [p for p in host.processes if p.local_rank is not None]
            if len(ranks) > 1:
                activity = {p.local_rank: p.cpu_percent for p in ranks if p.local_rank is not None}
                self._activity_unit = "CPU %"
        if activity:
            self._rank_activity.append(activity)

    def set_job_ended(self, exit_code: int | None) -> None:
        """The job's processes are gone (seen by process watching); ``exit_code`` when the launcher's is known."""
        self._ended = True
        self._ended_code = exit_code
        if exit_code not in (None, 0) and exit_code not in self._exit_codes:
            self._exit_codes.append(exit_code)

    # ------------------------------------------------------------------ derived numbers
    @property
    def step(self) -> int | None:
        return self._step

    def job_state(self) -> str:
        if self._exit_codes:
            return "failed"
        if self._ended:
            crashed = any(f.kind in ("oom", "nccl_timeout", "exception") for f in self._failures)
            return "failed" if self._ended_code not in (None, 0) or crashed else "finished"
        if self._spawned and self._ok_exits >= set(self._spawned):
            return "finished"
        return "running" if self._step is not None else "starting"

    def _wall_rate(self) -> tuple[float | None, float | None]:
        """(steps per second, seconds per step) over the recent observations with log timestamps."""
        obs = list(self._obs)
        if len(obs) < 2:
            return None, None
        # The last few observations only: a change of rate shows within a minute, not at the end of the window.
        first, last = obs[-6:][0], obs[-1]
        dt, ds = last.time - first.time, last.step - first.step
        if dt <= 0 or ds <= 0:
            return None, None
        return ds / dt, dt / ds

    def _median_gap(self) -> float | None:
        obs = list(self._obs)
        gaps = [b.time - a.time for a, b in pairwise(obs) if b.time > a.time]
        return statistics.median(gaps) if gaps else None

    def snapshot(
        self, now: float, *, log_tail: Sequence[str] = (), history: Sequence[HistoryPoint] = ()
    ) -> Snapshot:
        steps_per_s, step_time = self._wall_rate()
        samples = None
        if self._obs and self._global_batch:
            # Timestamped progress exists: report the wall-clock rate only (None until two observations), never
            # DeepSpeed's per-step number in between: mixing the two draws spikes that are not there.
            samples = steps_per_s * self._global_batch if steps_per_s is not None else None
        elif self._ds_samples_per_sec is not None:
            samples = self._ds_samples_per_sec
        if step_time is None and samples and self._global_batch:
            step_time = self._global_batch / samples
        tokens = samples * self.plan.seq_len if samples is not None and self.plan.seq_len else None
        world = self._world or (len(self._gpus) or None)
        tflops = None
        if tokens is not None and self.plan.flops_per_token and world:
            tflops = tokens * self.plan.flops_per_token / world / 1e12
        mfu = (
            tflops / self.plan.peak_tflops_per_gpu
            if tflops is not None and self.plan.peak_tflops_per_gpu
            else None
        )
        total = self.plan.total_steps
        eta = None
        if total and self._step is not None and step_time is not None and self.job_state() == "running":
            eta = max(0, total - self._step) * step_time
        gpus = tuple(
            replace(g, predicted_peak_bytes=g.predicted_peak_bytes or self.plan.predicted_peak_gpu_bytes)
            for g in self._gpus
        )
        state = self.job_state()
        host = self._host
        facts = AlertFacts(
            now=now,
            running=state in ("running", "starting"),
            exit_codes=tuple(self._exit_codes),
            gpus=gpus,
            host_ram_used_bytes=host.ram_used_bytes if host else None,
            host_ram_total_bytes=host.ram_total_bytes if host else None,
            host_ram_peak_bytes=self._host_peak,
            step=self._step,
            last_progress_at=self._last_progress_at,
            median_progress_gap_s=self._median_gap(),
            overflow_times=tuple(self._overflow_times),
            min_loss_scale_hit=self._min_scale_hit,
            skipped_recent=self._skipped_recent(),
            rank_activity=tuple(self._rank_activity),
            activity_unit=self._activity_unit,
            failures=tuple(self._failures),
        )
        exit_code = (
            self._ended_code
            if self._ended_code is not None
            else (self._exit_codes[0] if self._exit_codes else None)
        )
        if exit_code is None and state == "finished":
            exit_code = 0
        return Snapshot(
            time=now,
            step=self._step,
            total_steps=total,
            samples_per_sec=samples,
            tokens_per_sec=tokens,
            tflops_per_gpu=tflops,
            mfu=mfu,
            loss=self._loss,
            lr=self._lr,
            step_time_s=step_time,
            eta_s=eta,
            world_size=world,
            gpus=gpus,
            gpu_note=self._gpu_note,
            **_host_figures(host),
            pinned_estimate_bytes=self.plan.pinned_host_bytes,
            predicted_tokens_per_sec=self.plan.predicted_tokens_per_sec,
            job_state=state,
            exit_code=exit_code,
            alerts=evaluate(facts, self.thresholds),
            source=self.source,
            notes=self.notes,
            log_tail=tuple(log_tail),
            history=tuple(history),
        )

    def _skipped_recent(self) -> tuple[int, int] | None:
        if len(self._skipped) < 2:
            return None
        (s0, k0), (s1, k1) = self._skipped[0], self._skipped[-1]
        return (k1 - k0, s1 - s0) if s1 > s0 else None


# Snapshot field <- HostSample attribute: what the last host sample says (all None without one).
_HOST_FIGURES = {
    "host_ram_used_bytes": "ram_used_bytes",
    "host_ram_total_bytes": "ram_total_bytes",
    "host_swap_used_bytes": "swap_used_bytes",
    "job_rss_bytes": "job_rss_bytes",
    "job_cpu_percent": "job_cpu_percent",
    "disk_device": "disk_device",
    "disk_read_bytes_per_sec": "disk_read_bytes_per_sec",
    "disk_write_bytes_per_sec": "disk_write_bytes_per_sec",
}


def _host_figures(host: HostSample | None) -> dict[str, Any]:
    return {field: getattr(host, attr) if host else None for field, attr in _HOST_FIGURES.items()}
