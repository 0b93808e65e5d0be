"""The job's processes, found and signalled by session: each launcher starts in a new session (and process group),
and every process it starts carries that session id, however it is re-parented. Every launcher also gets the job's
token in its environment (``DSWIZ_JOB_TOKEN``), inherited by every process it starts: that finds a process that
left the session too. The rule that finds them is the reaper's (runner/job/reaper.py), which also stops the job
when dswiz itself is killed (``start_reaper``).

Processes are found by session id with psutil, not as children: the DeepSpeed runner's ranks are children of
deepspeed/launcher/launch.py, and when the runner dies first they are re-parented to PID 1 (launch.py, main:
``subprocess.Popen`` without a new session, DeepSpeed 0.19.8), so a child walk from the launcher misses them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from types import FrameType
from typing import Any, Protocol

import psutil

from runner.job import reaper
from runner.job.stopping import StopReason


def session_processes(sids: set[int], token: str | None = None) -> list[psutil.Process]:
    """Live (non-zombie) processes whose session is one of ``sids``, or that carry the job's ``token``: the whole
    job, however re-parented."""
    found = []
    for pid in reaper.job_processes(sids, token):
        with suppress(psutil.Error):
            found.append(psutil.Process(pid))
    return found


def signal_job(sids: set[int], sig: int, token: str | None = None) -> None:
    """``sig`` to every process of the job: the sessions' process groups at once, then anyone who left them."""
    for sid in sids:  # each launcher leads its session and its process group (pgid == sid)
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(sid, sig)
    for proc in session_processes(sids, token):  # anyone who moved to another group, or left the session
        try:
            if os.getpgid(proc.pid) not in sids:
                proc.send_signal(sig)
        except (OSError, psutil.Error):
            pass


def environ_with(changes: Mapping[str, str | None], environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with ``changes`` applied (None: unset): the environment a job started with them sees."""
    env = dict(environ)
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def start_in_new_session(
    argv: Sequence[str], *, cwd: str, env_changes: Mapping[str, str | None], token: str | None = None
) -> subprocess.Popen[bytes]:
    """Start a launcher as the leader of a new session, stdout and stderr on one pipe, no stdin.
    ``env_changes`` is applied to this environment (None: unset); ``token`` marks every process of the job.
    Raises OSError when it cannot start."""
    env = environ_with(env_changes, os.environ)
    if token is not None:
        env[reaper.TOKEN_ENV] = token
    return subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own session and process group: signals reach the whole job
    )


class ReaperLink:
    """dswiz's end of the reaper's lifeline (runner/job/reaper.py). Telling fails quietly: a reaper that died only
    means the job is no longer protected against dswiz's own death (``alive`` says so)."""

    def __init__(self, proc: subprocess.Popen[bytes], lifeline_fd: int) -> None:
        self.proc = proc
        self._fd: int | None = lifeline_fd

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self._fd is not None and self.proc.poll() is None

    def _tell(self, line: str) -> None:
        if self._fd is None:
            return
        try:
            os.write(self._fd, (line + "\n").encode("ascii"))
        except OSError:  # the reaper is gone
            self.close()

    def add_session(self, sid: int) -> None:
        self._tell(f"sid {sid}")

    def add_port(self, port: int) -> None:
        self._tell(f"port {port}")

    def done(self) -> None:
        """The job is over and its verdict written: the reaper exits without acting."""
        self._tell("done")
        self.close()
        with suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=2.0)

    def close(self) -> None:
        """Close the lifeline without ``done``: the reaper stops whatever is left of the job and writes the verdict
        if none is written (what happens on its own when dswiz dies)."""
        if self._fd is not None:
            with suppress(OSError):
                os.close(self._fd)
            self._fd = None


def start_reaper(run_dir: str, token: str, grace_s: float) -> ReaperLink:
    """Start the reaper for this job (before its first launcher). Raises OSError when it cannot start."""
    read_fd, write_fd = os.pipe()  # neither end is inherited by anything else dswiz starts
    try:
        proc = subprocess.Popen(
            # -I: no PYTHONPATH, no user site, no script folder on sys.path: only the standard library is imported
            [sys.executable, "-I", "-S", reaper.__file__, run_dir, token, str(os.getpid()), f"{grace_s:g}"],
            stdin=read_fd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C or SIGHUP at the terminal does not reach it
            env={k: v for k, v in os.environ.items() if k != reaper.TOKEN_ENV},
        )
    except BaseException:
        os.close(write_fd)
        raise
    finally:
        os.close(read_fd)
    return ReaperLink(proc, write_fd)


class Stoppable(Protocol):
    def request_stop(self, reason: StopReason = StopReason.SIGINT) -> None: ...


_Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None  # what signal.signal returns

# The signals to dswiz that stop the job instead of dswiz alone.
FORWARDED = {
    signal.SIGINT: StopReason.SIGINT,
    signal.SIGTERM: StopReason.SIGTERM,
    signal.SIGHUP: StopReason.SIGHUP,
}


@contextmanager
def forwarded_signals(job: Stoppable) -> Iterator[None]:
    """While inside: SIGINT, SIGTERM and SIGHUP to dswiz stop the job cleanly instead of killing dswiz alone
    (main thread only, as Python requires)."""
    previous: dict[signal.Signals, _Handler] = {}

    def handler(signum: int, frame: FrameType | None) -> None:
        job.request_stop(FORWARDED[signal.Signals(signum)])

    for sig in FORWARDED:
        previous[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
