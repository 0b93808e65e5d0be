"""The threads that watch a running job: one reader per launcher pipe, and the rank death watch.

Lines reach the job's loop through one queue; ``None`` on it means one pipe ended.
"""

from __future__ import annotations

import collections
import os
import queue
import threading
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import IO

import psutil

from runner.metrics.tail import rank_of_log_file
from runner.reaper import stat_fields


@dataclass(frozen=True)
class LauncherLine:
    stream: str  # "launcher", or "launcher<k>" when several launchers run here (simulated nodes)
    text: str


LineQueue = queue.Queue[LauncherLine | None]


def start_pipe_reader(pipe: IO[bytes], stream: str, lines: LineQueue) -> threading.Thread:
    """A daemon thread that puts each line of ``pipe`` on ``lines`` (decoded, no newline), then None at its end."""
    thread = threading.Thread(target=_read_pipe, args=(pipe, stream, lines), daemon=True)
    thread.start()
    return thread


def _read_pipe(pipe: IO[bytes], stream: str, lines: LineQueue) -> None:
    try:
        for raw in iter(pipe.readline, b""):
            lines.put(LauncherLine(stream, raw.decode("utf-8", "replace").rstrip("\n")))
    except (OSError, ValueError):
        pass
    finally:
        lines.put(None)  # this stream is done


def rank_of_process(pid: int) -> int | None:
    """The global rank of a rank process: the per-rank log its stdout is (``…_rank<N>.log``), else its RANK
    variable. None when neither can be read (yet)."""
    for fd in (1, 2):
        try:
            rank = rank_of_log_file(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            rank = None
        if rank is not None:
            return rank
    try:
        env_rank = psutil.Process(pid).environ().get("RANK")
        return int(env_rank) if env_rank is not None else None
    except (psutil.Error, ValueError, OSError):
        return None


def zombie_returncode(pid: int) -> int | None:
    """How a dead process that its parent has not reaped yet ended, written as subprocess does: -N for signal N,
    else its exit code. A rank is the launcher's child, not dswiz's: its status is read from the zombie's
    /proc/PID/stat (DeepSpeed's launcher reaps it on its next once-a-second poll). None when the process is gone or
    not a zombie, and for a 0 in another user's process, which is what the kernel shows where it does not let this
    user look."""
    fields = stat_fields(pid)
    if fields is None or len(fields) < 50 or fields[0] != "Z" or not fields[49].isdigit():
        return None
    status = int(fields[49])
    if status == 0:
        try:
            return 0 if os.stat(f"/proc/{pid}").st_uid == os.getuid() else None
        except OSError:
            return None
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else None


@dataclass(frozen=True)
class Death:
    """When a watched process was first seen dead, how it ended when that could be read, and the lowest host
    available memory just before."""

    at: float  # the job's clock, once per pass of the watch: deaths seen in the same pass tie
    host_available_bytes: int | None
    host_total_bytes: int | None
    returncode: int | None = None  # zombie_returncode


class DeathWatch:
    """Notes when each rank process dies, 20 times a second, in its own thread (the main loop can be busy with
    lines). When the launcher notices a dead rank (it polls once a second: deepspeed/launcher/launch.py, main,
    DeepSpeed 0.19.8) it terminates the others, so the first death seen is the cause; a slower watch would see them
    all at once. Also keeps the lowest host available memory of the last few seconds, to tell the OOM killer from
    another SIGKILL."""

    TICK_S = 0.05
    MEM_EVERY = 5  # ticks

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._pids: list[int] = []
        self.died: dict[int, Death] = {}
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
        if self._thread.is_alive():
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
        # One time for the whole pass: which of two deaths seen in one pass came first is not known, and the order
        # of the pids must not pretend it is (rank 0, checked first, would always look first).
        now = self._clock()
        with self._lock:
            pids = [p for p in self._pids if p not in self.died]
        for pid in pids:
            try:
                alive = psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
            except psutil.Error:
                alive = False
            if not alive:
                low = min(self._mem) if self._mem else None
                with self._lock:
                    self.died[pid] = Death(now, low, self._total, zombie_returncode(pid))
