"""Self-calibration: the runs of this hardware correct the planner's predictions, shrunk toward the prior.

The planner's physics has free constants (per-family efficiency, bandwidths, allocator overhead) fitted on a few
machines. A run on the user's own machine measures the truth for one strategy family; the correction for a family
is the geometric mean of measured/predicted over its finished runs, shrunk toward 1 (the prior) by
``n / (n + PRIOR_RUNS)`` so one noisy run moves the prediction only part of the way, and clamped to bounds a real
machine cannot leave (a GPU does not run twice as fast as its physics says, nor does memory shrink below what the
model states need). A family with no runs of its own takes its group's correction (families that do the same work
on these GPUs, ``record.family_group``), else that of the runs of its class (host-bound: stage 3 or offload; GPU-
bound: the rest, ``record.host_bound_family``), else the hardware-wide one. Host-bound runs of another host CPU are
left out: the host sets their speed. A run is host-bound by its family, or where the planner predicted a quarter
of its step or more on the host (``Measurement.host_bound``: micro-batch 1-2 of a ~1B model at any stage). Speed is
corrected by regime: such a run of a GPU-bound family teaches that family's (and group's) host-bound candidates and
the host-bound class, never its GPU-bound candidates nor the GPU-bound class -- the same config read up to 1.78x
apart from one process to the next there, where the GPU-bound ones repeat within a few per cent. Memory does not
depend on the host: every run of a family teaches its memory.

Errors are judged leave-one-out (each run predicted from the others) when there are at least two runs, so "error
after" is what a new run can expect, not the fit to itself.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from wizard.history.record import Measurement, host_bound_family

# A run stopped by the user (or by `dswiz probe` once it has its timed steps) measured as much as one that ended.
MEASURED_OUTCOMES = ("success", "interrupted")
# The prior counts as this many runs: (a run's noise / the physics' error)^2, the weight a normal prior and normal
# measurements give. A run's steady tokens/s repeats within ~1-2 % on one machine (on one H200, ZeRO-1 and ZeRO-2,
# the same work there, measured 50,433 / 50,394 and 35,964 / 36,465 tokens/s: bench/results/probe_calibration-*.md),
# while the physics misses a family it was not fitted to by 5-20 % (the same files): one run deserves more weight
# than the prior. 0.5 rather than the (0.02/0.08)^2 ~ 0.06 those figures give, because runs on one machine can
# share an error (a loaded host) that the next run will not have. It was 2, which left 2/3 of a one-run family's
# error in place.
PRIOR_RUNS = 0.5
# A family without runs of its own takes the hardware-wide correction whole: what runs on this machine teach first
# is the machine (its clocks, power cap, driver), which moves every family alike. Borrowing less would rank the
# families nobody measured above the one that was measured for no physical reason.
BORROW_WEIGHT = 1.0
TOKENS_BOUNDS = (0.5, 1.5)  # throughput corrections outside this are a broken measurement, not the machine
# A run whose measured/predicted ratio is outside this measured something else (another model, a throttled or
# shared GPU, a wrong record): it is left out, not clamped, and the plan says how many were.
PLAUSIBLE_RATIO = (1 / 3, 3.0)
# Memory is mostly exact arithmetic (only the allocator/context terms are free), and the history may only raise it:
# a prediction shrunk below the physics eats the safety margin (an OOM), one raised costs at most a smaller batch.
# In the H200 replay a factor of 0.967 turned gpt2-xl's -4.4 % into -7.6 % (bench/results/calibration_replay-*.md).
MEMORY_BOUNDS = (1.0, 1.2)


# How the plan's notes about the history begin (``Corrections.summary``): front doors show them wherever a plan
# shapes what they write.
HISTORY_NOTE_PREFIXES = ("calibrated by ", "run history not used")


@dataclass(frozen=True)
class Factor:
    value: float = 1.0
    runs: int = 0
    error_before: float | None = None  # median |predicted - measured| / measured over the runs
    error_after: float | None = None  # the same after the correction (leave-one-out from 2 runs)


@dataclass(frozen=True)
class FamilyCorrection:
    tokens_per_sec: Factor = Factor()
    peak_gpu_bytes: Factor = Factor()


@dataclass(frozen=True)
class Corrections:
    """What the history says about one hardware key; empty when it has no usable runs."""

    hardware_key: str = ""
    families: Mapping[str, FamilyCorrection] | None = None
    groups: Mapping[str, FamilyCorrection] | None = None  # record.family_group: families doing the same work
    # "host-bound" / "gpu-bound" (record.host_bound_family, or the run's prediction): a family without runs of its own
    # or of its group borrows from its class before the hardware-wide figure
    classes: Mapping[str, FamilyCorrection] | None = None
    # tokens/s by the regime its runs ran in: (family or group, "host-bound" / "gpu-bound") -> the factor those runs
    # give (``families`` and ``groups`` hold every run's, for memory)
    family_speeds: Mapping[tuple[str, str], Factor] | None = None
    group_speeds: Mapping[tuple[str, str], Factor] | None = None
    overall: FamilyCorrection = FamilyCorrection()
    problem: str = ""  # why the history could not be read (then nothing is corrected)
    left_out: int = (
        0  # runs of this hardware whose figures were implausible (PLAUSIBLE_RATIO, above the card)
    )
    stale: int = (
        0  # runs predicted by other physics that could not be predicted again (wizard.service.history)
    )

    @property
    def runs(self) -> int:
        return max(self.overall.tokens_per_sec.runs, self.overall.peak_gpu_bytes.runs)

    def for_family(
        self, family: str, group: str | None = None, *, host_bound: bool = False
    ) -> FamilyCorrection:
        """The family's own correction; else its group's (``record.family_group``: on one GPU, ZeRO-1 teaches ZeRO-2);
        else its class's (a GPU-bound family never takes a ZeRO-3 or offload run's host speed), borrowed; else, for
        a host-bound family, the hardware-wide one, borrowed. Speed by the candidate's regime: ``host_bound``, a
        candidate the planner puts a quarter of its step or more on the host (throughput.host_bound), takes its
        family's or group's host-bound runs first and, without any, their runs as a whole; a GPU-bound candidate
        never takes a host-bound run's speed (without GPU-bound runs to learn from, the physics). A factor of no runs
        (a class whose runs all ran out of memory measured no speed) is no evidence: the next one is taken."""
        regime = "host-bound" if host_bound else _class(family)
        own = (self.families or {}).get(family)
        kin = (self.groups or {}).get(group or "")
        speeds = [
            (self.family_speeds or {}).get((family, regime)),
            (self.group_speeds or {}).get((group or "", regime)),
        ]
        if regime != _class(family):  # a host-bound candidate of a GPU-bound family
            speeds += [own.tokens_per_sec if own else None, kin.tokens_per_sec if kin else None]
        speed = _first(*speeds)
        if speed is None:
            kind = (self.classes or {}).get(_class(family))
            fallback = [kind.tokens_per_sec if kind else None]
            if host_bound or _class(family) == "host-bound":
                fallback.append(self.overall.tokens_per_sec)
            speed = _borrowed(_first(*fallback) or Factor(), TOKENS_BOUNDS)
        memory = _first(own.peak_gpu_bytes if own else None, kin.peak_gpu_bytes if kin else None)
        if memory is None:
            kind = (self.classes or {}).get(_class(family))
            memory = _borrowed(
                _first(kind.peak_gpu_bytes if kind else None, self.overall.peak_gpu_bytes) or Factor(),
                MEMORY_BOUNDS,
            )
        return FamilyCorrection(speed, memory)

    def summary(self) -> str | None:
        """One line for the plan's output ("calibrated by 3 runs on this hardware; median error ...")."""
        if self.problem:
            return self.problem
        if self.runs == 0:
            if not self.stale:
                return None
            return (
                f"run history not used: its {self.stale} run{'s' * (self.stale != 1)} on this hardware were predicted by "
                "an older dswiz and hold no model spec to predict them again (`dswiz probe` records new ones)"
            )
        text = f"calibrated by {self.runs} run{'s' * (self.runs != 1)} on this hardware (dswiz history)"
        errors = [
            f"{what} {f.error_before:.0%} -> {f.error_after:.0%}"
            for what, f in (
                ("tokens/s", self.overall.tokens_per_sec),
                ("GPU memory", self.overall.peak_gpu_bytes),
            )
            if f.error_before is not None and f.error_after is not None
        ]
        if errors:
            leave = " (each run predicted from the others)" if self.runs > 1 else " (the run's fit to itself)"
            text += "; median error " + ", ".join(errors) + leave
        if self.left_out:
            text += f"; {self.left_out} implausible run{'s' * (self.left_out != 1)} left out"
        if self.stale:
            text += f"; {self.stale} run{'s' * (self.stale != 1)} predicted by an older dswiz left out"
        return text + "; --no-history plans from the physics alone"


def corrections(records: Iterable[Measurement], hardware_key: str, host_cpu: str = "") -> Corrections:
    """The corrections the runs of ``hardware_key`` give (host-bound runs -- ``Measurement.host_bound`` -- only from
    ``host_cpu``, where both it and the run's are known). Finished (or probe-stopped) runs teach tokens/s and memory;
    a run that ran out of GPU memory teaches memory only: it needed at least the whole card, so the prediction that let
    it start was too low."""
    mine = [
        r
        for r in records
        if r.hardware.key == hardware_key
        and not (r.host_bound and host_cpu and r.hardware.host_cpu and r.hardware.host_cpu != host_cpu)
    ]
    usable = [r for r in mine if r.outcome in MEASURED_OUTCOMES or r.outcome == "oom"]
    if not usable:
        return Corrections(hardware_key=hardware_key, families={})
    plausible = [r for r in usable if _plausible(r)]
    by_family: dict[str, list[Measurement]] = {}
    by_group: dict[str, list[Measurement]] = {}
    by_class: dict[str, list[Measurement]] = {}
    family_regime: dict[tuple[str, str], list[Measurement]] = {}
    group_regime: dict[tuple[str, str], list[Measurement]] = {}
    for r in plausible:
        by_family.setdefault(r.family, []).append(r)
        by_group.setdefault(r.group, []).append(r)
        # a run the planner put on the host teaches the host-bound class, never the GPU-bound one, whatever its family
        regime = "host-bound" if r.host_bound else _class(r.family)
        by_class.setdefault(regime, []).append(r)
        family_regime.setdefault((r.family, regime), []).append(r)
        group_regime.setdefault((r.group, regime), []).append(r)
    return Corrections(
        hardware_key=hardware_key,
        families={fam: _family(runs) for fam, runs in by_family.items()},
        groups={g: _family(runs) for g, runs in by_group.items()},
        classes={c: _family(runs) for c, runs in by_class.items()},
        family_speeds=_speeds(family_regime),
        group_speeds=_speeds(group_regime),
        overall=_family(plausible),
        left_out=len(usable) - len(plausible),
    )


def _speeds(runs: Mapping[tuple[str, str], list[Measurement]]) -> dict[tuple[str, str], Factor]:
    """The tokens/s factor of each key's runs, where they measured any (an OOM measures memory only)."""
    factors = {key: _family(rs).tokens_per_sec for key, rs in runs.items()}
    return {key: f for key, f in factors.items() if f.runs}


def _class(family: str) -> str:
    return "host-bound" if host_bound_family(family) else "gpu-bound"


def _family(runs: Sequence[Measurement]) -> FamilyCorrection:
    return FamilyCorrection(
        _factor(
            [
                _pair(r.predicted.tokens_per_sec, r.measured.tokens_per_sec)
                for r in runs
                if r.outcome != "oom"
            ],
            TOKENS_BOUNDS,
        ),
        _factor([_pair(r.predicted.peak_gpu_bytes, _memory_needed(r)) for r in runs], MEMORY_BOUNDS),
    )


def _memory_needed(r: Measurement) -> float | None:
    """What the run needed per GPU: its measured peak; for an OOM at least the whole card."""
    if r.outcome == "oom":
        card = r.hardware.gpu_memory_bytes
        return max(float(card or 0), float(r.measured.peak_gpu_bytes or 0)) or None
    return None if r.measured.peak_gpu_bytes is None else float(r.measured.peak_gpu_bytes)


def _plausible(r: Measurement) -> bool:
    """No figure that no run of this machine can have: a ratio outside PLAUSIBLE_RATIO, or (for a finished run)
    more GPU memory than the card holds."""
    card = r.hardware.gpu_memory_bytes
    peak = r.measured.peak_gpu_bytes
    if r.outcome != "oom" and card and peak and peak > card:
        return False
    for pair in (
        _pair(r.predicted.tokens_per_sec, r.measured.tokens_per_sec),
        _pair(r.predicted.peak_gpu_bytes, _memory_needed(r)),
    ):
        if pair is not None and not PLAUSIBLE_RATIO[0] <= pair[1] / pair[0] <= PLAUSIBLE_RATIO[1]:
            return False
    return True


def _pair(predicted: float | None, measured: float | None) -> tuple[float, float] | None:
    if predicted is None or measured is None or predicted <= 0 or measured <= 0:
        return None
    return float(predicted), float(measured)


def shrunk_factor(log_ratios: list[float], bounds: tuple[float, float]) -> float:
    """exp(mean log(measured/predicted) x n/(n+prior)), clamped to ``bounds``; 1.0 with no evidence."""
    if not log_ratios:
        return 1.0
    n = len(log_ratios)
    value = math.exp(statistics.fmean(log_ratios) * n / (n + PRIOR_RUNS))
    return min(max(value, bounds[0]), bounds[1])


def _factor(pairs: list[tuple[float, float] | None], bounds: tuple[float, float]) -> Factor:
    clean = [p for p in pairs if p is not None]
    if not clean:
        return Factor()
    logs = [math.log(m / p) for p, m in clean]
    value = shrunk_factor(logs, bounds)
    before = statistics.median(abs(p - m) / m for p, m in clean)
    if len(clean) >= 2:  # leave-one-out: each run predicted with the factor the others give
        after_errs = []
        for i, (p, m) in enumerate(clean):
            f = shrunk_factor(logs[:i] + logs[i + 1 :], bounds)
            after_errs.append(abs(p * f - m) / m)
        after = statistics.median(after_errs)
    else:
        after = abs(clean[0][0] * value - clean[0][1]) / clean[0][1]
    return Factor(value=value, runs=len(clean), error_before=before, error_after=after)


def _first(*factors: Factor | None) -> Factor | None:
    """The first factor that some run gave."""
    return next((f for f in factors if f is not None and f.runs), None)


def _borrowed(f: Factor, bounds: tuple[float, float]) -> Factor:
    if f.runs == 0:
        return Factor()
    value = math.exp(math.log(f.value) * BORROW_WEIGHT)
    return Factor(value=min(max(value, bounds[0]), bounds[1]), runs=0)
