"""`dswiz probe`: run the planner's top strategies for a few steps each on this machine, keep the fastest measured.

Each candidate goes the way a user's run goes: ``dswiz config --yes`` writes its files (every strategy field as an
explicit flag, ``steps_per_print`` 1 so each step is timed), ``dswiz launch --no-tui`` starts it through the real
launcher and records it in the run history (as source "probe"). The probe watches the run's metrics.jsonl and,
once the run has ``steps`` timed steps after its warm-up, stops it the way a user would (SIGINT to dswiz launch,
which stops the job cleanly and writes its verdict). A candidate that runs out of memory is a result ("oom"), not a
failure of the probe. The winner is written with ``dswiz config``'s writers into the output folder.

Processes: each ``dswiz launch`` child gets the kernel's parent-death signal (SIGTERM when the probe dies, however
it dies), and dswiz launch never leaves its job behind; Ctrl-C reaches the child too (same process group), and the
probe waits for it to stop its job before it exits.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from runner.metrics.history import iter_metrics
from runner.run_history import SOURCE_ENV, measured
from runner.rundir import METRICS_JSONL, RUN_JSON, read_run_record
from wizard.config.sidecar import PlanSidecar, config_command, read_sidecar
from wizard.errors import DswizError
from wizard.history.record import Figures, strategy_lineage
from wizard.planner import Candidate, Plan, PlanRequest, plan
from wizard.replan import planned_request
from wizard.service.history import with_history
from wizard.strategy import Strategy

DSWIZ = (sys.executable, "-m", "wizard")
PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class ProbeSetup:
    script: str
    script_args: tuple[str, ...]
    work_dir: Path  # candidates' configs and run directories go here
    out_dir: Path  # the winner's config set
    top: int = 3
    steps: int = 5  # timed steps per candidate, after the warm-up
    warmup_steps: int = 2
    timeout_s: float = 900.0  # per candidate, from start to its last timed step
    launch_args: tuple[str, ...] = ()  # --python, --nproc, --config-arg, --launcher ... for dswiz launch
    request: PlanRequest | None = None  # what the planner is asked; None: the sidecar's sequence and batch
    use_history: bool = True  # rank by predictions the run history corrected (False: --no-history)


@dataclass(frozen=True)
class ProbeResult:
    candidate: Candidate
    status: str  # "ok", "oom", "failed"
    measured: Figures = field(default_factory=Figures)
    run_dir: Path | None = None
    summary: str = ""  # the launch's verdict, in words

    def to_json(self) -> dict[str, Any]:
        p = self.candidate.predicted
        return {
            "strategy": self.candidate.strategy.to_dict(),
            "label": self.candidate.label,
            "predicted": {"tokens_per_sec": p.tokens_per_sec, "peak_gpu_bytes": p.gpu_bytes},
            "measured": {
                "tokens_per_sec": self.measured.tokens_per_sec,
                "peak_gpu_bytes": self.measured.peak_gpu_bytes,
                "step_time_s": self.measured.step_time_s,
                "steps": self.measured.steps,
            },
            "status": self.status,
            "run_dir": str(self.run_dir) if self.run_dir else None,
            "verdict": self.summary,
        }


def distinct_candidates(p: Plan, top: int) -> list[Candidate]:
    """The best ``top`` fitting candidates of different kinds (stage, offloads, checkpointing, ZeRO++), best first:
    three micro-batch variants of one strategy would measure the same thing three times. Kinds that do the same
    work on these GPUs (``record.family_group``: on one GPU, ZeRO stages 0-2 without offload) count once until
    every other group has its best candidate in, so that the runs teach the calibration about more than one kind of
    work; the rest of the places go to the next kinds in rank order."""
    fitting = [c for c in p.candidates if c.fits]
    best: dict[tuple[object, ...], Candidate] = {}
    for c in fitting:
        best.setdefault(c.strategy.kind, c)
    kinds = list(best.values())  # the best of each kind, in rank order
    groups: set[str] = set()
    first: list[Candidate] = []
    for c in kinds:
        g = _group(c.strategy)
        if g not in groups:
            groups.add(g)
            first.append(c)
    chosen = first[:top]
    chosen += [c for c in kinds if c not in chosen][: top - len(chosen)]
    return sorted(chosen, key=p.candidates.index)


def _group(s: Strategy) -> str:
    _, group = strategy_lineage(s)
    return group + ("-zero++" if s.uses_zeropp else "") + f"-{s.precision}"


def plan_for(sidecar: PlanSidecar, request: PlanRequest | None = None, *, use_history: bool = True) -> Plan:
    """The plan the candidates come from: the user's planning flags (without them, the allocator the base config
    was planned for) and the optimizer its config makes DeepSpeed build, at the sequence the base config planned,
    calibrated by the run history of the sidecar's hardware unless ``use_history`` is False."""
    base = replace(
        planned_request(sidecar, request), seq_len=sidecar.seq_len, global_batch=sidecar.global_batch
    )
    return plan(sidecar.hardware, sidecar.model, with_history(base, sidecar.hardware, use=use_history))


def write_base_config(config_args: Sequence[str], out: Path) -> PlanSidecar:
    """``dswiz config --yes`` with the user's planning flags into ``out``: the sidecar every candidate starts from."""
    proc = _dswiz(["config", "--yes", *config_args, "--out", str(out), "--force"])
    sidecar = read_sidecar(out) if proc.returncode == 0 else None
    if sidecar is None:
        raise _child_error(
            proc,
            "dswiz config could not plan the probe",
            "run the same `dswiz config --yes --model ...` to see why, fix it, then probe again",
        )
    return sidecar


def write_candidate(
    sidecar: PlanSidecar, strategy: Strategy, out: Path, *, steps_per_print: int | None
) -> None:
    argv = config_command(sidecar, strategy, str(out), program=())  # "config --yes ..." without a program
    if steps_per_print is not None:
        argv += ["--steps-per-print", str(steps_per_print)]
    proc = _dswiz(argv)
    if proc.returncode != 0:
        raise _child_error(
            proc,
            f"dswiz config could not write {out}",
            "run `dswiz config` with these flags to see why: " + " ".join(argv),
        )


def _dswiz(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*DSWIZ, *argv], capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600, check=False
    )


def _child_error(proc: subprocess.CompletedProcess[str], what: str, fix: str) -> DswizError:
    """The error of a `dswiz config` child, said once: its own "error: ... / fix: ..." when it printed one (it was
    wrapped whole inside ours, "error: ...: error: ... / fix: ..."), else its last lines with ``fix``."""
    own = _own_error(proc.stderr or proc.stdout or "")
    if own is None:
        return DswizError(f"{what}: {_last_lines(proc.stderr or proc.stdout)}", fix)
    problem, own_fix = own
    return DswizError(f"{what}: {problem}", own_fix or fix)


def _own_error(text: str) -> tuple[str, str | None] | None:
    """The last ``error: PROBLEM`` a dswiz child printed, with its ``fix: FIX`` (wizard.cli prints a DswizError so)."""
    lines = [ln.strip() for ln in text.splitlines()]
    problem = next((ln.removeprefix("error: ") for ln in reversed(lines) if ln.startswith("error: ")), None)
    if problem is None:
        return None
    return problem, next((ln.removeprefix("fix: ") for ln in reversed(lines) if ln.startswith("fix: ")), None)


def _last_lines(text: str, n: int = 3) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return " / ".join(lines[-n:]) or "no output"


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the probe dies (Linux prctl; elsewhere nothing)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass


class _StepWatch:
    """Reads a growing metrics.jsonl from where it left off: the highest timed step so far."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.timed_step = 0

    def poll(self) -> int:
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except OSError:
            return self.timed_step
        end = chunk.rfind(b"\n") + 1
        self.offset += end
        for line in chunk[:end].splitlines():
            try:
                data = json.loads(line)
            except ValueError:
                continue
            step = data.get("step") if isinstance(data, dict) else None
            timed = isinstance(data, dict) and isinstance(data.get("tokens_per_sec"), (int, float))
            if timed and isinstance(step, int) and not isinstance(step, bool):
                self.timed_step = max(self.timed_step, step)
        return self.timed_step


def run_candidate(
    setup: ProbeSetup,
    config_dir: Path,
    run_dir: Path,
    *,
    say: Callable[[str], None],
    clock: Callable[[], float] = time.monotonic,
) -> tuple[str, Figures, str]:
    """Launch one written candidate, stop it after its timed steps; (status, measured, verdict summary)."""
    argv = [
        *DSWIZ, "launch", "--no-tui", "--config", str(config_dir), "--run-dir", str(run_dir),
        *setup.launch_args, setup.script, *setup.script_args,
    ]  # fmt: skip
    env = {**os.environ, SOURCE_ENV: "probe"}
    log = (run_dir.parent / f"{run_dir.name}.out").open("w", encoding="utf-8")
    with log:
        child = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
            preexec_fn=_die_with_parent,
        )  # fmt: skip
        try:
            _watch_until_done(setup, child, _StepWatch(run_dir / METRICS_JSONL), say=say, clock=clock)
        except BaseException:  # Ctrl-C or anything else: the child stops its job before we go
            _stop(child, grace_s=30.0)
            raise
    return _result(run_dir)


def _watch_until_done(
    setup: ProbeSetup,
    child: subprocess.Popen[bytes],
    watch: _StepWatch,
    *,
    say: Callable[[str], None],
    clock: Callable[[], float],
) -> None:
    want = setup.warmup_steps + setup.steps
    deadline = clock() + setup.timeout_s
    while child.poll() is None:
        step = watch.poll()
        if step >= want:
            say(f"  {step} steps measured: stopping it")
            _stop(child, grace_s=60.0)
            return
        if clock() > deadline:
            say(f"  no {want} timed steps within {setup.timeout_s:.0f} s: stopping it")
            _stop(child, grace_s=60.0)
            return
        time.sleep(0.5)


def _stop(child: subprocess.Popen[bytes], *, grace_s: float) -> None:
    """SIGINT (dswiz launch stops its job cleanly and writes the verdict), then SIGTERM, then SIGKILL."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        if child.poll() is not None:
            return
        child.send_signal(sig)
        try:
            child.wait(grace_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _launch_refusal(out_file: Path) -> str | None:
    """dswiz launch's own refusal in its output (``_own_error``), as one line."""
    try:
        own = _own_error(out_file.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return None
    if own is None:
        return None
    problem, fix = own
    return problem + (f" (fix: {fix})" if fix else "")


def _result(run_dir: Path) -> tuple[str, Figures, str]:
    figures = measured(iter_metrics(run_dir / METRICS_JSONL))
    if not (run_dir / RUN_JSON).exists():
        refusal = _launch_refusal(run_dir.parent / f"{run_dir.name}.out")
        if refusal is not None:
            return "failed", figures, f"dswiz launch refused it: {refusal}"
        return "failed", figures, "dswiz launch stopped before the job started (see the .out file beside it)"
    try:
        record = read_run_record(run_dir)
    except DswizError as e:
        return "failed", figures, e.problem
    verdict = record.verdict
    summary = verdict.summary if verdict else "no verdict"
    if verdict is not None and verdict.kind in ("cuda_oom", "host_oom"):
        return "oom", figures, summary
    if figures.tokens_per_sec is not None and (verdict is None or verdict.kind in ("success", "interrupted")):
        return "ok", figures, summary
    return "failed", figures, summary


def probe(
    setup: ProbeSetup, sidecar: PlanSidecar, *, say: Callable[[str], None]
) -> tuple[list[ProbeResult], int | None]:
    """Every candidate measured; the index of the fastest that ran (None: none did). The winner is written."""
    candidates = distinct_candidates(
        plan_for(sidecar, setup.request, use_history=setup.use_history), setup.top
    )
    if not candidates:
        raise DswizError(
            "the planner has no fitting strategy to probe", "run `dswiz plan` with the same flags to see why"
        )
    results: list[ProbeResult] = []
    for i, cand in enumerate(candidates):
        config_dir, run_dir = setup.work_dir / f"candidate-{i}", setup.work_dir / f"run-{i}"
        say(f"[{i + 1}/{len(candidates)}] {cand.label}, micro-batch {cand.strategy.micro_batch_size}")
        write_candidate(sidecar, cand.strategy, config_dir, steps_per_print=1)
        status, figures, summary = run_candidate(setup, config_dir, run_dir, say=say)
        tps = f"{figures.tokens_per_sec:,.0f} tokens/s" if figures.tokens_per_sec else "no speed measured"
        say(f"  {status}: {tps} ({summary})")
        results.append(ProbeResult(cand, status, figures, run_dir, summary))
    ran = [i for i, r in enumerate(results) if r.status == "ok" and r.measured.tokens_per_sec]
    if not ran:
        return results, None
    chosen = max(ran, key=lambda i: results[i].measured.tokens_per_sec or 0.0)
    write_candidate(sidecar, results[chosen].candidate.strategy, setup.out_dir, steps_per_print=None)
    return results, chosen
