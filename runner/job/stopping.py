"""Stopping a job, as a state machine: SIGINT to every process of the job, SIGTERM after ``grace_s``, SIGKILL after
``term_grace_s`` more, then SIGKILL once a second for whatever appeared meanwhile. A second request skips the wait.
Processes that outlived their launcher start at SIGTERM.

Pure: ``StopEscalation.tick(now)`` says which signal to send next; the job sends it (``runner.job.session``).
"""

from __future__ import annotations

import enum
import signal
import threading
from dataclasses import dataclass


class StopReason(enum.Enum):
    """Who asked the job to stop. The value is what run.json's ``interrupted_by`` records."""

    SIGINT = "SIGINT"
    SIGTERM = "SIGTERM"
    SIGHUP = "SIGHUP"
    DASHBOARD = "dashboard"  # the dashboard's stop choice
    ORPHANS = "cleanup"  # nobody: the launcher ended by itself and left processes of the job behind
    STALL = "stall-timeout"  # --stall-timeout: no step for that long

    @property
    def interrupted_by(self) -> str | None:
        """What the verdict and run.json say stopped the run (None: it ended by itself)."""
        return None if self is StopReason.ORPHANS else self.value

    @property
    def exit_signal(self) -> signal.Signals | None:
        """The signal dswiz's exit code reports (128 + it); the dashboard's stop counts as Ctrl-C."""
        if self in (StopReason.ORPHANS, StopReason.STALL):
            return None
        return signal.SIGINT if self is StopReason.DASHBOARD else signal.Signals[self.value]


class StopStage(enum.Enum):
    """How far the stop has gone: the last signal sent to the whole job."""

    NOT_STOPPING = enum.auto()
    SIGINT_SENT = enum.auto()
    SIGTERM_SENT = enum.auto()
    SIGKILL_SENT = enum.auto()


@dataclass(frozen=True)
class StopStep:
    """A signal to send now; ``only_if_alive``: skip it (and its notice) when no process of the job is left."""

    sig: signal.Signals
    notice: str | None
    only_if_alive: bool


_KILL_AGAIN_EVERY_S = 1.0


class StopEscalation:
    """The stop of one job. ``request`` is thread-safe (signal handlers, a dashboard); ``tick`` runs in the job's
    loop."""

    def __init__(self, *, grace_s: float, term_grace_s: float) -> None:
        self.grace_s = grace_s
        self.term_grace_s = term_grace_s
        self.stage = StopStage.NOT_STOPPING
        self._lock = threading.Lock()
        self._reason: StopReason | None = None
        self._hurry = False
        self._since = 0.0

    @property
    def reason(self) -> StopReason | None:
        with self._lock:
            return self._reason

    def request(self, reason: StopReason) -> None:
        """The first request names the reason; any later one hurries to the next signal."""
        with self._lock:
            if self._reason is None:
                self._reason = reason
            else:
                self._hurry = True

    def tick(self, now: float) -> StopStep | None:
        with self._lock:
            reason, hurry = self._reason, self._hurry
            self._hurry = False
        if reason is None:
            return None
        waited = now - self._since
        if self.stage is StopStage.NOT_STOPPING and reason is StopReason.ORPHANS:
            # what outlived its launcher is not the job's training any more: no Ctrl-C courtesy, SIGTERM at once
            return self._advance(StopStage.SIGTERM_SENT, now, signal.SIGTERM, None)
        if self.stage is StopStage.NOT_STOPPING:
            return self._advance(
                StopStage.SIGINT_SENT, now, signal.SIGINT, _first_notice(reason, self.grace_s)
            )
        if self.stage is StopStage.SIGINT_SENT and (hurry or waited >= self.grace_s):
            return self._advance(StopStage.SIGTERM_SENT, now, signal.SIGTERM, "still running: SIGTERM", True)
        if self.stage is StopStage.SIGTERM_SENT and (hurry or waited >= self.term_grace_s):
            return self._advance(StopStage.SIGKILL_SENT, now, signal.SIGKILL, "still running: SIGKILL", True)
        if self.stage is StopStage.SIGKILL_SENT and waited >= _KILL_AGAIN_EVERY_S:
            return self._advance(
                StopStage.SIGKILL_SENT, now, signal.SIGKILL, None
            )  # whatever appeared meanwhile
        return None

    def _advance(
        self,
        stage: StopStage,
        now: float,
        sig: signal.Signals,
        notice: str | None,
        only_if_alive: bool = False,
    ) -> StopStep:
        self.stage, self._since = stage, now
        return StopStep(sig, notice, only_if_alive)


def _first_notice(reason: StopReason, grace_s: float) -> str | None:
    if reason in (StopReason.ORPHANS, StopReason.STALL):
        return None  # the job's loop said why already
    again = "SIGINT" if reason is StopReason.SIGINT else "Ctrl-C"
    return (
        f"{reason.value}: stopping the job (SIGINT to its processes; SIGTERM in {grace_s:g} s, "
        f"then SIGKILL; {again} again to hurry)"
    )
