"""The ``Collector``: polls every source on an interval (in its own thread), keeps the latest ``Snapshot``, and
appends one snapshot per interval to the run's metrics.jsonl.

For ``dswiz launch``::

    collector = Collector(run_dir, pids_provider=lambda: [launcher.pid], interval=1.0).start()
    ...  collector.latest()  # -> Snapshot | None, any thread
    collector.stop()          # final poll, files closed

Only one collector writes a run's metrics.jsonl (an flock on ``metrics.lock``); a second one (``dswiz monitor``
attached to a run that ``dswiz launch`` is watching) reads the same sources but does not write.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from runner import rundir
from runner.metrics.aggregate import Aggregator
from runner.metrics.csvsource import CsvSource
from runner.metrics.history import DEFAULT_CAPACITY, Downsampler, MetricsLog, load_history
from runner.metrics.host import HostSample, HostSampler
from runner.metrics.logsource import LogSource
from runner.metrics.snapshot import GpuState, HistoryPoint, Snapshot
from runner.metrics.target import JobTarget, read_run_json, run_pids, target_from_run_dir
from wizard.errors import DswizError

PidsProvider = Callable[[], Iterable[int]]
METRICS_LOCK = "metrics.lock"
LOG_TAIL_LINES = 12
RUN_JSON_REFRESH_S = 2.0
TERMINAL_STATES = ("finished", "failed", "ended", "interrupted", "supervisor_lost")
ENDED_STATUSES = ("finished", "interrupted")  # run.json status values once the launcher has seen the end
# The job's processes are gone while run.json still says "running" and its dswiz is alive: that dswiz records how
# the job ended (exit code, status) a moment later, so "ended" (how unknown) waits this long for it.
END_RECORD_GRACE_S = 10.0


class Collector:
    """Polls a job's sources. ``run_dir`` or ``target`` says what to watch; ``pids_provider`` returns the job's root
    pids (default: the pids run.json names). ``gpu_sampler``: an object with ``sample() -> GpuReading`` (default:
    NVML through wizard.hardware.gpu_sampler). ``persist=False`` never writes metrics.jsonl."""

    def __init__(
        self,
        run_dir: Path | str | None = None,
        pids_provider: PidsProvider | None = None,
        interval: float = 1.0,
        *,
        target: JobTarget | None = None,
        gpu_sampler: Any = None,
        persist: bool = True,
        history_capacity: int = DEFAULT_CAPACITY,
        clock: Callable[[], float] = time.time,
        observer: Callable[[Snapshot], None] | None = None,
    ) -> None:
        if target is None:
            if run_dir is None:
                raise ValueError("Collector needs a run_dir or a target")
            target = target_from_run_dir(Path(run_dir))
        self.target = target
        self._observer = observer  # sees every snapshot (what `dswiz monitor` records of a job it watched)
        self.interval = max(0.05, float(interval))
        self._clock = clock
        self._run_dir = target.run_dir
        self._pids_provider = pids_provider or self._default_pids
        self._run_json: dict[str, Any] = read_run_json(self._run_dir) if self._run_dir else {}
        self._run_json_at = clock()
        self._logs = LogSource(
            list(target.logs), list(target.rank_log_dirs), ranked_files=dict(target.rank_logs), attach=True
        )
        self._csv = CsvSource(target.csv_dir) if target.csv_dir is not None else None
        self._host = HostSampler(self._pids_provider, target.nvme_path)
        self._gpu_sampler = gpu_sampler
        self._gpu_note: str | None = None
        self.aggregator = Aggregator(target.plan, source=target.source, notes=target.notes)
        self.history = Downsampler(history_capacity)
        self._previous: Snapshot | None = None
        if self._run_dir is not None:
            self._previous = load_history(self._run_dir / rundir.METRICS_JSONL, self.history)
        self._metrics: MetricsLog | None = None
        self._lock_fh: Any = None
        if persist and self._run_dir is not None:
            self._metrics = self._open_metrics_log(self._run_dir)
        self._latest: Snapshot | None = None
        # the end metrics.jsonl holds last (state, exit code): written once, again only when it changes ("ended",
        # then the exit code the launch recorded says "finished"; "failed" from the logs, then with its exit code)
        self._terminal_written: tuple[str, int | None] | None = None
        if self._previous is not None and self._previous.job_state in TERMINAL_STATES:
            self._terminal_written = (self._previous.job_state, self._previous.exit_code)
        self._seen_alive = False
        self._gone_since: float | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors = 0  # polls that raised (the thread keeps going; the last error is in last_error)
        self.last_error: str | None = None

    # ------------------------------------------------------------------ public API
    def start(self) -> Collector:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="dswiz-collector", daemon=True)
            self._thread.start()
        return self

    def latest(self) -> Snapshot | None:
        with self._lock:
            return self._latest

    def previous(self) -> Snapshot | None:
        """The last snapshot metrics.jsonl held when this collector started (what an earlier monitor saw)."""
        return self._previous

    @property
    def done(self) -> bool:
        snap = self.latest()
        return snap is not None and snap.job_state in TERMINAL_STATES

    @property
    def log_bytes_read(self) -> int:
        return self._logs.bytes_read

    @property
    def persisting(self) -> bool:
        return self._metrics is not None

    def stop(self) -> Snapshot | None:
        """Stop the thread, take a last snapshot, close files. Safe to call twice."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(5.0, 3 * self.interval))
            self._thread = None
        last = None
        if self._logs is not None:
            with contextlib.suppress(Exception):
                last = self.poll_once()
            self._close()
        return last or self.latest()

    def poll_once(self) -> Snapshot:
        """One synchronous poll of every source (the thread calls this; tests and `--json` may too)."""
        now = self._clock()
        agg = self.aggregator
        agg.add_events(self._logs.poll(), now)
        if self._csv is not None:
            agg.add_csv(self._csv.poll(), now)
        host = self._host.sample(now)
        agg.set_gpus(self._sample_gpus(host), self._gpu_note)
        agg.set_host(host)
        self._watch_end(host, now)
        snap = agg.snapshot(now, log_tail=list(self._logs.recent_lines)[-LOG_TAIL_LINES:])
        self.history.add(snap.history_point())
        snap = _with_history(snap, self.history.points())
        terminal = snap.job_state in TERMINAL_STATES
        end = (snap.job_state, snap.exit_code) if terminal else None
        if self._metrics is not None and not (terminal and self._terminal_written == end):
            self._metrics.append(snap)  # the end is recorded once, not once per poll of a finished run
            self._terminal_written = end
        with self._lock:
            self._latest = snap
        if self._observer is not None:
            self._observer(snap)
        return snap

    # ------------------------------------------------------------------ internals
    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                snap = self.poll_once()
            except Exception as e:  # never let one bad poll end monitoring; say so in the snapshot
                self.errors += 1
                self.last_error = f"{type(e).__name__}: {e}"
                snap = None
            if snap is not None and snap.job_state in TERMINAL_STATES:
                break
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def _default_pids(self) -> list[int]:
        pids = list(self.target.pids)
        if self._run_dir is not None:
            now = self._clock()
            if now - self._run_json_at >= RUN_JSON_REFRESH_S:
                self._run_json = read_run_json(self._run_dir) or self._run_json
                self._run_json_at = now
            pids += run_pids(self._run_json)
        return sorted(set(pids))

    def _watch_end(self, host: HostSample, now: float) -> None:
        # Read run.json again once the processes are gone: the launch writes the end (and the exit code) there
        # right after, and the last snapshot must say how the job ended, not that it merely ended.
        stale = now - self._run_json_at >= RUN_JSON_REFRESH_S or not host.job_alive
        if self._run_dir is not None and stale:
            self._run_json = read_run_json(self._run_dir) or self._run_json
            self._run_json_at = now
        status = run_status(self._run_json) if self._run_dir is not None else None
        if status in ENDED_STATUSES or status == rundir.STATUS_SUPERVISOR_LOST:
            code = self._run_json.get("exit_code")
            ended_as = None if status == rundir.STATUS_FINISHED else status
            self.aggregator.set_job_ended(code if isinstance(code, int) else None, ended_as=ended_as)
            return
        if host.job_alive:
            self._seen_alive = True
            self._gone_since = None
        elif self._seen_alive:
            if self._gone_since is None:
                self._gone_since = now
            if now - self._gone_since < END_RECORD_GRACE_S and self._supervisor_alive():
                return  # its dswiz is about to write how the job ended
            self.aggregator.set_job_ended(None)  # processes gone, no launcher record of how: the logs tell

    def _supervisor_alive(self) -> bool:
        """Is the dswiz that launched this run (run.json's supervisor) known to be running?"""
        if self._run_dir is None or self._run_json.get("status") != rundir.STATUS_RUNNING:
            return False
        try:
            return rundir.supervisor_alive(rundir.RunRecord.from_dict(self._run_json)) is True
        except DswizError:
            return False

    def _sample_gpus(self, host: HostSample) -> list[GpuState]:
        sampler = self._gpu_sampler
        if sampler is None:
            try:
                from wizard.hardware.gpu_sampler import GpuSampler

                sampler = self._gpu_sampler = GpuSampler()
            except ImportError as e:
                self._gpu_note = f"GPU sampling unavailable: {e}"
                return []
        reading = sampler.sample()
        if not reading.gpus:
            self._gpu_note = (
                f"no NVIDIA GPU visible: {reading.reason}" if reading.reason else "no NVIDIA GPU visible"
            )
            return []
        self._gpu_note = None
        return gpu_states(reading.gpus, {p.pid for p in host.processes})

    def _open_metrics_log(self, run_dir: Path) -> MetricsLog | None:
        try:
            import fcntl

            fh = open(run_dir / METRICS_LOCK, "a")  # noqa: SIM115 - held for the collector's lifetime
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                fh.close()
                return None  # another collector writes this run's history
            self._lock_fh = fh
        except (ImportError, OSError):
            return None
        return MetricsLog(run_dir / rundir.METRICS_JSONL)

    def _close(self) -> None:
        self._logs.close()
        if self._csv is not None:
            self._csv.close()
        if self._metrics is not None:
            self._metrics.close()
        if self._lock_fh is not None:
            self._lock_fh.close()
            self._lock_fh = None
        closer = getattr(self._gpu_sampler, "close", None)
        if callable(closer):
            with contextlib.suppress(Exception):
                closer()


def run_status(run_json: dict[str, Any]) -> str | None:
    """run.json's status, "supervisor_lost" for a "running" run whose dswiz is gone (its pid and start time)."""
    status = run_json.get("status")
    if status != rundir.STATUS_RUNNING:
        return status if isinstance(status, str) else None
    try:
        return rundir.effective_status(rundir.RunRecord.from_dict(run_json))
    except DswizError:  # a partial or hand-edited run.json: its status as written
        return status


def gpu_states(gpus: Sequence[Any], job_pids: set[int]) -> list[GpuState]:
    """GpuSamples -> GpuStates with the job's own memory per GPU. When the job's processes show on some GPUs
    only, the others (another user's, or outside CUDA_VISIBLE_DEVICES) are left out. When they show on none
    (a container: NVML's nvmlDeviceGetComputeRunningProcesses
    reports the host's PIDs; docs/measurements.md, "Reading GPUs through NVML"), the job's share is unknown (None), not 0."""
    on_gpu = {g.index for g in gpus for p in g.processes if p.pid in job_pids}
    shown = [g for g in gpus if g.index in on_gpu] if on_gpu else list(gpus)
    out = []
    for g in shown:
        job_mem = None
        if on_gpu:
            known = [p.used_bytes for p in g.processes if p.pid in job_pids and p.used_bytes is not None]
            job_mem = sum(known) if known else None
        out.append(
            GpuState(
                index=g.index,
                name=g.name,
                memory_used_bytes=g.memory_used_bytes,
                memory_total_bytes=g.memory_total_bytes,
                utilization=g.utilization,
                power_watts=g.power_watts,
                power_limit_watts=g.power_limit_watts,
                temperature_c=g.temperature_c,
                job_memory_bytes=job_mem,
            )
        )
    return out


def _with_history(snap: Snapshot, history: Sequence[HistoryPoint]) -> Snapshot:
    return replace(snap, history=tuple(history))
