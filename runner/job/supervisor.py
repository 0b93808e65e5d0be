"""One launch, supervised: start the launcher(s) of a prepared run, follow their output and the per-rank logs, stop
the job on request, and decide the verdict once no process of the job is left.

Where the output goes: each launcher's stdout+stderr (a pipe, read by one thread per launcher) is appended verbatim
to ``logs/combined.log``; the per-rank logs (``--enable_each_rank_log``) are tailed where DeepSpeed writes them.
Both are handed to a ``JobSink`` (the terminal printer, or a dashboard) and parsed into a ``JobObserver`` for the
live status and the verdict.
"""

from __future__ import annotations

import collections
import enum
import queue
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import IO

from runner import rundir
from runner.job.prepare import PreparedRun
from runner.job.session import session_processes, signal_job, start_in_new_session
from runner.job.sink import JobSink, RunOutcome
from runner.job.stopping import StopEscalation, StopReason
from runner.job.watchers import DeathWatch, LauncherLine, LineQueue, rank_of_process, start_pipe_reader
from runner.metrics.csvsource import CsvSource
from runner.metrics.tail import RankLogTail
from runner.rundir import LauncherProcess, RunRecord
from runner.verdict import JobObserver, OomAdvisor, RankDeath, Status, decide, exit_code
from wizard import __version__
from wizard.checkpoints import checkpoint_hint, output_dirs_from_args
from wizard.errors import DswizError

_TICK_S = 0.1
_WATCH_EVERY_S = 0.25
_RANK_RESOLVE_S = 5.0  # how long to retry reading a new rank's RANK variable before trusting its local rank
_ORPHAN_GRACE_S = 3.0  # processes left after the launcher ended by itself: this long to exit, then stopped
_UNSEEN_PIPE_S = 2.0  # launchers gone, nobody left, a pipe still open: stop waiting for it after this long
_DRAIN_BATCH = 2000  # launcher lines handled per tick at most, so stops and status lines are not held up


class JobState(enum.Enum):
    CREATED = enum.auto()
    RUNNING = enum.auto()
    ENDED = enum.auto()


@dataclass(frozen=True)
class _PendingRank:
    """A spawned rank whose global rank is not known yet."""

    local_rank: int | None
    since: float


class Job:
    """One launch, supervised. ``run()`` blocks until no process of the job is left and returns the outcome.

    Thread-safe entry points: ``request_stop(reason)`` (signal handlers, a dashboard's stop key) and ``status()``.
    """

    def __init__(
        self,
        prepared: PreparedRun,
        sink: JobSink,
        *,
        grace_s: float = 5.0,
        term_grace_s: float = 5.0,
        status_every_s: float = 10.0,
        optimizer_op: str | None = None,
        oom_advisor: OomAdvisor | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.prepared = prepared
        self.sink = sink
        self.status_every_s = status_every_s
        self.oom_advisor = oom_advisor
        self.state = JobState.CREATED
        self._clock = clock
        self._t0 = clock()
        self.observer = JobObserver(started=self._t0, optimizer_op=optimizer_op)
        self._stop = StopEscalation(grace_s=grace_s, term_grace_s=term_grace_s)
        self._lines: LineQueue = queue.Queue()
        self._procs: list[subprocess.Popen[bytes]] = []
        self._sids: set[int] = set()
        self._threads: list[threading.Thread] = []
        self._rank_logs = RankLogTail(prepared.run_dir / rundir.RANK_LOGS_DIR)
        self._csv = CsvSource(prepared.run_dir / rundir.CSV_DIR / rundir.CSV_JOB_NAME)
        self._log: IO[str] | None = None
        self._rank_of_pid: dict[int, int] = {}
        self._pending: dict[int, _PendingRank] = {}
        self._watch = DeathWatch(clock)
        self._last_watch = 0.0
        self._last_status = self._t0
        self._record: RunRecord | None = None
        self._leftover_killed = 0
        self._checkpoint_lines: collections.deque[str] = collections.deque(maxlen=200)

    # -- control ---------------------------------------------------------------------------------------

    def request_stop(self, reason: StopReason = StopReason.SIGINT) -> None:
        """Stop the job (SIGINT to its groups, then SIGTERM, then SIGKILL). A second request escalates at once."""
        self._stop.request(reason)

    @property
    def grace_s(self) -> float:
        return self._stop.grace_s

    @property
    def term_grace_s(self) -> float:
        return self._stop.term_grace_s

    @property
    def sids(self) -> set[int]:
        return set(self._sids)

    def status(self) -> Status:
        return self.observer.status(self._clock())

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> None:
        prepared = self.prepared
        # Held open for the whole run (closed in _finish): one append per line, flushed for `dswiz monitor`.
        self._log = open(  # noqa: SIM115
            prepared.run_dir / rundir.COMBINED_LOG, "a", encoding="utf-8", errors="replace"
        )
        several = len(prepared.specs) > 1
        for k, cmd in enumerate(prepared.commands):
            try:
                proc = start_in_new_session(cmd.argv, cwd=prepared.cwd, env_changes=cmd.env)
            except OSError as e:
                signal_job(self._sids, signal.SIGKILL)  # the launchers already started
                raise DswizError(
                    f"cannot start {cmd.argv[0]}: {e.strerror}", "check --python (the training environment)"
                ) from e
            self._procs.append(proc)
            self._sids.add(proc.pid)
            assert proc.stdout is not None
            self._threads.append(
                start_pipe_reader(proc.stdout, f"launcher{k}" if several else "launcher", self._lines)
            )
        self._record = self._initial_record()
        rundir.write_run_record(prepared.run_dir, self._record)
        self._watch.start()
        self.state = JobState.RUNNING
        self.sink.on_phase(self.observer.phases.current)

    def run(self) -> RunOutcome:
        if self.state is JobState.CREATED:
            self.start()
        open_streams = len(self._threads)
        launchers_done_at: float | None = None
        while True:
            open_streams -= self._drain(timeout=_TICK_S)
            now = self._clock()
            self._tick(now)
            if any(p.poll() is None for p in self._procs):
                continue
            if launchers_done_at is None:
                launchers_done_at = now
            if self._job_is_gone(now - launchers_done_at, open_streams):
                break
        for t in self._threads:
            t.join(timeout=2.0)
        self._drain(timeout=0.0, all_of_it=True)
        self._handle_rank_lines(self._rank_logs.poll(final=True), self._clock())
        return self._finish()

    # -- the loop --------------------------------------------------------------------------------------

    def _tick(self, now: float) -> None:
        """One turn of the loop: the stop's next signal, the rank logs and new ranks, the status line."""
        self._stop_tick(now)
        if now - self._last_watch >= _WATCH_EVERY_S:
            self._last_watch = now
            if self._pending:
                self._resolve_ranks()
            self._handle_rank_lines(self._rank_logs.poll(), now)
            self._csv_progress(now)
        if now - self._last_status >= self.status_every_s:
            self._last_status = now
            self.sink.on_status(self.observer.status(now))

    def _csv_progress(self, now: float) -> None:
        """A job that prints no step (accelerate, the Trainer) still writes csv monitor rows: its steps and speed."""
        phase = self.observer.add_csv(self._csv.poll(), now)
        if phase is not None:
            self.sink.on_phase(phase)

    def _job_is_gone(self, since_launchers_ended: float, open_streams: int) -> bool:
        """Every launcher has exited: is the whole job gone? Processes left behind are stopped the same way as a
        stop request would (after a short grace: they may be exiting)."""
        remaining = session_processes(self._sids)
        if not remaining:
            # a pipe held open by nobody we can see: do not wait for it for long
            return open_streams <= 0 or since_launchers_ended > _UNSEEN_PIPE_S
        if self._stop.reason is None and since_launchers_ended > _ORPHAN_GRACE_S:
            self._leftover_killed = len(remaining)
            self.sink.on_notice(
                f"{len(remaining)} process(es) of the job outlived the launcher: stopping them"
            )
            self._stop.request(StopReason.ORPHANS)
        return False

    def _stop_tick(self, now: float) -> None:
        step = self._stop.tick(now)
        if step is None or (step.only_if_alive and not session_processes(self._sids)):
            return
        if step.notice is not None:
            self.sink.on_notice(step.notice)
        signal_job(self._sids, step.sig)

    def _drain(self, timeout: float, all_of_it: bool = False) -> int:
        """Move queued launcher lines to the log/sink/observer. Returns how many streams ended."""
        ended = 0
        deadline = self._clock() + timeout
        batch: list[LauncherLine] = []
        while True:
            try:
                wait = max(0.0, deadline - self._clock())
                item = self._lines.get(timeout=wait) if wait > 0 and not batch else self._lines.get_nowait()
            except queue.Empty:
                break
            if item is None:
                ended += 1
                continue
            batch.append(item)
            if len(batch) >= _DRAIN_BATCH and not all_of_it:
                break
        for line in batch:
            self._one_line(line.text, None, line.stream, self._clock())
        return ended

    def _handle_rank_lines(self, lines: list[tuple[int | None, str]], now: float) -> None:
        for rank, text in lines:
            self._one_line(text, rank, f"rank{rank}", now)

    def _one_line(self, text: str, rank: int | None, stream: str, now: float) -> None:
        if self._log is not None and stream.startswith("launcher"):  # rank lines are in logs/ranks/ already
            self._log.write(text + "\n")
            self._log.flush()
        self.sink.on_line(text, rank)
        if "heckpoint" in text:  # where the job says it saved one (the verdict points at it)
            self._checkpoint_lines.append(text)
        before = self.observer.phases.current
        event = self.observer.feed(text, now, rank=rank, stream=stream)
        if self.observer.phases.current is not before:
            self.sink.on_phase(self.observer.phases.current)
        if event is not None and event.kind == "spawn" and event.values.get("pid"):
            self._register_rank(int(event.values["pid"]), event.values.get("local_rank"))

    # -- ranks -----------------------------------------------------------------------------------------

    def _register_rank(self, pid: int, local_rank: int | None) -> None:
        """A rank the launcher spawned (its line names the pid and the *local* rank). The global rank is read from
        the process itself; right after the spawn that can fail, so it is retried on the next watches."""
        self._pending[pid] = _PendingRank(local_rank, self._clock())
        self._watch.add(pid)
        self._resolve_ranks()

    def _resolve_ranks(self) -> None:
        for pid, pending in list(self._pending.items()):
            rank = rank_of_process(pid)
            taken = set(self._rank_of_pid.values())
            if (
                rank is None
                and self._clock() - pending.since > _RANK_RESOLVE_S
                and pending.local_rank not in taken
            ):
                rank = pending.local_rank  # the best the launcher's line says (right on one node)
            if rank is None:
                continue
            del self._pending[pid]
            self._rank_of_pid[pid] = rank
            if self._record is not None:
                pids = {**self._record.rank_pids, rank: pid}
                self._record = replace(self._record, rank_pids=pids, world_size=self.observer.world_size)
                rundir.write_run_record(self.prepared.run_dir, self._record)

    def _deaths(self) -> list[RankDeath]:
        """The ranks seen dead, first first (their rank as resolved, else the launcher's local rank)."""
        deaths = []
        for pid, death in self._watch.died.items():
            rank = self._rank_of_pid.get(pid)
            if rank is None and pid in self._pending:
                rank = self._pending[pid].local_rank
            if rank is None:
                continue
            deaths.append(
                RankDeath(
                    rank=rank,
                    pid=pid,
                    at=death.at - self._t0,
                    host_available_bytes=death.host_available_bytes,
                    host_total_bytes=death.host_total_bytes,
                )
            )
        return sorted(deaths, key=lambda d: d.at)

    # -- the record and the end ------------------------------------------------------------------------

    def _initial_record(self) -> RunRecord:
        p = self.prepared
        spec = p.specs[0]
        return RunRecord(
            run_id=p.run_id,
            run_dir=str(p.run_dir),
            status=rundir.STATUS_RUNNING,
            started_at=time.time(),
            command=p.commands[0].argv,
            command_line=p.commands[0].shell(),
            env_changes=dict(p.commands[0].env),
            cwd=p.cwd,
            launcher=spec.launcher,
            script=spec.script,
            script_args=spec.script_args,
            configs=dict(p.configs),
            config_changes=p.config_changes,
            launchers=tuple(
                LauncherProcess(argv=c.argv, pid=proc.pid, pgid=proc.pid, node_rank=s.node_rank)
                for s, c, proc in zip(p.specs, p.commands, self._procs, strict=True)
            ),
            hostname=socket.gethostname(),
            dswiz_version=__version__,
            plan=p.plan,
        )

    def _finish(self) -> RunOutcome:
        self._watch.stop()
        self._rank_logs.close()
        self._csv_progress(self._clock())
        self._csv.close()
        codes = [p.returncode for p in self._procs]
        reason = self._stop.reason
        stopped_by = reason.interrupted_by if reason is not None else None
        verdict = decide(
            self.observer,
            launcher_returncodes=codes,
            interrupted_by=stopped_by,
            deaths=self._deaths(),
            ds_config=self.prepared.ds_config,
            oom_advisor=self.oom_advisor,
            elapsed=self._clock() - self._t0,
            leftover_killed=self._leftover_killed,
        )
        hint = self._checkpoint_hint()
        if hint:
            verdict = replace(verdict, advice=(*verdict.advice, *hint))
        sig = reason.exit_signal if reason is not None else None
        code = exit_code(verdict, codes, int(sig) if sig is not None else None)
        assert self._record is not None
        record = replace(
            self._record,
            status=rundir.STATUS_INTERRUPTED if stopped_by else rundir.STATUS_FINISHED,
            ended_at=time.time(),
            exit_code=code,
            launcher_exit_codes=tuple(codes),
            interrupted_by=stopped_by,
            verdict=verdict,
            world_size=self.observer.world_size or self._record.world_size,
        )
        rundir.write_run_record(self.prepared.run_dir, record)
        if self._log is not None:
            self._log.close()
        self.state = JobState.ENDED
        outcome = RunOutcome(exit_code=code, verdict=verdict, run_dir=self.prepared.run_dir, record=record)
        self.sink.on_end(outcome)
        return outcome

    def _checkpoint_hint(self) -> list[str]:
        """Where the job saved checkpoints and how to consolidate them (empty when it saved none)."""
        cwd = self.prepared.cwd
        sources = output_dirs_from_args(self.prepared.specs[0].script_args, cwd)
        try:
            text = checkpoint_hint(sources, log_text="\n".join(self._checkpoint_lines), cwd=cwd)
        except OSError:
            return []
        return text.splitlines()
