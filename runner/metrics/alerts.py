"""Alert rules: pure functions of what the aggregator knows (``AlertFacts``) -> ``Alert``s, worst first.

Each rule says what is happening and what to do about it, in one sentence. Thresholds live in ``AlertThresholds``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from runner.metrics.snapshot import Alert, GpuState
from wizard.units import fmt_bytes


@dataclass(frozen=True)
class AlertThresholds:
    gpu_memory_fraction: float = 0.95  # used/total at or above: OOM risk
    above_prediction_margin: float = 0.05  # job memory above predicted peak by more than this fraction
    below_prediction_margin: float = 0.25  # steady tokens/s below the predicted by more than this fraction
    drift_min_step: int = 10  # judge throughput only past the warm-up (compilation, allocator growth)
    host_ram_fraction: float = 0.95
    stall_factor: float = 5.0  # no progress for k x the median gap between progress observations
    stall_min_seconds: float = 60.0  # never sooner than this (the first steps, checkpoint saves)
    gpu_busy_percent: float = 50.0  # mean utilisation at or above: GPUs busy ("hang"), else idle ("stall")
    overflow_storm_count: int = 5  # overflow events within overflow_window_s
    overflow_window_s: float = 120.0
    skipped_fraction: float = 0.2  # skipped steps / steps over the recent window
    straggler_ratio: float = 0.5  # a rank below this x the others' median activity...
    straggler_min_activity: float = 30.0  # ...while the others' median is at least this (percent)
    straggler_samples: int = 3  # ...for this many consecutive samples


@dataclass(frozen=True)
class Failure:
    kind: str  # "oom", "nccl_timeout", "exception"
    rank: int | None
    text: str
    gpu: int | None = None


@dataclass(frozen=True)
class AlertFacts:
    now: float
    running: bool  # the job is (believed) alive
    exit_codes: tuple[int, ...] = ()  # non-zero return codes seen (launcher lines or process watching)
    gpus: tuple[GpuState, ...] = ()
    host_ram_used_bytes: int | None = None
    host_ram_total_bytes: int | None = None
    host_ram_peak_bytes: int | None = None
    step: int | None = None
    last_progress_at: float | None = None
    median_progress_gap_s: float | None = None
    overflow_times: tuple[float, ...] = ()
    min_loss_scale_hit: bool = False
    skipped_recent: tuple[int, int] | None = None  # (skipped steps, steps) over the recent window
    rank_activity: tuple[dict[int, float], ...] = ()  # recent samples, oldest first: rank -> busy percent
    activity_unit: str = "GPU utilisation"
    failures: tuple[Failure, ...] = field(default=())
    tokens_per_sec: float | None = None
    predicted_tokens_per_sec: float | None = None


_SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


def evaluate(facts: AlertFacts, t: AlertThresholds | None = None) -> tuple[Alert, ...]:
    t = t or AlertThresholds()
    alerts: list[Alert] = []
    alerts += _failures(facts)
    alerts += _exits(facts)
    alerts += _gpu_memory(facts, t)
    alerts += _host_ram(facts, t)
    alerts += _stall(facts, t)
    alerts += _overflow(facts, t)
    alerts += _straggler(facts, t)
    alerts += _throughput_drift(facts, t)
    return tuple(
        sorted(alerts, key=lambda a: (_SEVERITY_ORDER.get(a.severity, 3), a.code, a.rank or -1, a.gpu or -1))
    )


def _failures(f: AlertFacts) -> list[Alert]:
    out: list[Alert] = []
    seen: set[str] = set()
    for fail in f.failures:
        if fail.kind in seen:  # one alert per kind: the first is the cause, the rest are echoes
            continue
        seen.add(fail.kind)
        who = f"rank {fail.rank}" if fail.rank is not None else "a rank"
        if fail.kind == "oom":
            msg = (
                f"{who} ran out of GPU memory ({fail.text}): lower the micro-batch, turn on activation checkpointing, "
                "or use a higher ZeRO stage / offload (dswiz plan shows what fits)"
            )
        elif fail.kind == "nccl_timeout":
            msg = (
                f"{who} hit an NCCL collective timeout ({fail.text}): a rank stopped or diverged; read the first "
                "rank's error above it, and check the network (NCCL_DEBUG=INFO)"
            )
        else:
            msg = f"{who} raised {fail.text}"
        out.append(Alert(fail.kind, "error", msg, rank=fail.rank, gpu=fail.gpu))
    return out


def _exits(f: AlertFacts) -> list[Alert]:
    if not f.exit_codes:
        return []
    if -9 in f.exit_codes or 137 in f.exit_codes:
        peak = ""
        if f.host_ram_peak_bytes and f.host_ram_total_bytes:
            peak = f" (host RAM peaked at {fmt_bytes(f.host_ram_peak_bytes)} of {fmt_bytes(f.host_ram_total_bytes)})"
        return [
            Alert(
                "host_oom_kill",
                "error",
                "a rank was killed by SIGKILL (exit -9), usually the kernel's OOM killer"
                + peak
                + ": reduce CPU "
                "offload or pinned memory, or run fewer ranks per node (dmesg shows the kill)",
            )
        ]
    code = next(c for c in f.exit_codes if c != 0)
    return [Alert("exit", "error", f"the job exited with code {code}: the first error in the log says why")]


def _gpu_memory(f: AlertFacts, t: AlertThresholds) -> list[Alert]:
    out: list[Alert] = []
    for g in f.gpus:
        frac = g.memory_fraction
        used = g.job_memory_bytes if g.job_memory_bytes is not None else g.memory_used_bytes
        # A card the plan filled on purpose is not at risk while the job stays within the predicted peak: the
        # planner sized the micro-batch to that peak, and the peak is what an allocation spike would exceed.
        as_planned = (
            g.predicted_peak_bytes is not None
            and used is not None
            and used <= g.predicted_peak_bytes * (1 + t.above_prediction_margin)
        )
        if frac is not None and frac >= t.gpu_memory_fraction and not as_planned:
            out.append(
                Alert(
                    "oom_risk",
                    "warning",
                    f"GPU {g.index} memory at {frac:.0%} of {fmt_bytes(g.memory_total_bytes)}: an allocation spike "
                    "will OOM; lower the micro-batch or offload",
                    gpu=g.index,
                )
            )
        if (
            g.predicted_peak_bytes
            and used is not None
            and used > g.predicted_peak_bytes * (1 + t.above_prediction_margin)
        ):
            out.append(
                Alert(
                    "above_prediction",
                    "warning",
                    f"GPU {g.index} uses {fmt_bytes(used)}, above the predicted peak "
                    f"{fmt_bytes(g.predicted_peak_bytes)}: the plan underestimated; leave more margin",
                    gpu=g.index,
                )
            )
    return out


def _throughput_drift(f: AlertFacts, t: AlertThresholds) -> list[Alert]:
    """Steady tokens/s well below the plan's: something the plan did not see (a slower link, a busy GPU, data
    loading) costs real time; the history records it, and the next plan on this hardware is calibrated by it."""
    if not f.running or f.step is None or f.step < t.drift_min_step:
        return []
    got, want = f.tokens_per_sec, f.predicted_tokens_per_sec
    if not got or not want or got >= want * (1 - t.below_prediction_margin):
        return []
    return [
        Alert(
            "below_prediction",
            "info",
            f"{got:,.0f} tokens/s, {1 - got / want:.0%} below the plan's {want:,.0f}: check GPU utilisation and "
            "the data loader; this run calibrates the next `dswiz plan` on this hardware",
        )
    ]


def _host_ram(f: AlertFacts, t: AlertThresholds) -> list[Alert]:
    if not f.running or f.host_ram_used_bytes is None or not f.host_ram_total_bytes:
        return []
    frac = f.host_ram_used_bytes / f.host_ram_total_bytes
    if frac < t.host_ram_fraction:
        return []
    return [
        Alert(
            "host_ram",
            "warning",
            f"host RAM at {frac:.0%} of {fmt_bytes(f.host_ram_total_bytes)}: the OOM killer may end a rank; "
            "reduce CPU offload / pinned buffers",
        )
    ]


def _stall(f: AlertFacts, t: AlertThresholds) -> list[Alert]:
    if not f.running or f.last_progress_at is None or f.step is None:
        return []
    threshold = max(t.stall_min_seconds, t.stall_factor * (f.median_progress_gap_s or 0.0))
    idle_for = f.now - f.last_progress_at
    if idle_for < threshold:
        return []
    utils = [g.utilization for g in f.gpus if g.utilization is not None]
    mean = sum(utils) / len(utils) if utils else None
    if mean is not None and mean >= t.gpu_busy_percent:
        return [
            Alert(
                "hang",
                "error",
                f"no step for {idle_for:.0f} s after step {f.step} while the GPUs are busy ({mean:.0f} %): likely "
                "a stuck collective; `py-spy dump --pid <rank pid>` shows where each rank waits",
            )
        ]
    state = f"the GPUs are idle ({mean:.0f} %)" if mean is not None else "no GPU utilisation is visible"
    return [
        Alert(
            "stall",
            "warning",
            f"no step for {idle_for:.0f} s after step {f.step} and {state}: data loading, I/O, a checkpoint save "
            "or a dead rank",
        )
    ]


def _overflow(f: AlertFacts, t: AlertThresholds) -> list[Alert]:
    if f.min_loss_scale_hit:
        return [
            Alert(
                "overflow_storm",
                "error",
                "fp16 loss scale fell to its minimum: training is diverging; use bf16, lower the learning rate, "
                "or clip gradients",
            )
        ]
    recent = [x for x in f.overflow_times if f.now - x <= t.overflow_window_s]
    skipped_storm = False
    if f.skipped_recent is not None:
        skipped, steps = f.skipped_recent
        skipped_storm = steps > 0 and skipped >= 3 and skipped / steps >= t.skipped_fraction
    if len(recent) < t.overflow_storm_count and not skipped_storm:
        return []
    what = f"{len(recent)} fp16 overflows in {t.overflow_window_s:.0f} s" if recent else "many skipped steps"
    if f.skipped_recent and f.skipped_recent[1]:
        what += f" ({f.skipped_recent[0]} of the last {f.skipped_recent[1]} steps skipped)"
    return [
        Alert(
            "overflow_storm",
            "warning",
            f"{what}: steps are being skipped; use bf16 if the GPU has it, or lower the initial loss scale / lr",
        )
    ]


def _straggler(f: AlertFacts, t: AlertThresholds) -> list[Alert]:
    if not f.running or len(f.rank_activity) < t.straggler_samples:
        return []
    window = f.rank_activity[-t.straggler_samples :]
    ranks = set(window[0])
    for sample in window[1:]:
        ranks &= set(sample)
    if len(ranks) < 2:
        return []
    slow_everywhere: set[int] | None = None
    for sample in window:
        slow = set()
        for r in ranks:
            others = sorted(sample[o] for o in ranks if o != r)
            median = _median(others)
            if median >= t.straggler_min_activity and sample[r] < t.straggler_ratio * median:
                slow.add(r)
        slow_everywhere = slow if slow_everywhere is None else slow_everywhere & slow
    return [
        Alert(
            "straggler",
            "warning",
            f"rank {r} is much less busy than the others ({f.activity_unit} {window[-1][r]:.0f} vs "
            f"{_median([window[-1][o] for o in ranks if o != r]):.0f}): it is waiting on something the others are "
            "not (data, CPU, a slower GPU or link)",
            rank=r,
        )
        for r in sorted(slow_everywhere or ())
    ]


def _median(values: Sequence[float]) -> float:
    s = sorted(values)
    n = len(s)
    if n == 0:
        return 0.0
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
