"""Running a launch: the run directory, the job in its own session, the combined log, clean stops, the verdict.

``prepare_run`` writes the run directory (configs copied and made observable, run.json); ``Job`` starts the
launcher(s) built by ``runner.launch``, each in a new session, and ``Job.run()`` supervises until no process of the
job is left. Stopping (``Job.request_stop``; SIGINT, SIGTERM and SIGHUP to dswiz all land there) sends SIGINT to
every process group of the job, SIGTERM after ``grace_s``, SIGKILL after ``term_grace_s`` more. Processes are found
by session id with psutil, not as children: the DeepSpeed runner's ranks belong to launch.py, and when the runner
dies first they are re-parented to PID 1 (FACTS §4).

Where the output goes: the launcher's stdout+stderr (a pipe, read by one thread per launcher) is appended verbatim
to ``logs/combined.log``; the per-rank logs (``--enable_each_rank_log``) are tailed where DeepSpeed writes them.
Both are handed to a ``JobSink`` (the terminal printer, or a dashboard) and parsed into a ``JobObserver`` for the
live status and the verdict.
"""

from __future__ import annotations

import collections
import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any, Protocol

import psutil

from runner import rundir
from runner.logfold import ConfigDumpFolder, Folded, FoldedInterrupt, InterruptTracebackFolder, Output, Shown
from runner.phases import Phase
from runner.rundir import LauncherProcess, RunRecord, RunVerdict
from runner.verdict import JobObserver, OomAdvisor, RankDeath, Status, decide, exit_code
from wizard import __version__
from wizard import launch_command as launch
from wizard.launch_command import LaunchCommand, LaunchSpec

_RANK_FILE_RE = re.compile(r"_rank(?P<rank>\d+)\.log$")
_TICK_S = 0.1
_WATCH_EVERY_S = 0.25
_RANK_RESOLVE_S = 5.0  # how long to retry reading a new rank's RANK variable before trusting its local rank
_ORPHAN_GRACE_S = 3.0  # processes left after the launcher ended by itself: this long to exit, then SIGTERM
_SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGHUP": signal.SIGHUP}


# ------------------------------------------------------------------------------------------- run directory


@dataclass(frozen=True)
class PreparedRun:
    """A run directory ready to launch: the copies written, the commands built."""

    run_id: str
    run_dir: Path
    specs: tuple[LaunchSpec, ...]  # one per launcher started on this machine (several: simulated nodes)
    commands: tuple[LaunchCommand, ...]
    configs: dict[str, str]  # original -> copy
    config_changes: tuple[str, ...]
    ds_config: dict[str, Any] | None  # the config as launched (the observable copy)
    cwd: str
    plan: dict[str, Any] | None = None  # run.json's "plan" section (predictions for the monitor)


def prepare_run(
    specs: Sequence[LaunchSpec],
    *,
    ds_config: Mapping[str, Any] | None,
    accelerate_yaml: str | None = None,
    deepspeed_env_texts: Sequence[str] = (),
    steps_per_print: int = launch.DEFAULT_STEPS_PER_PRINT,
    cwd: str | None = None,
    plan: Mapping[str, Any] | None = None,
) -> PreparedRun:
    """Create the run directory (0700) and the launched copies of the configs; the originals are not touched.

    All specs share one run directory (``specs[0].run_dir``). Raises DswizError when it cannot be created.
    """
    first = specs[0]
    run_dir = rundir.make_run_dir(first.run_dir)
    configs: dict[str, str] = {}
    changes: list[str] = []
    launched: dict[str, Any] | None = None
    if first.ds_config is not None and ds_config is not None:
        launched, ds_changes = launch.observable_ds_config(
            dict(ds_config), csv_output_path=launch.csv_dir(first), steps_per_print=steps_per_print
        )
        copy = launch.config_copy_path(first, first.ds_config)
        _write_private(copy, json.dumps(launched, indent=2, sort_keys=True) + "\n")
        configs[first.ds_config] = copy
        changes += [f"{Path(copy).name}: {c}" for c in ds_changes]
    if first.accelerate_config is not None and accelerate_yaml is not None:
        text, yaml_changes = launch.launched_accelerate_yaml(
            accelerate_yaml, ds_config_copy=launch.launched_ds_config(first)
        )
        copy = launch.config_copy_path(first, first.accelerate_config)
        _write_private(copy, text)
        configs[first.accelerate_config] = copy
        changes += [f"{Path(copy).name}: {c}" for c in yaml_changes]
    commands = tuple(launch.build_command(s) for s in specs)
    env_file = commands[0].env.get("DS_ENV_FILE")
    if env_file:
        extra = {k: v for k, v in first.env if v is not None}
        _write_private(env_file, launch.deepspeed_env_text(list(deepspeed_env_texts), extra))
        changes.append(f"deepspeed_env: {', '.join(sorted(extra))} exported to every node")
    return PreparedRun(
        run_id=run_dir.name,
        run_dir=run_dir,
        specs=tuple(specs),
        commands=commands,
        configs=configs,
        config_changes=tuple(changes),
        ds_config=launched,
        cwd=cwd or os.getcwd(),
        plan=dict(plan) if plan else None,
    )


def _write_private(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)


# ------------------------------------------------------------------------------------------------ output


class JobSink(Protocol):
    """Where a running job is shown: the terminal printer below, or a dashboard."""

    def on_line(self, text: str, rank: int | None) -> None: ...
    def on_status(self, status: Status) -> None: ...
    def on_phase(self, phase: Phase) -> None: ...
    def on_notice(self, text: str) -> None: ...
    def on_end(self, outcome: RunOutcome) -> None: ...


class TerminalSink:
    """The log streamed as it comes, a one-line status every interval, dswiz's own lines marked ``[dswiz]``.
    DeepSpeed's ~100-line config dump is folded into one line naming the log file that keeps it.

    Writes that fail (the terminal went away: SIGHUP) are dropped; the run directory still gets everything.
    """

    def __init__(
        self, stream: IO[str] | None = None, *, show_log: bool = True, run_dir: Path | None = None
    ) -> None:
        self._stream = stream if stream is not None else sys.stdout
        self._show_log = show_log
        self._dead = False
        self._muted = False
        self._held: RunOutcome | None = None
        self._fold = ConfigDumpFolder()
        self._interrupts = InterruptTracebackFolder()
        self._run_dir = run_dir

    def mute(self) -> None:
        """While a dashboard owns the terminal: print nothing (the run directory still gets everything)."""
        self._muted = True

    def unmute(self) -> None:
        """Back to printing; a verdict that came while muted is printed now."""
        self._muted = False
        if self._held is not None:
            held, self._held = self._held, None
            self.on_end(held)

    def _write(self, text: str) -> None:
        if self._dead or self._muted:
            return
        try:
            self._stream.write(text + "\n")
            self._stream.flush()
        except (OSError, ValueError):
            self._dead = True

    def on_line(self, text: str, rank: int | None) -> None:
        if self._show_log:
            self._show(self._fold.feed(text.split("\r")[-1], rank), rank)

    def _show(self, outputs: list[Output], rank: int | None) -> None:
        for out in outputs:
            if isinstance(out, Shown):
                self._show_unfolded(self._interrupts.feed(out.text, rank))
            else:
                self._write(
                    f"[dswiz] DeepSpeed printed its config ({out.lines} lines): {self._where(out.rank)}"
                )

    def _show_unfolded(self, outputs: list[Shown | FoldedInterrupt]) -> None:
        for out in outputs:
            if isinstance(out, Shown):
                self._write(out.text)
            else:
                self._write(
                    f"[dswiz] a process printed its KeyboardInterrupt traceback ({out.lines} lines; the stop "
                    f"reached it): {self._where(out.rank)}"
                )

    def _where(self, rank: int | None) -> str:
        """The log file that keeps a rank's lines (the launcher's: logs/combined.log)."""
        if self._run_dir is None:
            return "the run directory's logs"
        if rank is None:
            return str(self._run_dir / rundir.COMBINED_LOG)
        ranks = sorted((self._run_dir / rundir.RANK_LOGS_DIR).glob(f"*_rank{rank}.log"))
        return str(ranks[-1] if ranks else self._run_dir / rundir.RANK_LOGS_DIR)

    def on_status(self, status: Status) -> None:
        self._write(f"[dswiz] {status.line()}")

    def on_phase(self, phase: Phase) -> None:
        self._write(f"[dswiz] {phase.name}…")

    def on_notice(self, text: str) -> None:
        self._write(f"[dswiz] {text}")

    def on_end(self, outcome: RunOutcome) -> None:
        if self._show_log:
            for folded in self._fold.flush():  # flush() only returns Folded notices
                self._show([folded], folded.rank if isinstance(folded, Folded) else None)
            self._show_unfolded(self._interrupts.flush())
        if self._muted:
            self._held = outcome
            return
        for line in format_verdict(outcome):
            self._write(f"[dswiz] {line}")


def format_verdict(outcome: RunOutcome) -> list[str]:
    v = outcome.verdict
    lines = [f"verdict: {v.summary}"]
    lines += [f"  {a}" for a in v.advice]
    lines += [f"  | {e}" for e in v.evidence]
    lines.append(f"run directory: {outcome.run_dir}")
    return lines


# --------------------------------------------------------------------------------------------- processes


def session_processes(sids: set[int]) -> list[psutil.Process]:
    """Live (non-zombie) processes whose session is one of ``sids``: the whole job, however re-parented."""
    found = []
    for proc in psutil.process_iter(["status"]):
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            if os.getsid(proc.pid) in sids:
                found.append(proc)
        except OSError:
            continue
    return found


def _signal_job(sids: set[int], sig: int) -> None:
    for sid in sids:  # each launcher leads its session and its process group (pgid == sid)
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(sid, sig)
    for proc in session_processes(sids):  # anyone who moved to another group of the same session
        try:
            if os.getpgid(proc.pid) not in sids:
                proc.send_signal(sig)
        except (OSError, psutil.Error):
            pass


def _rank_of_process(pid: int) -> int | None:
    """The global rank of a rank process: the per-rank log its stdout is (``…_rank<N>.log``), else its RANK
    variable. None when neither can be read (yet)."""
    for fd in (1, 2):
        try:
            m = _RANK_FILE_RE.search(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            m = None
        if m:
            return int(m.group("rank"))
    try:
        env_rank = psutil.Process(pid).environ().get("RANK")
        return int(env_rank) if env_rank is not None else None
    except (psutil.Error, ValueError, OSError):
        return None


class _RankLogTailer:
    """Reads what DeepSpeed's --enable_each_rank_log files gained since the last poll, whole lines only."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._offsets: dict[Path, int] = {}
        self._partial: dict[Path, bytes] = {}

    def poll(self, *, final: bool = False) -> list[tuple[int | None, str]]:
        out: list[tuple[int | None, str]] = []
        try:
            files = sorted(self.directory.glob("*.log"))
        except OSError:
            return out
        for path in files:
            m = _RANK_FILE_RE.search(path.name)
            rank = int(m.group("rank")) if m else None
            try:
                with path.open("rb") as fh:
                    fh.seek(self._offsets.get(path, 0))
                    data = fh.read()
            except OSError:
                continue
            self._offsets[path] = self._offsets.get(path, 0) + len(data)
            data = self._partial.pop(path, b"") + data
            *lines, rest = data.split(b"\n")
            if rest and final:
                lines.append(rest)
            elif rest:
                self._partial[path] = rest
            out += [(rank, ln.decode("utf-8", "replace")) for ln in lines]
        return out


def _read_pipe(pipe: IO[bytes], stream: str, q: queue.Queue[tuple[str, int | None, str] | None]) -> None:
    try:
        for raw in iter(pipe.readline, b""):
            q.put((stream, None, raw.decode("utf-8", "replace").rstrip("\n")))
    except (OSError, ValueError):
        pass
    finally:
        q.put(None)  # this stream is done


class _DeathWatch:
    """Notes when each rank process dies, 20 times a second, in its own thread (the main loop can be busy with
    lines). When the launcher notices a dead rank (it polls once a second) it terminates the others, so the
    first death seen is the cause; a slower watch would see them all at once. Also keeps the lowest host available
    memory of the last few seconds, to tell the OOM killer from another SIGKILL."""

    TICK_S = 0.05
    MEM_EVERY = 5  # ticks

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._pids: list[int] = []
        self.died: dict[int, tuple[float, int | None, int | None]] = {}  # pid -> (when, min available, total)
        self._mem: collections.deque[int] = collections.deque(maxlen=20)  # ~5 s
        self._total: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dswiz-rank-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def add(self, pid: int) -> None:
        with self._lock:
            self._pids.append(pid)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2.0)
        self._check()  # deaths in the last tick

    def _run(self) -> None:
        tick = 0
        while not self._stop.wait(self.TICK_S):
            if tick % self.MEM_EVERY == 0:
                with suppress(OSError, psutil.Error):
                    vm = psutil.virtual_memory()
                    self._mem.append(int(vm.available))
                    self._total = int(vm.total)
            tick += 1
            self._check()

    def _check(self) -> None:
        with self._lock:
            pids = [p for p in self._pids if p not in self.died]
        for pid in pids:
            try:
                alive = psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
            except psutil.Error:
                alive = False
            if not alive:
                with self._lock:
                    self.died[pid] = (self._clock(), min(self._mem) if self._mem else None, self._total)


# ---------------------------------------------------------------------------------------------------- job


@dataclass(frozen=True)
class RunOutcome:
    exit_code: int
    verdict: RunVerdict
    run_dir: Path
    record: RunRecord


class Job:
    """One launch, supervised. ``run()`` blocks until no process of the job is left and returns the outcome.

    Thread-safe entry points: ``request_stop(name)`` (signal handlers, a dashboard's stop key) and ``status()``.
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
        self.grace_s = grace_s
        self.term_grace_s = term_grace_s
        self.status_every_s = status_every_s
        self.oom_advisor = oom_advisor
        self._clock = clock
        self._t0 = clock()
        self.observer = JobObserver(started=self._t0, optimizer_op=optimizer_op)
        self._queue: queue.Queue[tuple[str, int | None, str] | None] = queue.Queue()
        self._procs: list[subprocess.Popen[bytes]] = []
        self._sids: set[int] = set()
        self._threads: list[threading.Thread] = []
        self._tailer = _RankLogTailer(prepared.run_dir / rundir.RANK_LOGS_DIR)
        self._log: IO[str] | None = None
        self._lock = threading.Lock()
        self._stop_name: str | None = None
        self._stop_stage = 0  # 0 none, 1 SIGINT sent, 2 SIGTERM sent, 3 SIGKILL sent
        self._stop_at = 0.0
        self._escalate_now = False
        self._rank_of_pid: dict[int, int] = {}
        self._pending: dict[
            int, tuple[int | None, float]
        ] = {}  # spawned pids whose global rank is not known yet
        self._watch = _DeathWatch(clock)
        self._last_watch = 0.0
        self._last_status = self._t0
        self._record: RunRecord | None = None
        self._leftover_killed = 0
        self._checkpoint_lines: collections.deque[str] = collections.deque(maxlen=200)

    # -- control ---------------------------------------------------------------------------------------

    def request_stop(self, name: str = "SIGINT") -> None:
        """Stop the job (SIGINT to its groups, then SIGTERM, then SIGKILL). A second request escalates at once."""
        with self._lock:
            if self._stop_name is None:
                self._stop_name = name
            else:
                self._escalate_now = True

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
        for k, (_spec, cmd) in enumerate(zip(prepared.specs, prepared.commands, strict=True)):
            env = dict(os.environ)
            for key, value in cmd.env.items():
                if value is None:
                    env.pop(key, None)
                else:
                    env[key] = value
            try:
                proc = subprocess.Popen(
                    list(cmd.argv),
                    cwd=prepared.cwd,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its own session and process group: signals reach the whole job
                )
            except OSError as e:
                self._stop_all_started()
                from wizard.errors import DswizError

                raise DswizError(
                    f"cannot start {cmd.argv[0]}: {e.strerror}", "check --python (the training environment)"
                ) from e
            self._procs.append(proc)
            self._sids.add(proc.pid)
            stream = f"launcher{k}" if len(prepared.specs) > 1 else "launcher"
            assert proc.stdout is not None
            t = threading.Thread(target=_read_pipe, args=(proc.stdout, stream, self._queue), daemon=True)
            t.start()
            self._threads.append(t)
        self._record = self._initial_record()
        rundir.write_run_record(prepared.run_dir, self._record)
        self._watch.start()
        self.sink.on_phase(self.observer.phases.current)

    def _stop_all_started(self) -> None:
        _signal_job(self._sids, signal.SIGKILL)

    def run(self) -> RunOutcome:
        if not self._procs:
            self.start()
        open_streams = len(self._threads)
        launchers_done_at: float | None = None
        while True:
            open_streams -= self._drain(timeout=_TICK_S)
            now = self._clock()
            self._stop_tick(now)
            if now - self._last_watch >= _WATCH_EVERY_S:
                self._last_watch = now
                if self._pending:
                    self._resolve_ranks()
                self._handle_lines(self._tailer.poll(), now)
            if now - self._last_status >= self.status_every_s:
                self._last_status = now
                self.sink.on_status(self.observer.status(now))
            if all(p.poll() is not None for p in self._procs):
                if launchers_done_at is None:
                    launchers_done_at = now
                remaining = session_processes(self._sids)
                if not remaining and open_streams <= 0:
                    break
                if not remaining and now - launchers_done_at > 2.0:
                    break  # a pipe held open by nobody we can see: do not wait for it
                if remaining and self._stop_name is None and now - launchers_done_at > _ORPHAN_GRACE_S:
                    # The launcher ended but part of the job did not: orphans. Stop them the same way.
                    self._leftover_killed = len(remaining)
                    self.sink.on_notice(
                        f"{len(remaining)} process(es) of the job outlived the launcher: stopping them"
                    )
                    with self._lock:
                        self._stop_name = "cleanup"
        for t in self._threads:
            t.join(timeout=2.0)
        self._drain(timeout=0.0, all_of_it=True)
        self._handle_lines(self._tailer.poll(final=True), self._clock())
        return self._finish()

    # -- internals -------------------------------------------------------------------------------------

    def _drain(self, timeout: float, all_of_it: bool = False) -> int:
        """Move queued launcher lines to the log/sink/observer. Returns how many streams ended."""
        ended = 0
        now = self._clock()
        deadline = now + timeout
        batch: list[tuple[str, int | None, str]] = []
        while True:
            try:
                wait = max(0.0, deadline - self._clock())
                item = self._queue.get(timeout=wait) if wait > 0 and not batch else self._queue.get_nowait()
            except queue.Empty:
                break
            if item is None:
                ended += 1
                continue
            batch.append(item)
            if len(batch) >= 2000 and not all_of_it:
                break
        for stream, rank, text in batch:
            self._one_line(text, rank, stream, self._clock())
        return ended

    def _handle_lines(self, lines: list[tuple[int | None, str]], now: float) -> None:
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

    def _register_rank(self, pid: int, local_rank: int | None) -> None:
        """A rank the launcher spawned (its line names the pid and the *local* rank). The global rank is read from
        the process itself; right after the spawn that can fail, so it is retried on the next watches."""
        self._pending[pid] = (local_rank, self._clock())
        self._watch.add(pid)
        self._resolve_ranks()

    def _resolve_ranks(self) -> None:
        for pid, (local_rank, since) in list(self._pending.items()):
            rank = _rank_of_process(pid)
            taken = set(self._rank_of_pid.values())
            if rank is None and self._clock() - since > _RANK_RESOLVE_S and local_rank not in taken:
                rank = local_rank  # the best the launcher's line says (right on one node)
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
        for pid, (when, available, total) in self._watch.died.items():
            rank = self._rank_of_pid.get(pid)
            if rank is None and pid in self._pending:
                rank = self._pending[pid][0]
            if rank is None:
                continue
            deaths.append(
                RankDeath(
                    rank=rank,
                    pid=pid,
                    at=when - self._t0,
                    host_available_bytes=available,
                    host_total_bytes=total,
                )
            )
        return sorted(deaths, key=lambda d: d.at)

    def _stop_tick(self, now: float) -> None:
        with self._lock:
            name, escalate = self._stop_name, self._escalate_now
            self._escalate_now = False
        if name is None:
            return
        if self._stop_stage == 0:
            self._stop_stage, self._stop_at = 1, now
            if name != "cleanup":
                self.sink.on_notice(
                    f"{name}: stopping the job (SIGINT to its processes; SIGTERM in {self.grace_s:g} s, "
                    f"then SIGKILL; {name if name == 'SIGINT' else 'Ctrl-C'} again to hurry)"
                )
            _signal_job(self._sids, signal.SIGINT)
            return
        waited = now - self._stop_at
        if self._stop_stage == 1 and (escalate or waited >= self.grace_s):
            if session_processes(self._sids):
                self.sink.on_notice("still running: SIGTERM")
                _signal_job(self._sids, signal.SIGTERM)
            self._stop_stage, self._stop_at = 2, now
        elif self._stop_stage == 2 and (escalate or waited >= self.term_grace_s):
            if session_processes(self._sids):
                self.sink.on_notice("still running: SIGKILL")
                _signal_job(self._sids, signal.SIGKILL)
            self._stop_stage, self._stop_at = 3, now
        elif self._stop_stage == 3 and waited >= 1.0:
            _signal_job(self._sids, signal.SIGKILL)  # whatever appeared meanwhile
            self._stop_at = now

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
        now = self._clock()
        codes = [p.returncode for p in self._procs]
        stop = self._stop_name if self._stop_name != "cleanup" else None
        verdict = decide(
            self.observer,
            launcher_returncodes=codes,
            interrupted_by=stop,
            deaths=self._deaths(),
            ds_config=self.prepared.ds_config,
            oom_advisor=self.oom_advisor,
            elapsed=now - self._t0,
            leftover_killed=self._leftover_killed,
        )
        hint = self._checkpoint_hint()
        if hint:
            verdict = replace(verdict, advice=(*verdict.advice, *hint))
        sig = _SIGNALS.get(stop, signal.SIGINT) if stop else None  # stopped from the dashboard: as Ctrl-C
        code = exit_code(verdict, codes, int(sig) if sig is not None else None)
        assert self._record is not None
        record = replace(
            self._record,
            status=rundir.STATUS_INTERRUPTED if stop else rundir.STATUS_FINISHED,
            ended_at=time.time(),
            exit_code=code,
            launcher_exit_codes=tuple(codes),
            interrupted_by=stop,
            verdict=verdict,
            world_size=self.observer.world_size or self._record.world_size,
        )
        rundir.write_run_record(self.prepared.run_dir, record)
        if self._log is not None:
            self._log.close()
        outcome = RunOutcome(exit_code=code, verdict=verdict, run_dir=self.prepared.run_dir, record=record)
        self.sink.on_end(outcome)
        return outcome

    def _checkpoint_hint(self) -> list[str]:
        """Where the job saved checkpoints and how to consolidate them (empty when it saved none)."""
        from wizard.checkpoints import checkpoint_hint, output_dirs_from_args

        cwd = self.prepared.cwd
        sources = output_dirs_from_args(self.prepared.specs[0].script_args, cwd)
        try:
            text = checkpoint_hint(sources, log_text="\n".join(self._checkpoint_lines), cwd=cwd)
        except OSError:
            return []
        return text.splitlines()


@contextmanager
def forwarded_signals(job: Job) -> Iterator[None]:
    """While inside: SIGINT, SIGTERM and SIGHUP to dswiz stop the job cleanly instead of killing dswiz alone
    (main thread only, as Python requires)."""
    previous: dict[signal.Signals, Any] = {}

    def handler(signum: int, frame: object) -> None:
        job.request_stop(signal.Signals(signum).name)

    for sig in _SIGNALS.values():
        previous[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def run_job(prepared: PreparedRun, sink: JobSink, **job_options: Any) -> RunOutcome:
    """Start the job, supervise it with signals forwarded, return the outcome (the CLI's path)."""
    job = Job(prepared, sink, **job_options)
    with forwarded_signals(job):
        job.start()
        return job.run()
