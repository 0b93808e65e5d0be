"""Events and samples in, one ``Snapshot`` out: the pure arithmetic of the monitor (no files, no clocks).

Where each number comes from, best first:
- step: DeepSpeed's ``step=`` / throughput lines, the script's loss dicts, csv samples / global batch.
- samples/s: wall-clock rate between two progress observations that carry log timestamps (data loading included),
  else DeepSpeed's CurrSamplesPerSec (which excludes the time between steps; shown from the first throughput line
  until two observations give a wall rate), else the csv monitor's sample counter over the time its rows arrived
  (accelerate and the HF Trainer set steps_per_print to infinity: no DeepSpeed progress line), else the step the
  script prints over the time its lines arrived, x the global batch.
- loss: the training loss of the script's dicts and prints (runner/metrics/prints.py), rank 0 first; an eval loss
  only while no training loss was ever seen.
``Snapshot.sources`` names where each of step, samples/s and loss came from (``SOURCE_*``).
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
# Rates use the last few observations only: a change of rate shows within a minute, not at the end of the window.
RATE_WINDOW = 6

SOURCE_DS_LOG = "DeepSpeed log"
SOURCE_DS_CURR = "DeepSpeed CurrSamplesPerSec"
SOURCE_CSV = "csv monitor"
SOURCE_PRINTS = "script prints"
SOURCE_DICTS = "log dicts"  # the HF Trainer's {'loss': …} (and scripts that print the same)
SOURCE_TQDM = "progress bar"
_FORM_SOURCE = {"dict": SOURCE_DICTS, "print": SOURCE_PRINTS, "tqdm": SOURCE_TQDM}


@dataclass(frozen=True)
class _Obs:
    step: int
    time: float


def _rate(obs: Sequence[_Obs]) -> float | None:
    """Count per second over the last RATE_WINDOW observations (None before two distinct times)."""
    recent = list(obs)[-RATE_WINDOW:]
    if len(recent) < 2:
        return None
    dt, dn = recent[-1].time - recent[0].time, recent[-1].step - recent[0].step
    return dn / dt if dt > 0 and dn > 0 else None


def _observe(obs: deque[_Obs], count: int, at: float) -> None:
    """One more (count, time); a smaller count is a restart (the window starts over), a repeated one is kept once
    at its first time, a new count at the same time replaces the last (rows read in one poll)."""
    if obs and count < obs[-1].step:
        obs.clear()
    if obs and count == obs[-1].step:
        return
    if obs and at <= obs[-1].time:
        obs.pop()
        if obs and count <= obs[-1].step:
            return
    obs.append(_Obs(count, at))


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
        self._train_loss_seen = False
        self._rank0_loss_seen = False
        self._csv_samples: deque[_Obs] = deque(maxlen=_WINDOW)  # (csv monitor's global_samples, arrival time)
        self._printed_steps: deque[_Obs] = deque(maxlen=_WINDOW)  # (step the script printed, arrival time)
        self._printed_source = SOURCE_PRINTS  # which kind of print those steps came from
        self._sources: dict[str, str] = {}
        self._gpu_peak: dict[int, int] = {}
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
        self._ended_as: str | None = None  # "interrupted" / "supervisor_lost": how run.json says it ended
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
            self._loss_event(e, received_at)
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

    def _loss_event(self, e: LogEvent, received_at: float) -> None:
        if e.rank in (None, 0):
            self._rank0_loss_seen = True
        elif self._rank0_loss_seen:
            return  # rank 0 prints its own: the other ranks' copies (or local losses) would make the chart jump
        v = e.values
        # The Trainer's last dict has "train_loss", the run's mean: the last step's loss stays the one shown.
        train = v.get("loss", None if self._train_loss_seen else v.get("train_loss"))
        source = _FORM_SOURCE.get(v.get("form", "dict"), SOURCE_PRINTS)
        if train is not None:
            self._loss, self._train_loss_seen = float(train), True
            self._sources["loss"] = source
        elif v.get("eval_loss") is not None and not self._train_loss_seen:
            self._loss = float(v["eval_loss"])
            self._sources["loss"] = f"{source}, eval loss"
        if v.get("learning_rate") is not None:
            self._lr = float(v["learning_rate"])
        if isinstance(v.get("step"), int):
            if not self._obs and self._ds_samples_per_sec is None:
                self._sources["step"] = source
            _observe(self._printed_steps, v["step"], received_at)
            self._printed_source = source
            self._progress(v["step"], received_at, received_at, has_clock=False)

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
            self._sources["step"] = SOURCE_DS_LOG
        self._step = step

    def add_csv(self, points: Iterable[CsvPoint], received_at: float) -> None:
        for p in points:
            if p.metric == "lr":
                self._lr = p.value
            elif p.metric in ("train_loss", "loss"):
                self._loss, self._train_loss_seen = p.value, True
                self._sources["loss"] = SOURCE_CSV
            elif p.metric == "loss_scale" and p.value <= 1:
                self._min_scale_hit = True
            if p.metric == "lr":  # one lr row per optimizer step: the sample counter is the job's progress
                _observe(self._csv_samples, p.samples, received_at)
            if self._global_batch and p.metric == "lr":
                step = p.samples // self._global_batch
                if self._step is None or step > self._step:
                    self._sources.setdefault("step", SOURCE_CSV)
                    self._progress(step, received_at, received_at, has_clock=False)

    def set_gpus(self, gpus: Sequence[GpuState], note: str | None = None) -> None:
        self._gpus = tuple(gpus)
        for g in self._gpus:
            used = g.job_memory_bytes if g.job_memory_bytes is not None else g.memory_used_bytes
            if used is not None:
                self._gpu_peak[g.index] = max(self._gpu_peak.get(g.index, 0), used)
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
            # a rank's processes together: it and what it started (data loader workers share its local rank)
            for p in host.processes:
                if p.local_rank is not None:
                    activity[p.local_rank] = activity.get(p.local_rank, 0.0) + p.cpu_percent
            if len(activity) > 1:
                self._activity_unit = "CPU %"
            else:
                activity = {}
        if activity:
            self._rank_activity.append(activity)

    def set_job_ended(self, exit_code: int | None, *, ended_as: str | None = None) -> None:
        """The job's processes are gone (seen by process watching); ``exit_code`` when the launcher's is known.
        ``ended_as``: "interrupted" (dswiz stopped it: its 128+N code is not a failure) or "supervisor_lost"
        (dswiz died before writing the end), as run.json says."""
        self._ended = True
        self._ended_code = exit_code
        self._ended_as = ended_as
        if ended_as is None and exit_code not in (None, 0) and exit_code not in self._exit_codes:
            self._exit_codes.append(exit_code)

    # ------------------------------------------------------------------ derived numbers
    @property
    def step(self) -> int | None:
        return self._step

    def job_state(self) -> str:
        """JOB_STATES. "ended": the processes are gone and nothing tells how (a job attached by PID is not this
        process's child, so its exit code cannot be known): never reported as finished with exit 0."""
        if self._ended_as is not None:
            return self._ended_as
        if self._exit_codes:
            return "failed"
        all_ok = bool(self._spawned) and self._ok_exits >= set(self._spawned)
        if self._ended:
            crashed = any(f.kind in ("oom", "nccl_timeout", "exception") for f in self._failures)
            if self._ended_code not in (None, 0) or crashed:
                return "failed"
            return "finished" if self._ended_code == 0 or all_ok else "ended"
        if all_ok:
            return "finished"
        return "running" if self._step is not None else "starting"

    def _speed(self) -> tuple[float | None, float | None, str | None]:
        """(samples/s, seconds per step, where from), best source first (the module docstring's order)."""
        batch = self._global_batch
        steps_per_s = _rate(self._obs)
        if steps_per_s is not None and batch:
            return steps_per_s * batch, 1 / steps_per_s, SOURCE_DS_LOG
        if self._ds_samples_per_sec is not None:
            # Until the log's timestamps give a wall rate: DeepSpeed's own per-step figure, never mixed after it.
            step_time = (
                1 / steps_per_s if steps_per_s else (batch / self._ds_samples_per_sec if batch else None)
            )
            return self._ds_samples_per_sec, step_time, SOURCE_DS_CURR
        samples_per_s = _rate(self._csv_samples)
        if samples_per_s is not None:
            return samples_per_s, batch / samples_per_s if batch else None, SOURCE_CSV
        printed = _rate(self._printed_steps)
        if printed is not None:
            return (printed * batch if batch else None), 1 / printed, self._printed_source
        return None, (1 / steps_per_s if steps_per_s else None), None

    def _median_gap(self) -> float | None:
        obs = list(self._obs)
        gaps = [b.time - a.time for a, b in pairwise(obs) if b.time > a.time]
        return statistics.median(gaps) if gaps else None

    def snapshot(
        self, now: float, *, log_tail: Sequence[str] = (), history: Sequence[HistoryPoint] = ()
    ) -> Snapshot:
        samples, step_time, speed_source = self._speed()
        sources = dict(self._sources)
        if speed_source is not None and samples is not None:
            sources["samples_per_sec"] = speed_source
        if speed_source is not None and step_time is not None:
            sources["step_time_s"] = speed_source
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
            tokens_per_sec=tokens,
            predicted_tokens_per_sec=self.plan.predicted_tokens_per_sec,
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
            measured_peak_gpu_bytes=max(self._gpu_peak.values()) if self._gpu_peak else None,
            predicted_peak_gpu_bytes=self.plan.predicted_peak_gpu_bytes,
            sources=sources,
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
