"""What the job's output says, and the verdict in words when it ends. Pure: lines and facts in, a RunVerdict out.

The line parsers are the monitor's (``runner.metrics.parse.parse_line``: throughput, step, overflow, spawn, exit,
oom, nccl_timeout, loss …); tracebacks per rank are read here (``runner.tracebacks``). ``JobObserver`` is fed every
line as it arrives (live status, startup phases); ``decide`` turns what it saw, plus how the processes ended, into
the verdict.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from runner.metrics.csvmon import CsvPoint
from runner.metrics.parse import LogEvent, parse_line
from runner.phases import Phase, PhaseTracker
from runner.rundir import RunVerdict
from runner.tracebacks import RankException, TracebackCollector, root_cause
from wizard.units import fmt_bytes

VERDICT_KINDS = (
    "success",
    "interrupted",
    "stalled",  # stopped by --stall-timeout
    "supervisor_lost",  # dswiz died first; written by its reaper (runner/reaper.py)
    "supervisor_error",  # dswiz failed inside and stopped the job
    "cuda_oom",
    "nccl_timeout",
    "host_oom",
    "killed",
    "rank_failed",
    "overflow_storm",
    "failed",
)
OVERFLOW_STORM_MIN = 5  # skipped steps, and
OVERFLOW_STORM_FRACTION = 0.5  # at least this share of the steps run
HOST_OOM_FREE_FRACTION = 0.05  # host memory this low just before a SIGKILL: the OOM killer
# Exceptions whose cause is known and whose fix is not in their text: (every substring the exception has, advice).
KNOWN_EXCEPTIONS: tuple[tuple[tuple[str, ...], str], ...] = (
    # deepspeed.zero.Init replaces torch.Tensor.__new__ while it is open (partition_parameters.py
    # get_new_tensor_fn_for_dtype, DeepSpeed 0.19.8); TorchDynamo's polyfills, imported for the first time inside it
    # (transformers imports torch._dynamo when a model class is first touched), check that __new__ against their own
    # and raise (torch/_dynamo/decorators.py substitute_in_graph, torch 2.13). Importing torch._dynamo first avoids it:
    # tests/fixtures/runs/zero_init_dynamo.
    (
        ("Signature mismatch between", "new_tensor", "tensor_pynew"),
        "deepspeed.zero.Init and TorchDynamo clash when torch._dynamo is first imported inside zero.Init: add "
        "`import torch._dynamo` (or import your model class) before `with deepspeed.zero.Init(...)`",
    ),
    # The rendezvous port was free when dswiz chose it (runner.preflight.reserve_port holds it against other dswiz
    # launches) but another program bound it while the ranks imported torch: tests/fixtures/runs/port_taken.
    (
        ("EADDRINUSE",),
        "another program took the rendezvous port while the ranks started: run again (dswiz picks a free port "
        "on one machine), or pass --master-port with a port nothing else uses",
    ),
)
# A process dying in native code: the C++ runtime's abort, CPython's fatal error (faulthandler prints segfaults so).
_NATIVE_ABORT_RE = re.compile(
    r"^(?:\[rank\d+\]:\s?)?(terminate called (?:without an active exception|after throwing)|Fatal Python error:)"
)
# A script's parser refusing its arguments, exit status 2 both ways:
# - argparse (CPython Lib/argparse.py, ArgumentParser.error): "usage: PROG ..." (continued on indented lines), then
#   "PROG: error: MESSAGE" -- PROG with a subcommand's name after a space for a subparser;
# - click (click/exceptions.py, UsageError.show): "Usage: PROG ...", "Try 'PROG --help' for help.", a blank line,
#   then "Error: MESSAGE".
_RANK_PREFIX = r"^(?:\[rank\d+\]:\s?)?"
_USAGE_LINE_RE = re.compile(_RANK_PREFIX + r"(?P<style>usage|Usage): (?P<prog>\S+)")
_ARGPARSE_ERROR_RE = re.compile(_RANK_PREFIX + r"(?P<prog>[^\s:][^:]*): error: (?P<message>.+)$")
_CLICK_ERROR_RE = re.compile(_RANK_PREFIX + r"Error: (?P<message>.+)$")
_USAGE_CONTINUATION_RE = re.compile(_RANK_PREFIX + r"(?:\s|$|Try '.*' for help\.$)")
# The launchers' own parsers: their usage errors are not the script's (dswiz builds their arguments).
_LAUNCHER_PROGS = frozenset({"deepspeed", "torchrun", "accelerate", "launch.py", "runner.py", "run.py"})
USAGE_EXIT_CODE = 2
STALL_EXIT_CODE = 124
_SIGNAL_NAMES = {1: "SIGHUP", 2: "SIGINT", 6: "SIGABRT", 9: "SIGKILL", 11: "SIGSEGV", 15: "SIGTERM"}


@dataclass(frozen=True)
class RankDeath:
    """A rank seen gone by the process watcher. It is the launcher's child, not dswiz's: how it ended is known only
    when the watcher saw it as a zombie, before the launcher reaped it."""

    rank: int
    pid: int
    at: float  # monotonic seconds since the job started
    host_available_bytes: int | None = None  # the lowest host available memory seen shortly before
    host_total_bytes: int | None = None
    returncode: int | None = (
        None  # -N for signal N, else the exit code; None when the watcher could not read it
    )


@dataclass(frozen=True)
class Status:
    """The one-line live status."""

    step: int | None
    samples_per_sec: float | None
    loss: float | None
    elapsed: float
    phase: Phase
    phase_elapsed: float = 0.0
    stalled_for: float | None = None  # seconds without a new step, once that is long enough to say

    def line(self) -> str:
        if self.step is None and self.samples_per_sec is None and self.loss is None:
            return f"{self.phase.name}… {int(self.phase_elapsed)} s ({_clock(self.elapsed)} elapsed)"
        parts = [f"step {self.step}" if self.step is not None else "step ?"]
        if self.samples_per_sec is not None:
            parts.append(f"{self.samples_per_sec:,.1f} samples/s")
        if self.loss is not None:
            parts.append(f"loss {self.loss:.4g}")
        if self.stalled_for is not None:
            parts.append(f"no step for {self.stalled_for:.0f} s")
        parts.append(f"{_clock(self.elapsed)} elapsed")
        return " · ".join(parts)


@dataclass(frozen=True)
class Stall:
    """No new step for ``idle_s`` seconds after step ``last_step`` (``timeout_s``: the --stall-timeout that
    stopped the job)."""

    idle_s: float
    last_step: int | None
    timeout_s: float

    def words(self) -> str:
        return f"no step for {self.idle_s:.0f} s (last step {self.last_step})"


def _clock(seconds: float) -> str:
    s = max(0, int(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


@dataclass
class JobObserver:
    """Everything the verdict and the live status need, accumulated line by line."""

    started: float = 0.0
    optimizer_op: str | None = None
    phases: PhaseTracker = field(init=False)
    tracebacks: TracebackCollector = field(default_factory=TracebackCollector)
    step: int | None = None
    skipped: int = 0
    samples_per_sec: float | None = None  # DeepSpeed's latest step (the live status)
    # DeepSpeed's running average, from its third step on (ThroughputTimer start_step=2, utils/timer.py, 0.19.8):
    # the run's figure in the verdict, where the last step alone is one noisy sample
    avg_samples_per_sec: float | None = None
    loss: float | None = None
    eval_loss: float | None = None  # an evaluation / inference job's loss ({'eval_loss': ...})
    overflows: int = 0
    last_loss_scale: int | None = None
    ooms: list[LogEvent] = field(default_factory=list)
    nccl_timeouts: list[LogEvent] = field(default_factory=list)
    exit_codes: list[int] = field(default_factory=list)  # from launch.py's lines
    spawned: list[LogEvent] = field(default_factory=list)
    world_size: int | None = None
    loss_scale_floor: bool = False  # DeepSpeed gave up: "Current loss scale already at minimum"
    native_aborts: list[tuple[int | None, str]] = field(default_factory=list)  # (rank, "terminate called …")
    # rank -> (style, PROG) of a "usage:" line just printed: the error line that follows it is that parser's
    usage_armed: dict[int | None, tuple[str, str]] = field(default_factory=dict)
    # (PROG, the error line): ("train.py", "train.py: error: unrecognized arguments: --x")
    usage_errors: list[tuple[str, str]] = field(default_factory=list)
    clean_exits: int = 0  # ranks the launcher saw exit with 0
    # (step, time) of the first and the latest step seen: the speed of a job that prints no DeepSpeed throughput
    # line (accelerate and the HF Trainer set steps_per_print to infinity), from its own step prints.
    first_step_at: tuple[int, float] | None = None
    last_step_at: tuple[int, float] | None = None
    rank0_loss: bool = False
    train_batch_size: int | None = None  # from DeepSpeed's config print (log_level info)
    # The HF Trainer's last log: {'train_runtime':, 'train_samples_per_second':, 'train_steps_per_second':, …}
    # (transformers trainer_utils.speed_metrics): its speed when nothing else printed one.
    trainer_summary: Mapping[str, Any] | None = None
    # The csv monitor's lr rows (one per optimizer step, rank 0): (global_samples, arrival time), first and latest
    # of the last segment (a restart starts a new one), and how many rows that segment has.
    csv_first: tuple[int, float] | None = None
    csv_last: tuple[int, float] | None = None
    csv_steps: int = 0

    def __post_init__(self) -> None:
        self.phases = PhaseTracker(self.started, optimizer_op=self.optimizer_op)

    def feed(
        self, text: str, now: float, *, rank: int | None = None, stream: object = None
    ) -> LogEvent | None:
        """One line of output (``rank`` when it came from that rank's log). Returns its parsed event."""
        event = parse_line(text, default_rank=rank)
        self.tracebacks.feed(text, default_rank=rank, stream=stream)
        self.phases.feed(text, now, kind=event.kind if event else None)
        if "Current loss scale already at minimum" in text:
            self.loss_scale_floor = True
        if _NATIVE_ABORT_RE.match(text):
            self.native_aborts.append((rank, text.strip()))
        self._watch_usage(text.rstrip(), rank)
        if event is None:
            return None
        v = event.values
        if event.kind == "throughput":
            self.step = _max(self.step, v.get("global_step"))
            self.samples_per_sec = v.get("curr_samples_per_sec") or v.get("running_avg_samples_per_sec")
            self.avg_samples_per_sec = v.get("running_avg_samples_per_sec") or self.avg_samples_per_sec
        elif event.kind == "step" and v.get("step"):  # "step=0" is printed at engine start
            self.step = _max(self.step, v.get("step"))
            self.skipped = max(self.skipped, int(v.get("skipped") or 0))
        elif event.kind == "loss" and (event.rank in (None, 0) or not self.rank0_loss):
            self.rank0_loss = self.rank0_loss or event.rank in (None, 0)
            if v.get("train_samples_per_second") is not None:
                self.trainer_summary = v
            if v.get("loss") is not None:
                self.loss = float(v["loss"])
            elif v.get("eval_loss") is not None and v.get("train_loss") is None:
                self.eval_loss = float(v["eval_loss"])
            if v.get("step") is not None:
                step = self.step = max(self.step or 0, int(v["step"]))
                if self.first_step_at is None:
                    self.first_step_at = (step, now)
                self.last_step_at = (step, now)
        elif event.kind == "overflow":
            if event.rank in (None, 0):
                self.overflows += 1
                self.last_loss_scale = v.get("new_scale") or self.last_loss_scale
        elif event.kind == "oom":
            self.ooms.append(event)
        elif event.kind == "nccl_timeout":
            self.nccl_timeouts.append(event)
        elif event.kind == "exit" and v.get("return_code"):
            self.exit_codes.append(int(v["return_code"]))
        elif event.kind == "exit" and v.get("return_code") == 0:
            self.clean_exits += 1
        elif event.kind == "spawn":
            self.spawned.append(event)
        elif (
            event.kind == "ds_config" and v.get("key") == "train_batch_size" and str(v.get("value")).isdigit()
        ):
            self.train_batch_size = int(v["value"])
        elif event.kind == "world" and v.get("world_size"):
            self.world_size = int(v["world_size"])
        return event

    def _watch_usage(self, text: str, rank: int | None) -> None:
        """A parser's usage, then its error line (per rank: the ranks' lines may interleave); any other line in
        between disarms it, so a "usage: 12 GiB" printed by a script arms nothing for long."""
        armed = self.usage_armed.pop(rank, None)
        if m := _USAGE_LINE_RE.match(text):
            self.usage_armed[rank] = (m["style"], m["prog"])
            return
        if armed is None:
            return
        style, prog = armed
        if style == "usage" and (m := _ARGPARSE_ERROR_RE.match(text)):
            found = (m["prog"].split()[0], f"{m['prog']}: error: {m['message']}")
        elif style == "Usage" and (m := _CLICK_ERROR_RE.match(text)):
            found = (prog, f"{prog}: Error: {m['message']}")
        else:
            if _USAGE_CONTINUATION_RE.match(text):
                self.usage_armed[rank] = armed
            return
        if found[0] not in _LAUNCHER_PROGS and found not in self.usage_errors:  # every rank parses alike
            self.usage_errors.append(found)

    def add_csv(self, points: Sequence[CsvPoint], now: float) -> Phase | None:
        """Rows the csv monitor appended since the last call. Returns the "training" phase when they ended the
        setting up (a job under accelerate or the Trainer may print nothing while it trains)."""
        for p in points:
            if p.metric != "lr":
                continue
            if self.csv_last is None or p.samples < self.csv_last[0]:
                self.csv_first, self.csv_steps = (p.samples, now), 0
            self.csv_last, self.csv_steps = (p.samples, now), self.csv_steps + 1
        return self.phases.steps_seen(now) if self.csv_steps else None

    def csv_samples_per_sec(self) -> float | None:
        """The csv monitor's sample counter over the rows' arrival times, first to latest (None before two)."""
        if self.csv_first is None or self.csv_last is None:
            return None
        (n0, t0), (n1, t1) = self.csv_first, self.csv_last
        return (n1 - n0) / (t1 - t0) if n1 > n0 and t1 > t0 else None

    def printed_steps_per_sec(self) -> float | None:
        """The job's own step prints over their arrival times, first to latest (None before two)."""
        if self.first_step_at is None or self.last_step_at is None:
            return None
        (s0, t0), (s1, t1) = self.first_step_at, self.last_step_at
        return (s1 - s0) / (t1 - t0) if s1 > s0 and t1 > t0 else None

    def status(self, now: float) -> Status:
        phase = self.phases.current
        samples, printed = self.samples_per_sec or self.csv_samples_per_sec(), self.printed_steps_per_sec()
        if samples is None and printed is not None and self.train_batch_size:
            samples = printed * self.train_batch_size
        step = self.step if self.step is not None else (self.csv_steps or None)
        return Status(step, samples, self.loss, now - self.started, phase, now - phase.started_at)


def _max(a: int | None, b: Any) -> int | None:
    if b is None:
        return a
    return int(b) if a is None else max(a, int(b))


# -------------------------------------------------------------------------------------------- the verdict

OomAdvisor = Callable[[Mapping[str, Any] | None], Sequence[str]]


def default_oom_advice(ds_config: Mapping[str, Any] | None) -> list[str]:
    """Generic advice from the config alone; the planner's advisor (a config that fits) replaces it."""
    cfg = ds_config or {}
    micro = cfg.get("train_micro_batch_size_per_gpu")
    gas = cfg.get("gradient_accumulation_steps")
    zero = cfg.get("zero_optimization") if isinstance(cfg.get("zero_optimization"), Mapping) else {}
    stage = zero.get("stage", 0) if isinstance(zero, Mapping) else 0
    advice = []
    if isinstance(micro, int) and micro > 1:
        new_gas = gas * 2 if isinstance(gas, int) else 2
        advice.append(
            f"halve train_micro_batch_size_per_gpu ({micro} -> {micro // 2}) and set gradient_accumulation_steps "
            f"to {new_gas} to keep the global batch"
        )
    else:
        advice.append(
            "lower train_micro_batch_size_per_gpu (raise gradient_accumulation_steps to keep the batch)"
        )
    if isinstance(stage, int) and stage < 3:
        advice.append(f"raise the ZeRO stage ({stage} -> {stage + 1}) to shard more of the model states")
    else:
        advice.append(
            "offload the optimizer (and parameters) to CPU: zero_optimization.offload_optimizer.device cpu"
        )
    advice.append("turn on activation checkpointing in the script (model.gradient_checkpointing_enable())")
    advice.append("`dswiz plan` shows which settings fit this GPU")
    return advice


@dataclass(frozen=True)
class EndFacts:
    """What the verdict is decided from: what the job printed (``obs``) and how its processes ended."""

    obs: JobObserver
    launcher_returncodes: Sequence[int | None]
    interrupted_by: str | None
    deaths: Sequence[RankDeath]
    ds_config: Mapping[str, Any] | None
    oom_advisor: OomAdvisor | None
    elapsed: float
    stall: Stall | None = None

    @property
    def exceptions(self) -> list[RankException]:
        return self.obs.tracebacks.exceptions

    @property
    def failed(self) -> bool:
        return any(rc not in (0, None) for rc in self.launcher_returncodes) or bool(self.obs.exit_codes)

    @property
    def at_step(self) -> str:
        return f" at step {self.obs.step}" if self.obs.step is not None else ""

    @property
    def first_failing_code(self) -> int | None:
        return first_failing(self.obs.exit_codes, self.launcher_returncodes)


def first_failing(rank_codes: Sequence[int], launcher_returncodes: Sequence[int | None]) -> int | None:
    """The first non-zero code launch.py reported for a rank ("exits with return code = N"), else the launcher's."""
    return next((rc for rc in (*rank_codes, *launcher_returncodes) if rc not in (0, None)), None)


def decide(
    obs: JobObserver,
    *,
    launcher_returncodes: Sequence[int | None],
    interrupted_by: str | None = None,
    deaths: Sequence[RankDeath] = (),
    ds_config: Mapping[str, Any] | None = None,
    oom_advisor: OomAdvisor | None = None,
    elapsed: float = 0.0,
    leftover_killed: int = 0,
    stall: Stall | None = None,
) -> RunVerdict:
    """The verdict, most specific first (``VERDICT_RULES``): a stall timeout, interruption, CUDA OOM, NCCL timeout,
    the script refusing its arguments, SIGKILL (host OOM?), a rank's exception, an fp16 overflow storm, success, or
    a plain failure with the exit code."""
    facts = EndFacts(
        obs, launcher_returncodes, interrupted_by, deaths, ds_config, oom_advisor, elapsed, stall
    )
    verdict = next(v for rule in VERDICT_RULES if (v := rule(facts)) is not None)
    if leftover_killed:
        leftover = f"{leftover_killed} process(es) of the job outlived the launcher and were killed"
        verdict = replace(verdict, advice=(*verdict.advice, leftover))
    return verdict


def _stalled(f: EndFacts) -> RunVerdict | None:
    if f.stall is None:
        return None
    return RunVerdict(
        kind="stalled",
        summary=f"stalled: {f.stall.words()}; stopped by --stall-timeout {f.stall.timeout_s:g} after "
        f"{_clock(f.elapsed)}; no process of the job is left",
        advice=(
            "a hung rank: a stuck collective, a dead peer, a data loader or a file that never answers; "
            "`py-spy dump --pid <rank pid>` during the stall shows where each rank waits",
            "if steps legitimately take that long (evaluation, checkpoint saves), raise --stall-timeout",
        ),
    )


def _interrupted(f: EndFacts) -> RunVerdict | None:
    if f.interrupted_by is None:
        return None
    how = "from the dashboard" if f.interrupted_by == "dashboard" else f"by {f.interrupted_by}"
    return RunVerdict(
        kind="interrupted",
        summary=f"stopped {how}{f.at_step} after {_clock(f.elapsed)}; no process of the job is left",
    )


def _cuda_oom(f: EndFacts) -> RunVerdict | None:
    cuda_ooms = [e for e in f.obs.ooms if e.values.get("device") not in ("cpu", None)]
    oom_exc = next((e for e in f.exceptions if e.type.endswith("OutOfMemoryError")), None)
    if not cuda_ooms and oom_exc is None:
        return None
    ev = cuda_ooms[0] if cuda_ooms else None
    rank = ev.rank if ev is not None and ev.rank is not None else (oom_exc.rank if oom_exc else None)
    detail = ""
    if ev is not None and ev.values.get("tried_bytes"):
        detail = f" (tried to allocate {fmt_bytes(ev.values['tried_bytes'])}"
        if ev.values.get("total_bytes") is not None and ev.values.get("free_bytes") is not None:
            detail += f"; {fmt_bytes(ev.values['free_bytes'])} free of {fmt_bytes(ev.values['total_bytes'])}"
        detail += ")"
    advisor = f.oom_advisor or default_oom_advice
    return RunVerdict(
        kind="cuda_oom",
        summary=f"{_who(rank)} ran out of GPU memory{f.at_step}{detail}",
        rank=rank,
        exception=oom_exc.text if oom_exc else None,
        advice=tuple(advisor(f.ds_config)),
        evidence=tuple(e.raw for e in cuda_ooms[:3]),
    )


def _nccl_timeout(f: EndFacts) -> RunVerdict | None:
    if not f.obs.nccl_timeouts:
        return None
    ev = f.obs.nccl_timeouts[0]
    op = ev.values.get("op")
    ran, limit = ev.values.get("ran_ms"), ev.values.get("timeout_ms")
    detail = f" ({op} ran {ran / 1000:.0f} s, limit {limit / 1000:.0f} s)" if op and ran and limit else ""
    return RunVerdict(
        kind="nccl_timeout",
        summary=f"NCCL timeout on {_who(ev.rank)}{f.at_step}{detail}: a collective waited for a rank that never came",
        rank=ev.rank,
        advice=(
            "look for the rank that stopped first (its log in logs/ranks/): a crash, a hang, or a data loader "
            "that ran out on one rank only",
            "rerun with NCCL_DEBUG=INFO to see which peer is missing",
            "if a step legitimately takes long (huge checkpoint, slow first batch), raise the timeout: "
            "deepspeed.init_distributed(timeout=timedelta(minutes=60))",
        ),
        evidence=tuple(e.raw for e in f.obs.nccl_timeouts[:3]),
    )


def _kill_order(d: RankDeath) -> tuple[float, int]:
    """First seen dead first; of the deaths seen in the same pass of the watch (which came first is not known), a
    SIGKILL read from the zombie first, then an end not read, then any other end."""
    return (d.at, 0 if d.returncode == -9 else 1 if d.returncode is None else 2)


# Ends read from a rank's zombie that cause nothing: a clean exit, SIGKILL (the kill itself), and the SIGTERM or
# SIGINT a launcher sends the other ranks once one has failed. Any other (a crash: SIGSEGV, SIGABRT, an exit code)
# came first, so a silent death after it is its consequence.
_NOT_A_CAUSE = (None, 0, -9, -15, -2)


def _no_later(d: RankDeath, crash: RankDeath) -> bool:
    """``d`` came no later than ``crash``: seen in an earlier pass, or in the same pass when ``d`` was read as a
    SIGKILL (a death whose end was not read, seen with a crash, cannot be put before it)."""
    return d.at < crash.at or (d.at == crash.at and d.returncode == -9)


def _sigkilled(f: EndFacts) -> RunVerdict | None:
    """A rank died of SIGKILL (and no traceback explains it): the host's OOM killer when memory was low just
    before, or when that cannot be told; else someone else's kill.

    The rank is the first seen dead among the ranks that printed no traceback and did not end some other way: a
    rank whose collective failed because its peer vanished (gloo: "Connection closed by peer") raises and exits
    within milliseconds, often inside the same pass of the death watch, and its traceback shows it reacted; one
    whose gloo thread aborted (SIGABRT) or that the launcher stopped (SIGTERM) shows it in its exit status; the
    killed rank prints nothing. A silent death after a rank read as crashed is that crash's consequence (the
    launcher stopped it). Such a silent death no later than every rank that raised is a signal's even when
    the launcher reported another rank's exit code: it reports the first failed rank its once-a-second poll finds
    (deepspeed/launcher/launch.py, main, DeepSpeed 0.19.8)."""
    cause = root_cause(f.exceptions)
    if not (cause is None or cause.secondary):
        return None
    first_seen = min((d.at for d in f.deaths), default=0.0)
    reported = (
        -9 in f.obs.exit_codes
        or any(rc in (-9, 137, 247) for rc in f.launcher_returncodes if rc is not None)
        # a rank read as SIGKILLed first, in a job that failed. Later, the kill is the launcher's (a rank that
        # ignored its SIGTERM for 30 s); in a job that did not fail, dswiz's own (ranks that outlived the launcher)
        or (f.failed and any(d.returncode == -9 and d.at <= first_seen for d in f.deaths))
    )
    raised = {e.rank for e in f.exceptions if e.rank is not None}
    crashed = [d for d in f.deaths if d.rank not in raised and d.returncode not in _NOT_A_CAUSE]
    candidates = [
        d
        for d in f.deaths
        if d.rank not in raised and d.returncode in (-9, None) and all(_no_later(d, c) for c in crashed)
    ]
    silent = min(candidates, key=_kill_order, default=None)
    seen = (
        silent is not None
        and f.failed
        and silent.host_available_bytes is not None
        and all(silent.at <= d.at for d in f.deaths if d.rank in raised)
    )
    if not reported and not seen:
        return None
    killable = (d for d in f.deaths if d.returncode in (-9, None))
    first = silent or min(killable, key=_kill_order, default=None)
    tied = [d for d in candidates if first is not None and _kill_order(d) == _kill_order(first)]
    who = _who_died(tied) if len(tied) > 1 else f"rank {first.rank} (pid {first.pid})" if first else "a rank"
    rank = first.rank if first is not None and len(tied) <= 1 else None
    if first is None or first.host_available_bytes is None:
        return _host_oom(f, who, first, rank, low=False)
    if (
        first.host_total_bytes
        and first.host_available_bytes < HOST_OOM_FREE_FRACTION * first.host_total_bytes
    ):
        return _host_oom(f, who, first, rank, low=True)
    how = (
        "was killed with SIGKILL (exit -9)"
        if reported
        else "died without a traceback, killed by a signal (SIGKILL, most likely; the launcher reported the exit "
        "code of a rank that stopped because of it)"
    )
    return RunVerdict(
        kind="killed",
        summary=f"{who} {how}{f.at_step}; the host still had "
        f"{fmt_bytes(first.host_available_bytes)} of memory available, so not by the out-of-memory killer",
        rank=rank,
        advice=("check for a job scheduler limit, a watchdog, or a manual kill",),
    )


def _who_died(tied: Sequence[RankDeath]) -> str:
    """Ranks seen gone in the same pass of the death watch that their exit status does not tell apart: each was
    killed when each status says SIGKILL; else which one was is not known, and the verdict does not guess."""
    named = [f"rank {d.rank} (pid {d.pid})" for d in sorted(tied, key=lambda d: d.rank)]
    if all(d.returncode == -9 for d in tied):
        return "each of " + " and ".join(named)
    return " or ".join(named) + " (found gone at the same moment; which one first is not known)"


def _host_oom(f: EndFacts, who: str, first: RankDeath | None, rank: int | None, *, low: bool) -> RunVerdict:
    mem = ""
    if low and first is not None and first.host_available_bytes is not None:
        mem = f" (host memory available just before: {fmt_bytes(first.host_available_bytes)})"
    return RunVerdict(
        kind="host_oom",
        summary=f"{who} was killed with SIGKILL (exit -9){f.at_step}, most likely by the host's "
        f"out-of-memory killer{mem}",
        rank=rank,
        advice=(
            "confirm with `dmesg -T | grep -i -E 'killed process|out of memory'`",
            "CPU offload, pinned memory and data-loader workers live in host RAM: offload less, lower "
            "num_workers, or use a host with more memory",
        ),
    )


def _rank_exception(f: EndFacts) -> RunVerdict | None:
    cause = root_cause(f.exceptions)
    if cause is None or not f.failed:
        return None
    others = [
        f"rank {r}" for r in sorted({e.rank for e in f.exceptions if e is not cause and e.rank is not None})
    ]
    advice = [f"where: {cause.location}"] if cause.location else []
    if cause.secondary:
        advice.append(
            "this looks like a consequence (a peer closed the connection): the rank that died first may have "
            "been killed without a traceback; see logs/ranks/"
        )
    if others:
        advice.append(f"then {', '.join(others)} stopped too (a consequence: a peer was gone)")
    if f.obs.loss_scale_floor:
        advice.append("fp16 loss scale hit its minimum: use bf16 where the GPU supports it, or lower the lr")
    advice += [fix for needles, fix in KNOWN_EXCEPTIONS if all(n in cause.text for n in needles)]
    return RunVerdict(
        kind="overflow_storm" if f.obs.loss_scale_floor else "rank_failed",
        summary=f"{_who(cause.rank)} failed{f.at_step}: {cause.text}",
        rank=cause.rank,
        exception=cause.text,
        advice=tuple(advice),
        evidence=tuple(cause.lines[-6:]),
    )


def _finished(f: EndFacts) -> RunVerdict | None:
    """The job ended by itself with code 0: success, unless most steps were skipped for fp16 overflow."""
    if f.failed:
        return None
    obs = f.obs
    storm = _overflow_storm(obs)
    if storm:
        return RunVerdict(
            kind="overflow_storm",
            summary=f"finished, but {storm} steps were skipped for fp16 overflow: the model barely trained",
            advice=(
                "use bf16 instead of fp16 where the GPU supports it (compute capability >= 8.0)",
                "lower the learning rate or raise fp16.loss_scale_window / initial_scale_power",
            ),
        )
    loss = f", final loss {obs.loss:.4g}" if obs.loss is not None else ""
    if obs.loss is None and obs.eval_loss is not None:
        loss = f", last eval loss {obs.eval_loss:.4g}"
    step = (
        obs.step if obs.step is not None else (_trainer_steps(obs.trainer_summary) or obs.csv_steps or None)
    )
    done = f"{step} steps in" if step is not None else "finished in"  # other nodes print no steps
    speed = _speed(obs, f.ds_config)
    return RunVerdict(kind="success", summary=f"success: {done} {_clock(f.elapsed)}{speed}{loss}")


def _trainer_steps(summary: Mapping[str, Any] | None) -> int | None:
    """The optimizer steps of the Trainer's run: steps/s x runtime (its log dicts carry no step)."""
    if not summary or summary.get("train_steps_per_second") is None or summary.get("train_runtime") is None:
        return None
    return round(float(summary["train_steps_per_second"]) * float(summary["train_runtime"]))


def _speed(obs: JobObserver, ds_config: Mapping[str, Any] | None) -> str:
    """ ", 41.2 samples/s (average)": DeepSpeed's running average after its warm-up steps (else its last figure),
    else the csv monitor's sample counter, the Trainer's own figure, the job's own step prints (the first and last
    of those over their arrival times)."""
    if obs.avg_samples_per_sec is not None:
        return f", {obs.avg_samples_per_sec:,.1f} samples/s (average)"
    if obs.samples_per_sec is not None:
        return f", {obs.samples_per_sec:,.1f} samples/s"
    csv_rate = obs.csv_samples_per_sec()
    if csv_rate is not None:
        return f", {csv_rate:,.1f} samples/s (csv monitor)"
    if obs.trainer_summary is not None:
        return f", {float(obs.trainer_summary['train_samples_per_second']):,.1f} samples/s (Trainer)"
    steps_per_s = obs.printed_steps_per_sec()
    if steps_per_s is None:
        return ""
    batch = obs.train_batch_size or (ds_config or {}).get("train_batch_size")
    if isinstance(batch, int) and not isinstance(batch, bool) and batch > 0:
        return f", {steps_per_s * batch:,.1f} samples/s (script prints)"
    return f", {steps_per_s:,.2f} steps/s (script prints)"


def _usage_error(f: EndFacts) -> RunVerdict | None:
    """The script's argument parser refused its arguments (argparse's "PROG: error: ...", click's "Error: ...",
    after their usage, and exit status 2), before any step: its own message says which argument."""
    if not f.obs.usage_errors or f.first_failing_code != USAGE_EXIT_CODE or f.obs.step is not None:
        return None
    prog, line = f.obs.usage_errors[0]
    required = re.search(r"(required: .*|Missing option ')--local[_-]rank", line)
    if required:  # launched without it (--no-local-rank, torchrun, accelerate) by a script that needs it
        advice = [
            "the script requires --local_rank, which only DeepSpeed's launcher passes, and not when told not to: "
            "launch with --local-rank (a folder written by `dswiz config --no-local-rank` leaves it out) and the "
            "DeepSpeed launcher (not torchrun or accelerate), or give the argument a default: "
            "int(os.environ.get('LOCAL_RANK', -1))"
        ]
    elif re.search(r"--(local_rank|local-rank|deepspeed)", line):
        # not the user's: the launcher puts --local_rank=N first on every rank's command line, before the script's
        # own arguments (a subcommand's too), and dswiz adds the config argument
        advice = [
            "every rank gets --local_rank=N first, before the script's own arguments and any subcommand, and the "
            "config argument (--deepspeed_config by default): the script's top-level parser must accept them "
            "(deepspeed.add_config_arguments(parser) adds the DeepSpeed ones; parser.parse_known_args() ignores "
            "what it does not know; a click group needs the options on the group), or pass --config-arg NAME for "
            "the config argument it takes, '' for none"
        ]
        if re.search(
            r"--local[_-]rank", line
        ):  # refused: DeepSpeed's launcher can leave it out (--no_local_rank)
            advice.insert(
                0,
                "pass --no-local-rank to `dswiz launch` (before the script) to leave --local_rank out: each rank "
                "still finds its rank in the LOCAL_RANK environment variable",
            )
    else:
        parser = line.split(": ", 1)[0] if ": error: " in line else prog  # a subcommand's own --help
        advice = [
            "the arguments after the script's path go to the script as given: fix or drop the one it names "
            f"(`python {parser} --help` lists what it takes)"
        ]
    return RunVerdict(
        kind="failed",
        summary=f"the training script refused its arguments before any step: {line}",
        advice=tuple(advice),
        evidence=tuple(line for _, line in f.obs.usage_errors[1:3]),  # the first is in the summary
    )


def _native_abort(f: EndFacts) -> RunVerdict | None:
    if not f.obs.native_aborts:
        return None
    rc = f.first_failing_code
    rank, line = f.obs.native_aborts[0]
    advice = [f"the last lines before it are in {'logs/ranks/' if rank is not None else 'logs/combined.log'}"]
    if f.obs.clean_exits:
        advice.insert(
            0,
            "other ranks finished normally, so this was most likely at shutdown, after training: end the "
            "script with deepspeed.comm.destroy_process_group() (or torch.distributed.destroy_process_group())",
        )
    return RunVerdict(
        kind="failed",
        summary=f"{_who(rank)} aborted in native code{f.at_step} (exit code {rc}{_signal_suffix(rc)}): {line}",
        rank=rank,
        advice=tuple(advice),
        evidence=tuple(text for _, text in f.obs.native_aborts[:3]),
    )


def first_crash(
    deaths: Sequence[RankDeath], rank_codes: Sequence[int], launcher_returncodes: Sequence[int | None]
) -> RankDeath | None:
    """The rank whose crash the death watch read from its zombie (a signal, an exit code: not the SIGTERM or SIGINT
    the launcher then sends the others, nor SIGKILL, which ``_sigkilled`` judges) before any other; None where
    that is not known. Two crashes read in one pass of the watch cannot be told apart. A death at or before it
    whose end the watch could not read (launch.py had reaped it) may be the first: then the crash is named only
    when its code is the one launch.py reported ("exits with return code = N", ``rank_codes``) or, where none
    was, the launcher's own (launch.py exits with its failed rank's code cut to 8 bits, and reports one failed
    rank per node, the first its once-a-second poll finds). Otherwise the watch's order stands, whatever launch.py
    reported: its poll can find a rank that stopped because of the crash first."""
    crashed = sorted((d for d in deaths if d.returncode not in _NOT_A_CAUSE), key=lambda d: d.at)
    if not crashed or (len(crashed) > 1 and crashed[1].at <= crashed[0].at):
        return None
    first = crashed[0]
    assert first.returncode is not None
    if not any(d is not first and d.at <= first.at and d.returncode is None for d in deaths):
        return first
    if rank_codes:
        return first if first.returncode in rank_codes else None
    launched = {rc & 0xFF for rc in launcher_returncodes if rc not in (0, None)}
    return first if first.returncode & 0xFF in launched else None


def _plain_failure(f: EndFacts) -> RunVerdict:
    """No rule named the failure. The rank is named where the death watch read its crash first
    (``first_crash``); launch.py's own line names the last spawned rank's command whichever failed."""
    first = first_crash(f.deaths, f.obs.exit_codes, f.launcher_returncodes)
    if first is not None:
        rc = first.returncode
        return RunVerdict(
            kind="failed",
            summary=f"rank {first.rank} (pid {first.pid}) died{f.at_step} with exit code {rc}{_signal_suffix(rc)} "
            "and no traceback",
            rank=first.rank,
            advice=(
                f"the last lines rank {first.rank} printed are in logs/ranks/ of the run directory "
                "(and logs/combined.log)",
            ),
        )
    rc = f.first_failing_code
    return RunVerdict(
        kind="failed",
        summary=f"the job failed{f.at_step} with exit code {rc}{_signal_suffix(rc)} and no traceback",
        advice=(
            "see logs/combined.log and logs/ranks/ in the run directory for the last lines before it stopped",
        ),
    )


# Most specific first: the first rule that speaks is the verdict (the last always does).
VERDICT_RULES: tuple[Callable[[EndFacts], RunVerdict | None], ...] = (
    _stalled,
    _interrupted,
    _cuda_oom,
    _nccl_timeout,
    # before a silent death: the rank that refused its arguments is one, when the watcher missed its exit status
    _usage_error,
    _sigkilled,
    _rank_exception,
    _finished,
    _native_abort,
    _plain_failure,
)


def _who(rank: int | None) -> str:
    return f"rank {rank}" if rank is not None else "the job"


def _signal_suffix(rc: int | None) -> str:
    if rc is None:
        return ""
    sig = -rc if rc < 0 else (rc - 128 if 128 < rc < 160 else None)
    return f" ({_SIGNAL_NAMES.get(sig, f'signal {sig}')})" if sig else ""


def _overflow_storm(obs: JobObserver) -> int:
    """Skipped steps when they are a storm (many, and a large share of the steps), else 0."""
    skipped = max(obs.skipped, obs.overflows)
    steps = obs.step or 0
    if skipped >= OVERFLOW_STORM_MIN and skipped >= OVERFLOW_STORM_FRACTION * max(steps, 1):
        return skipped
    return 0


def exit_code(
    verdict: RunVerdict,
    launcher_returncodes: Sequence[int | None],
    signal_number: int | None,
    rank_codes: Sequence[int] = (),
    deaths: Sequence[RankDeath] = (),
) -> int:
    """dswiz's exit code: 0 on success, 128+N when stopped by signal N, 124 when stopped by --stall-timeout (as
    timeout(1) does), 137 for a rank killed with SIGKILL, else the job's own code, as a shell reports a process
    (128+N for a rank ended by signal N): the rank's whose crash the death watch read first (``first_crash``),
    else the first that DeepSpeed's launch.py reported (``rank_codes``, its "exits with return code = N" lines),
    else the launcher's own. launch.py exits with its failed rank's code cut to 8 bits (``sys.exit(
    last_return_code)`` in launcher/launch.py, DeepSpeed 0.19.8): a rank that aborted (-6) leaves the launcher's
    250 where the rank's own says SIGABRT, 134. Other launchers (torchrun, accelerate, srun) print no such line:
    their own code is passed on."""
    if verdict.kind == "interrupted" and signal_number is not None:
        return 128 + signal_number
    if verdict.kind == "stalled":
        return STALL_EXIT_CODE
    if verdict.kind in ("host_oom", "killed"):
        return 128 + 9
    crash = first_crash(deaths, rank_codes, launcher_returncodes)
    rc = crash.returncode if crash is not None else first_failing(rank_codes, launcher_returncodes)
    if rc is None:
        return 0 if verdict.kind in ("success", "overflow_storm") else 1
    if rc < 0:
        return 128 + (-rc) if -rc < 128 else 1
    return rc if rc < 256 else 1


def supervisor_error_verdict(error: str, *, step: int | None, elapsed: float, left: int) -> RunVerdict:
    """dswiz itself failed while supervising and stopped the job (``left``: processes still there after it)."""
    at = f" at step {step}" if step is not None else ""
    end = (
        "no process of the job is left" if not left else f"{left} process(es) of the job could not be stopped"
    )
    return RunVerdict(
        kind="supervisor_error",
        summary=f"dswiz failed while supervising ({error}); it stopped the job{at} after {_clock(elapsed)}; {end}",
        advice=(
            "this is a bug in dswiz: please report it with logs/combined.log and the lines under evidence",
            "the job's own output is in logs/ of the run directory",
        ),
    )
