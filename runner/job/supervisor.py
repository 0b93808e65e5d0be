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
import os
import queue
import secrets
import signal
import socket
import subprocess
import threading
import time
import traceback
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, replace
from typing import IO

from runner import reaper, rundir
from runner.job.prepare import PreparedRun
from runner.job.session import session_processes, signal_job, start_in_new_session
from runner.job.sink import JobSink, RunOutcome
from runner.job.stopping import StopEscalation, StopReason
from runner.job.watchers import DeathWatch, LauncherLine, LineQueue, rank_of_process, start_pipe_reader
from runner.metrics.alerts import AlertThresholds
from runner.metrics.csvsource import CsvSource
from runner.metrics.tail import RankLogTail
from runner.phases import Phase
from runner.reaper import ReaperLink, start_reaper
from runner.rundir import LauncherProcess, RunRecord, RunVerdict
from runner.verdict import (
    JobObserver,
    OomAdvisor,
    RankDeath,
    Stall,
    Status,
    decide,
    exit_code,
    supervisor_error_verdict,
)
from wizard import __version__
from wizard.checkpoints import checkpoint_hint, output_dirs_from_args
from wizard.errors import DswizError

_TICK_S = 0.1
_WATCH_EVERY_S = 0.25
_RANK_RESOLVE_S = 5.0  # how long to retry reading a new rank's RANK variable before trusting its local rank
_ORPHAN_GRACE_S = 3.0  # processes left after the launcher ended by itself: this long to exit, then stopped
_UNSEEN_PIPE_S = 2.0  # launchers gone, nobody left, a pipe still open: stop waiting for it after this long
_DRAIN_BATCH = 2000  # launcher lines handled per tick at most, so stops and status lines are not held up
# No new step for this long is said on the stream (and again each time as long again): the dashboard's stall alert
# starts at the same time (runner/metrics/alerts.py).
STALL_NOTICE_S = AlertThresholds().stall_min_seconds


class JobState(enum.Enum):
    CREATED = enum.auto()
    RUNNING = enum.auto()
    ENDED = enum.auto()


@dataclass(frozen=True)
class _PendingRank:
    """A spawned rank whose global rank is not known yet."""

    local_rank: int | None
    since: float


class _GuardedSink:
    """The job's sink, with every call guarded: a display that fails (a dashboard's bug, a closed terminal) is
    said once on stderr and otherwise ignored; the job goes on and the run directory still gets everything."""

    def __init__(self, sink: JobSink) -> None:
        self.inner = sink
        self.failures = 0

    def _call(self, name: str, *args: object) -> None:
        try:
            getattr(self.inner, name)(*args)
        except Exception as e:
            self.failures += 1
            if self.failures == 1:
                _stderr(f"[dswiz] the display failed ({type(e).__name__}: {e}); the job goes on")

    def on_line(self, text: str, rank: int | None) -> None:
        self._call("on_line", text, rank)

    def on_status(self, status: Status) -> None:
        self._call("on_status", status)

    def on_phase(self, phase: Phase) -> None:
        self._call("on_phase", phase)

    def on_notice(self, text: str) -> None:
        self._call("on_notice", text)

    def on_end(self, outcome: RunOutcome) -> None:
        before = self.failures
        self._call("on_end", outcome)
        if self.failures > before:  # the verdict must reach the user somehow
            _stderr(f"[dswiz] verdict: {outcome.verdict.summary}\n[dswiz] run directory: {outcome.run_dir}")


def _stderr(text: str) -> None:
    with suppress(OSError):
        os.write(2, (text + "\n").encode("utf-8", "replace"))


class Job:
    """One launch, supervised. ``run()`` blocks until no process of the job is left and returns the outcome; it
    never returns or raises with a process of the job left, and always writes a verdict (when the run directory
    still exists). If dswiz itself dies, its reaper (runner/reaper.py) stops the job and writes the verdict.

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
        stall_timeout_s: float | None = None,
        stall_notice_s: float = STALL_NOTICE_S,
        optimizer_op: str | None = None,
        oom_advisor: OomAdvisor | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.prepared = prepared
        self.sink = _GuardedSink(sink)
        self.status_every_s = status_every_s
        self.stall_timeout_s = stall_timeout_s
        self.stall_notice_s = stall_notice_s
        self.oom_advisor = oom_advisor
        self.state = JobState.CREATED
        self._clock = clock
        self._t0 = clock()
        self.observer = JobObserver(started=self._t0, optimizer_op=optimizer_op)
        self._stop = StopEscalation(grace_s=grace_s, term_grace_s=term_grace_s)
        self._lines: LineQueue = queue.Queue()
        self._procs: list[subprocess.Popen[bytes]] = []
        self._sids: set[int] = set()
        self.token = secrets.token_hex(12)  # in every job process's environment (DSWIZ_JOB_TOKEN)
        self._reaper: ReaperLink | None = None
        self._threads: list[threading.Thread] = []
        self._rank_logs = RankLogTail(prepared.run_dir / rundir.RANK_LOGS_DIR)
        self._csv = CsvSource(prepared.run_dir / rundir.CSV_DIR / rundir.CSV_JOB_NAME)
        self._log: IO[str] | None = None
        self._rank_of_pid: dict[int, int] = {}
        self._pending: dict[int, _PendingRank] = {}
        self._watch = DeathWatch(clock)
        self._last_watch = 0.0
        self._signalled_at: float | None = None  # when dswiz first signalled the job itself
        self._last_status = self._t0
        self._record: RunRecord | None = None
        self._leftover_killed = 0
        self._checkpoint_lines: collections.deque[str] = collections.deque(maxlen=200)
        self._last_step: int | None = None
        self._last_step_at = self._t0
        self._stall_said_at = 0.0  # the idle time last said on the stream
        self._stall: Stall | None = None
        self._unread_lines = 0  # lines dswiz failed to read (the job went on; they are in the logs)
        self._run_dir_gone = False
        self._unsaved = False  # the last write of run.json failed: the next watch writes it again

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
        return self._status(self._clock())

    def _status(self, now: float) -> Status:
        status = self.observer.status(now)
        idle = now - self._last_step_at
        if self._last_step is not None and idle >= self.stall_notice_s:
            status = replace(status, stalled_for=idle)
        return status

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the reaper, then the launchers. Raises DswizError when a launcher cannot start (nothing is left
        running then)."""
        prepared = self.prepared
        # Held open for the whole run (closed in _finish): one append per line, flushed for `dswiz monitor`.
        self._log = open(  # noqa: SIM115
            prepared.run_dir / rundir.COMBINED_LOG, "a", encoding="utf-8", errors="replace"
        )
        try:
            self._reaper = start_reaper(str(prepared.run_dir), self.token, self.term_grace_s)
        except OSError as e:
            self.sink.on_notice(
                f"cannot start the reaper ({e}): if dswiz itself is killed, the job will outlive it"
            )
        try:
            self._start_launchers()
            self._record = self._initial_record()
        except BaseException:
            self._kill_now()
            raise
        self._write_record(self._record)
        self._watch.start()
        self.state = JobState.RUNNING
        self.sink.on_phase(self.observer.phases.current)

    def _start_launchers(self) -> None:
        prepared = self.prepared
        several = len(prepared.specs) > 1
        for k, cmd in enumerate(prepared.commands):
            try:
                proc = start_in_new_session(cmd.argv, cwd=prepared.cwd, env_changes=cmd.env, token=self.token)
            except OSError as e:
                raise DswizError(
                    f"cannot start {cmd.argv[0]}: {e.strerror}", "check --python (the training environment)"
                ) from e
            self._procs.append(proc)
            self._sids.add(proc.pid)
            if self._reaper is not None:
                self._reaper.add_session(proc.pid)
                for port in self._master_ports():
                    self._reaper.add_port(port)
            assert proc.stdout is not None
            self._threads.append(
                start_pipe_reader(proc.stdout, f"launcher{k}" if several else "launcher", self._lines)
            )

    def _master_ports(self) -> set[int]:
        return {s.master_port for s in self.prepared.specs if s.master_port is not None}

    def _kill_now(self) -> None:
        """Start failed half-way: SIGKILL whatever started, and let the reaper go."""
        signal_job(self._sids, signal.SIGKILL, self.token)
        if self._reaper is not None:
            self._reaper.done()

    def run(self) -> RunOutcome:
        """Supervise until no process of the job is left. An error inside dswiz stops the job (and says so in the
        verdict) instead of leaving it running."""
        if self.state is JobState.CREATED:
            self.start()
        try:
            return self._supervise()
        except BaseException as e:  # whatever it is, the job must not be abandoned
            return self._stop_after_internal_error(e)

    def _supervise(self) -> RunOutcome:
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
        self._handle_rank_lines(self._poll_rank_logs(final=True), self._clock())
        return self._finish()

    # -- the loop --------------------------------------------------------------------------------------

    def _tick(self, now: float) -> None:
        """One turn of the loop: the stop's next signal, the rank logs and new ranks, stalls, the status line."""
        self._stop_tick(now)
        if now - self._last_watch >= _WATCH_EVERY_S:
            self._last_watch = now
            if self._pending:
                self._resolve_ranks()
            self._handle_rank_lines(self._poll_rank_logs(), now)
            self._csv_progress(now)
            self._check_run_dir()
            if self._unsaved and self._record is not None and not self._run_dir_gone:
                self._write_record(self._record)
        self._check_stall(now)
        if now - self._last_status >= self.status_every_s:
            self._last_status = now
            self.sink.on_status(self._status(now))

    def _check_stall(self, now: float) -> None:
        """No new step for a while: said on the stream after ``stall_notice_s`` (and each time as long again); with
        --stall-timeout the job is stopped. Counted from the last step seen only: a job that never printed a step
        is never called stalled."""
        if self._last_step is None or self._stop.reason is not None:
            return
        idle = now - self._last_step_at
        if self.stall_timeout_s is not None and idle >= self.stall_timeout_s:
            self._stall = Stall(idle, self._last_step, self.stall_timeout_s)
            self.sink.on_notice(
                f"{self._stall.words()}: stopping the job (--stall-timeout {self.stall_timeout_s:g})"
            )
            self._stop.request(StopReason.STALL)
        elif idle - self._stall_said_at >= self.stall_notice_s:
            self._stall_said_at = idle
            self.sink.on_notice(Stall(idle, self._last_step, 0).words())

    def _check_run_dir(self) -> None:
        if not self._run_dir_gone and not self.prepared.run_dir.is_dir():
            self._run_dir_gone = True
            self.sink.on_notice(
                f"the run directory {self.prepared.run_dir} was removed: dswiz keeps supervising the job, but "
                "run.json and the logs are no longer kept"
            )

    def _poll_rank_logs(self, final: bool = False) -> list[tuple[int | None, str]]:
        try:
            return self._rank_logs.poll(final=final)
        except Exception as e:  # a log that cannot be read is not a reason to stop watching the job
            self._line_failed(e)
            return []

    def _csv_progress(self, now: float) -> None:
        """A job that prints no step (accelerate, the Trainer) still writes csv monitor rows: its steps and speed."""
        try:
            phase = self.observer.add_csv(self._csv.poll(), now)
        except Exception as e:  # a csv file that cannot be read is not a reason to stop watching the job
            self._line_failed(e)
            return
        if phase is not None:
            self.sink.on_phase(phase)

    def _job_is_gone(self, since_launchers_ended: float, open_streams: int) -> bool:
        """Every launcher has exited: is the whole job gone? Processes left behind are stopped the same way as a
        stop request would (after a short grace: they may be exiting)."""
        remaining = session_processes(self._sids, self.token)
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
        if step is None or (step.only_if_alive and not session_processes(self._sids, self.token)):
            return
        if step.notice is not None:
            self.sink.on_notice(step.notice)
        if self._signalled_at is None:
            self._signalled_at = now
        signal_job(self._sids, step.sig, self.token)

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
        """One line of the job's output: kept in the log first, then shown and read. A line dswiz fails to read
        is skipped (and said once): the job goes on."""
        if self._log is not None and stream.startswith("launcher"):  # rank lines are in logs/ranks/ already
            try:
                self._log.write(text + "\n")
                self._log.flush()
            except (OSError, ValueError) as e:
                self._line_failed(e)
        self.sink.on_line(text, rank)
        try:
            self._read_line(text, rank, stream, now)
        except Exception as e:
            self._line_failed(e)

    def _read_line(self, text: str, rank: int | None, stream: str, now: float) -> None:
        if "heckpoint" in text:  # where the job says it saved one (the verdict points at it)
            self._checkpoint_lines.append(text)
        before = self.observer.phases.current
        event = self.observer.feed(text, now, rank=rank, stream=stream)
        if self.observer.phases.current is not before:
            self.sink.on_phase(self.observer.phases.current)
        if self.observer.step != self._last_step and self.observer.step is not None:
            self._last_step, self._last_step_at, self._stall_said_at = self.observer.step, now, 0.0
        if event is not None and event.kind == "spawn" and event.values.get("pid"):
            self._register_rank(int(event.values["pid"]), event.values.get("local_rank"))

    def _line_failed(self, error: BaseException) -> None:
        self._unread_lines += 1
        if self._unread_lines == 1:
            self.sink.on_notice(
                f"dswiz could not read a line of the job's output ({type(error).__name__}: "
                f"{str(error)[:200]}); it keeps supervising (the line is in the log)"
            )

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
                self._write_record(self._record)

    def _deaths(self) -> list[RankDeath]:
        """The ranks seen dead, first first (their rank as resolved, else the launcher's local rank); not those
        seen dead after dswiz signalled the job itself (ranks that outlived their launcher, a stop): how those
        ended was dswiz's doing and says nothing of why the job ended."""
        deaths = []
        for pid, death in self._watch.died.items():
            if self._signalled_at is not None and death.at >= self._signalled_at:
                continue
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
                    returncode=death.returncode,
                )
            )
        return sorted(deaths, key=lambda d: d.at)

    # -- the record and the end ------------------------------------------------------------------------

    def _write_record(self, record: RunRecord) -> bool:
        """run.json, unless the run directory is gone (then said once; the job goes on). A write that fails is said
        once and made again on each watch until one succeeds: the ranks' pids are not lost to one failed write."""
        try:
            rundir.write_run_record(self.prepared.run_dir, record)
        except OSError as e:
            if not self.prepared.run_dir.is_dir():
                self._check_run_dir()
            elif not self._unsaved:  # said once until a write succeeds again
                self.sink.on_notice(
                    f"cannot write run.json ({e.strerror or e}); the job goes on and dswiz tries again"
                )
            self._unsaved = True
            return False
        if self._unsaved:
            self._unsaved = False
            self.sink.on_notice("run.json is written again")
        return True

    def _initial_record(self) -> RunRecord:
        p = self.prepared
        spec = p.specs[0]
        me = os.getpid()
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
            supervisor_pid=me,
            supervisor_start=rundir.process_start_ticks(me),
            boot_id=rundir.boot_id(),
            job_token=self.token,
            reaper_pid=self._reaper.pid if self._reaper is not None else None,
            hosts=p.hosts,
            scheduler_job=p.scheduler_job,
        )

    def _finish(self) -> RunOutcome:
        self._watch.stop()
        self._rank_logs.close()
        self._csv_progress(self._clock())
        self._csv.close()
        codes = [p.returncode for p in self._procs]
        reason = self._stop.reason
        stopped_by = reason.interrupted_by if reason is not None else None
        deaths = self._deaths()
        verdict = decide(
            self.observer,
            launcher_returncodes=codes,
            interrupted_by=stopped_by,
            deaths=deaths,
            ds_config=self.prepared.ds_config,
            oom_advisor=self.oom_advisor,
            elapsed=self._clock() - self._t0,
            leftover_killed=self._leftover_killed,
            stall=self._stall,
        )
        verdict = replace(verdict, advice=(*verdict.advice, *self._end_notes()))
        sig = reason.exit_signal if reason is not None else None
        code = exit_code(
            verdict, codes, int(sig) if sig is not None else None, self.observer.exit_codes, deaths
        )
        return self._end(
            verdict,
            code,
            status=rundir.STATUS_INTERRUPTED if stopped_by else rundir.STATUS_FINISHED,
            interrupted_by=stopped_by,
        )

    def _end_notes(self) -> list[str]:
        """What the verdict adds whatever it is: checkpoints, unread lines, a removed run directory."""
        notes = self._checkpoint_hint()
        if self._unread_lines:
            notes.append(
                f"dswiz could not read {self._unread_lines} line(s) of the output (they are in the logs)"
            )
        if self._run_dir_gone or not self.prepared.run_dir.is_dir():
            self._run_dir_gone = True
            notes.append("the run directory was removed during the run: nothing of it is kept")
        return notes

    def _end(
        self, verdict: RunVerdict, code: int, *, status: str, interrupted_by: str | None = None
    ) -> RunOutcome:
        """Write the end into run.json, let the reaper go, show the verdict."""
        codes = [p.returncode for p in self._procs]
        base = self._record or self._fallback_record()
        record = replace(
            base,
            status=status,
            ended_at=time.time(),
            exit_code=code,
            launcher_exit_codes=tuple(codes),
            interrupted_by=interrupted_by,
            verdict=verdict,
            world_size=self.observer.world_size or base.world_size,
        )
        written = self._write_record(record) or self._run_dir_gone
        # The ranks are gone: the shared-memory files DeepSpeed's CPU all-reduce leaves go with them.
        reaper.remove_shm_buffers(self._master_ports())
        if self._log is not None:
            self._log.close()
        if self._reaper is not None:
            # the verdict is written (or there is nowhere to write it): the reaper may go. Else it writes its own.
            self._reaper.done() if written else self._reaper.close()
        self.state = JobState.ENDED
        outcome = RunOutcome(exit_code=code, verdict=verdict, run_dir=self.prepared.run_dir, record=record)
        self.sink.on_end(outcome)
        return outcome

    def _fallback_record(self) -> RunRecord:
        p = self.prepared
        return RunRecord(p.run_id, str(p.run_dir), rundir.STATUS_RUNNING, time.time(), p.commands[0].argv, "")

    def _stop_after_internal_error(self, error: BaseException) -> RunOutcome:
        """dswiz failed inside: stop the whole job now (SIGTERM, SIGKILL after the grace: the reaper's own code,
        which shares nothing with what failed), then write a verdict that says so."""
        words = f"{type(error).__name__}: {str(error)[:300]}"
        _stderr(f"[dswiz] dswiz failed while supervising ({words}): stopping the job")
        reaper.stop_job(self._sids, self.token, self.term_grace_s)
        left = len(reaper.job_processes(self._sids, self.token))
        verdict = supervisor_error_verdict(
            words, step=self.observer.step, elapsed=self._clock() - self._t0, left=left
        )
        lines = traceback.format_exception(error)
        verdict = replace(verdict, evidence=tuple("".join(lines).rstrip().splitlines()[-8:]))
        try:
            with suppress(Exception):
                self._watch.stop()
            return self._end(verdict, 1, status=rundir.STATUS_FINISHED)
        except Exception:  # nothing more can be done here: the reaper writes its verdict when dswiz exits
            if self._reaper is not None:
                self._reaper.close()
            return RunOutcome(1, verdict, self.prepared.run_dir, self._record or self._fallback_record())

    def _checkpoint_hint(self) -> list[str]:
        """Where the job saved checkpoints and how to consolidate them (empty when it saved none)."""
        cwd = self.prepared.cwd
        sources = output_dirs_from_args(self.prepared.specs[0].script_args, cwd)
        try:
            text = checkpoint_hint(sources, log_text="\n".join(self._checkpoint_lines), cwd=cwd)
        except OSError:
            return []
        return text.splitlines()
