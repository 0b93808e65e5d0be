"""The job's processes, found and signalled by session: each launcher starts in a new session (and process group),
and every process it starts carries that session id, however it is re-parented. Every launcher also gets the job's
token in its environment (``DSWIZ_JOB_TOKEN``), inherited by every process it starts: that finds a process that
left the session too. The rule that finds them is the reaper's (runner/reaper.py), which also stops the job
when dswiz itself is killed (``reaper.start_reaper``).

Processes are found by session id with psutil, not as children: the DeepSpeed runner's ranks are children of
deepspeed/launcher/launch.py, and when the runner dies first they are re-parented to PID 1 (launch.py, main:
``subprocess.Popen`` without a new session, DeepSpeed 0.19.8), so a child walk from the launcher misses them.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from types import FrameType
from typing import Any, Protocol

import psutil

from runner import reaper
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
