"""A job's log lines, fuzzed: the formats DeepSpeed, the launcher, torch and the Trainer print
(docs/log-formats.md), with their numbers replaced by 5,000-digit ones, negatives, inf/nan, and their text by
brackets and control characters. Every reader of lines (the event parser, the traceback collector, the two folders,
the phase tracker, the aggregator) takes any line without an exception."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from runner.logfold import ConfigDumpFolder, InterruptTracebackFolder
from runner.metrics.aggregate import Aggregator
from runner.metrics.parse import parse_line
from runner.metrics.plan import PlanInfo
from runner.phases import PhaseTracker
from runner.tracebacks import TracebackCollector

from . import fuzz_support as fz

TEMPLATES = [
    "[Rank {n}] hello",
    "[rank{n}]: Traceback (most recent call last):",
    '[rank{n}]:   File "train.py", line {n}, in main',
    "[rank{n}]: RuntimeError: boom",
    "[2026-11-30 01:42:31,989] [INFO] [timer.py:264:stop] epoch={n}/micro_step={n}/global_step={n}, "
    "RunningAvgSamplesPerSec={f}, CurrSamplesPerSec={f}, MemAllocated={f}GB, MaxMemAllocated={f}GB",
    "[2026-11-30 01:42:31,989] [INFO] [logging.py:107:log_dist] [Rank {n}] step={n}, skipped={n}, lr=[{f}], "
    "mom=[({f}, {f})]",
    "[Rank {n}] time (ms) | fwd: {f} | bwd: {f}",
    "[deepspeed] OVERFLOW! Rank {n} Skipping step. Attempted loss scale: {n}, reducing to {n}",
    "[deepspeed] OVERFLOW! Rank {n} Skipping step. Attempted loss scale: {n}, but hysteresis is {n}",
    "[2026-11-30 01:42:31,989] [INFO] [launch.py:1:main] process {n} spawned with command: ['python', "
    "'--local_rank={n}']",
    "[2026-11-30 01:42:31,989] [ERROR] [launch.py:1:sigkill_handler] ['python'] exits with return code = {n}",
    "[2026-11-30 01:42:31,989] [INFO] [launch.py:1:main] Process {n} exits successfully.",
    "dist_world_size={n}",
    "[2026-11-30 01:42:31,989] [INFO] [config.py:1:print]   train_batch_size ............. {n}",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {f} GiB. GPU {n} has a total capacity of "
    "{f} GiB of which {f} MiB is free.",
    "RuntimeError: can't allocate memory: you tried to allocate {n} bytes.",
    "[Rank {n}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={n}, OpType=ALLREDUCE, "
    "NumelIn=1, NumelOut=1, Timeout(ms)={n}) ran for {n} milliseconds before timing out.",
    "{{'loss': {f}, 'learning_rate': {f}, 'epoch': {f}, 'step': {n}}}",
    "{{'loss': '{f}', 'grad_norm': '{f}'}}",
    "Time to load fused_adam op: {f} seconds",
    "[2026-11-30 01:42:31,989] [INFO] [config.py:1:print_user_config]   json = {{",
    "Traceback (most recent call last):",
    "KeyboardInterrupt",
]
numbers = st.sampled_from([fz.HUGE_DIGITS, "0", "1", "-1", "9" * 30, "007"]) | st.integers(0, 10**25).map(str)
floats = st.sampled_from(["inf", "nan", "-inf", "1e400", fz.HUGE_DIGITS + ".5", "0.5", "-0.0"]) | numbers
junk = st.text(max_size=6) | st.sampled_from(["[x]", "[/]", "\r", "\x1b[31m", "\x00", "{", "}"])


@st.composite
def log_lines(draw: st.DrawFn) -> str:
    if draw(st.integers(0, 9)) == 0:
        return draw(st.text(max_size=40))
    template = draw(st.sampled_from(TEMPLATES))
    line = template.replace("{n}", "\0N").replace("{f}", "\0F").replace("{{", "{").replace("}}", "}")
    parts = line.split("\0")
    out = parts[0]
    for part in parts[1:]:
        out += draw(numbers if part[0] == "N" else floats) + part[1:]
    if draw(st.booleans()):
        i = draw(st.integers(0, len(out)))
        out = out[:i] + draw(junk) + out[i:]
    return out


def check_event_values(line: str) -> None:
    event = fz.total(parse_line, line)
    if event is None:
        return
    fz.holds(
        event.rank is None or (type(event.rank) is int and abs(event.rank) < 2**31), f"rank {event.rank!r}"
    )
    for key, value in event.values.items():
        if isinstance(value, float):
            fz.holds(math.isfinite(value), f"{event.kind}.{key} is finite")
        if isinstance(value, int) and not isinstance(value, bool):
            fz.holds(abs(value) < 2**63, f"{event.kind}.{key}={value} is bounded")


@fz.fuzz_settings(1250)
@given(lines=fz.batch(log_lines()), rank=st.none() | st.integers(0, 3))
def test_every_line_reader_takes_any_line(lines: list[str], rank: int | None) -> None:
    collector, dump, interrupts = TracebackCollector(), ConfigDumpFolder(), InterruptTracebackFolder()
    phases = PhaseTracker(0.0, optimizer_op="fused_adam")
    agg = Aggregator(PlanInfo(global_batch_size=8, seq_len=16, flops_per_token=1e6, total_steps=10))
    for i, line in enumerate(fz.cases(lines)):
        check_event_values(line)
        event = fz.total(parse_line, line, default_rank=rank)
        fz.total(collector.feed, line, default_rank=rank)
        fz.total(dump.feed, line, rank)
        fz.total(interrupts.feed, line, rank)
        fz.total(phases.feed, line, float(i), kind=event.kind if event else None)
        if event is not None:
            fz.total(agg.add_events, [event], float(i))
            fz.total(agg.snapshot, float(i))
    dump.flush()
    interrupts.flush()


def test_a_five_thousand_digit_rank_is_a_plain_line() -> None:
    line = "[Rank " + fz.HUGE_DIGITS + "] hello"
    assert parse_line(line) is None
    assert TracebackCollector.key_of("[rank" + fz.HUGE_DIGITS + "]: x") == (None, None)
