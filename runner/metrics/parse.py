"""Pure parsers for what a running DeepSpeed job prints: one log line in, one ``LogEvent`` (or None) out.

The formats, re-checked against the DeepSpeed 0.19.8 source files named with each (docs/log-formats.md has them
with examples):
- logger prefix ``[2026-11-30 01:42:31,989] [INFO] [timer.py:264:stop] msg`` (``utils/logging.py``, LoggerFactory's
  formatter); ``log_dist``
  puts ``[Rank N] `` in front of msg;
- ``epoch=0/micro_step=5/global_step=5, RunningAvgSamplesPerSec=…, CurrSamplesPerSec=…, MemAllocated=0.4GB,
  MaxMemAllocated=0.4GB`` (``utils/timer.py``, ThroughputTimer.stop; "GB" there means GiB);
- ``step=5, skipped=0, lr=[0.001], mom=[(0.9, 0.999)]`` (``runtime/engine.py`` _report_progress);
- ``[Rank 0] time (ms) | fwd: 12.00 | bwd: 31.17`` (``utils/timer.py`` SynchronizedWallClockTimer.log, a print);
- ``[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768`` (fp16 loss scaler);
- launcher ``process 6010 spawned with command: [...]``, ``[...] exits with return code = -9``,
  ``Process 6010 exits successfully.``, ``Main process received SIGTERM, exiting``, ``dist_world_size=2``
  (``launcher/launch.py``);
- PyTorch ``CUDA out of memory. Tried to allocate 2.00 GiB``, NCCL ``Watchdog caught collective operation timeout``;
- a script's own progress prints, ``step 5 loss 10.78`` and the like (``runner/metrics/prints.py``), tried when
  nothing else matched;
- HF-Trainer style dicts ``{'loss': 3.21, 'learning_rate': 0.001, 'epoch': 0.1}`` (transformers 5 prints floats as
  strings: ``{'loss': '3.21'}``), also train_tiny's ``'step'`` key.

Every function here is total: any string in, an event or None out, never an exception (fuzzed in
tests/unit/test_fuzz_logs.py). Numbers are bounded: an integer of more than 18 digits (``MAX_INT``), a rank outside
``MAX_RANK`` or a byte size above 1 EiB is noise, not a value: the field becomes None, or the line is not
recognised when the number is what makes it an event (docs/input-bounds.md).
The event kinds and their ``values`` keys are a contract (the launcher builds exit verdicts on them): extend
additively, never rename.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from runner.metrics.prints import parse_progress_print
from runner.tracebacks import MAX_RANK, TORCH_RANK_PREFIX_RE, rank_number
from wizard.units import MAX_SIZE, whole_number

# kind -> the keys its ``values`` may carry (documentation and a test guard; values may omit unknown ones).
EVENT_KEYS: dict[str, tuple[str, ...]] = {
    "log": ("level", "source", "message"),
    "throughput": (
        "epoch",
        "micro_step",
        "global_step",
        "running_avg_samples_per_sec",
        "curr_samples_per_sec",
        "mem_allocated_bytes",
        "max_mem_allocated_bytes",
    ),
    "step": ("step", "skipped", "lr", "mom"),
    "timers": ("timers_ms",),
    "overflow": ("attempted_scale", "new_scale", "hysteresis"),
    "spawn": ("pid", "local_rank", "argv"),
    "exit": ("pid", "return_code"),
    "signal": ("signal",),
    "world": ("world_size",),
    "ds_config": ("key", "value"),
    "oom": ("device", "tried_bytes", "gpu", "total_bytes", "free_bytes"),
    "nccl_timeout": ("op", "timeout_ms", "ran_ms", "seq"),
    "loss": ("loss", "learning_rate", "epoch", "step", "grad_norm", "eval_loss", "train_loss", "form"),
    "exception": ("type", "message"),
}
KINDS = tuple(EVENT_KEYS)

MAX_LINE = 64 * 1024  # longer lines are cut before parsing: a runaway line must not cost a runaway parse
MAX_INT = 10**18  # integers in a line (steps, pids, scales, bytes) below this; beyond it a number is noise


@dataclass(frozen=True)
class LogEvent:
    """One recognised line. ``values`` holds the numbers of the line (keys per kind in EVENT_KEYS; read-only by
    convention). ``rank`` is the global rank when the line says it (``[Rank N]``, ``[rankN]:``) or the caller knows
    it (per-rank log files); ``timestamp`` is epoch seconds from the DeepSpeed logger prefix (local time)."""

    kind: str
    values: Mapping[str, Any] = field(default_factory=dict)
    raw: str = ""
    rank: int | None = None
    timestamp: float | None = None
    level: str | None = None


_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_PREFIX_RE = re.compile(
    r"^\[(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:,\d+)?)\] \[(?P<lvl>[A-Z]+)\] "
    r"\[(?P<src>[^:\]]+):(?P<line>\d+):(?P<fn>[^\]]+)\] (?P<msg>.*)$"
)
_DIST_RANK_RE = re.compile(r"^\[Rank (?P<rank>-?\d+)\] (?P<msg>.*)$")
# A logger record that starts inside a line: ranks run under ``python -u`` write a print's text and its newline in
# two writes to the pipe they share with the launcher, and a record written between them lands on the print's line.
_GLUED_RECORD_RE = re.compile(
    r"(?<=.)(?=\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:,\d+)?\] \[[A-Z]+\] \[[^:\]]+:\d+:)"
)
_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?inf|nan"

_THROUGHPUT_RE = re.compile(
    r"epoch=(?P<epoch>\d+)/micro_step=(?P<micro>\d+)/global_step=(?P<step>\d+), "
    rf"RunningAvgSamplesPerSec=(?P<avg>{_NUM}), CurrSamplesPerSec=(?P<curr>{_NUM})"
    rf"(?:, MemAllocated=(?P<mem>{_NUM})GB, MaxMemAllocated=(?P<maxmem>{_NUM})GB)?"
)
_STEP_RE = re.compile(
    r"(?:^|\s)step=(?P<step>\d+), skipped=(?P<skipped>\d+), lr=(?P<lr>\[.*?\])(?:, mom=(?P<mom>.*))?$"
)
_TIMER_ITEM_RE = re.compile(rf"\| ([^|:]+?): ({_NUM})")
_OVERFLOW_RE = re.compile(r"\[deepspeed\] OVERFLOW!(?: Rank (?P<rank>\d+))? Skipping step\.(?P<rest>.*)$")
_SCALE_RE = re.compile(r"Attempted loss scale: (?P<att>\d+), reducing to (?P<new>\d+)")
_HYST_RE = re.compile(r"Attempted loss scale: (?P<att>\d+), but hysteresis is (?P<h>\d+)")
_SPAWN_RE = re.compile(r"process (?P<pid>\d+) spawned with command: (?P<cmd>.*)$")
_LOCAL_RANK_RE = re.compile(r"--local[_-]rank[= ](?P<lr>\d+)")
_EXIT_FAIL_RE = re.compile(r"exits with return code = (?P<rc>-?\d+)(?!\d)")
_EXIT_OK_RE = re.compile(r"Process (?P<pid>\d+) exits successfully\.")
_SIGNAL_RE = re.compile(r"Main process received (?P<sig>SIG[A-Z]+), exiting")
_WORLD_RE = re.compile(r"^dist_world_size=(?P<n>\d+)\s*$")
_DSCONFIG_RE = re.compile(r"^  (?P<key>[a-z_0-9]+) (?:\.+ |\s+)(?P<value>\S.*)$")
_SIZE = r"[\d.]+ ?[KMGT]?i?B"  # a size as torch prints it in OOM messages: "20.00 MiB", "79.19 GiB"
_OOM_RE = re.compile(rf"(?P<dev>CUDA|HIP|XPU|NPU|MPS) out of memory\. Tried to allocate (?P<size>{_SIZE})")
_OOM_GPU_NEW_RE = re.compile(
    rf"GPU (?P<gpu>\d+) has a total capacity of (?P<total>{_SIZE}) of which (?P<free>{_SIZE}) is free"
)
_OOM_GPU_OLD_RE = re.compile(
    rf"\(GPU (?P<gpu>\d+); (?P<total>{_SIZE}) total capacity;.*?(?P<free>{_SIZE}) free"
)
_OOM_CPU_RE = re.compile(r"can't allocate memory: you tried to allocate (?P<bytes>\d+) bytes")
_NCCL_RE = re.compile(r"Watchdog caught collective operation timeout")
_NCCL_DETAIL_RE = re.compile(
    r"SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+).*?Timeout\(ms\)=(?P<timeout>\d+)\) ran for (?P<ran>\d+) milliseconds"
)
_EXCEPTION_RE = re.compile(
    r"^(?P<type>(?:[A-Za-z_][\w]*\.)*[A-Z][\w]*(?:Error|Exception|Interrupt|Exit))(?:: (?P<msg>.*))?$"
)
_DICT_START_RE = re.compile(r"\{['\"]")
_LOSS_KEYS = ("loss", "eval_loss", "train_loss")

_UNIT = {"B": 1, "KB": 1024, "KiB": 1024, "MB": 1024**2, "MiB": 1024**2, "GB": 1024**3, "GiB": 1024**3}
_UNIT.update({"TB": 1024**4, "TiB": 1024**4})


def parse_line(line: str, *, default_rank: int | None = None) -> LogEvent | None:
    """Recognise one line of a job's output. None for lines that carry nothing dswiz reads.

    ``default_rank`` is the rank of the file the line came from (per-rank logs); a rank in the line wins.
    Progress-bar carriage returns are handled: the segments of a ``\\r``-joined line are tried last first; so are
    logger records that start inside a line (a launcher record written between a rank's print and its newline).
    """
    if not isinstance(line, str):
        return None
    text = _ANSI_RE.sub("", line[:MAX_LINE]).rstrip("\n")
    segments = [p for s in text.split("\r") for p in _split_glued_records(s) if p.strip()]
    for segment in reversed(segments):
        event = _parse_segment(segment.rstrip(), default_rank)
        if event is not None:
            return event
    return None


def _split_glued_records(segment: str) -> list[str]:
    """The logger records of one line, apart (usually one). A torch ``[rankN]:`` prefix stays with its record."""
    parts = _GLUED_RECORD_RE.split(segment)
    if len(parts) > 1 and TORCH_RANK_PREFIX_RE.fullmatch(parts[0]):
        parts = [parts[0] + parts[1], *parts[2:]]
    return parts


def _parse_segment(text: str, default_rank: int | None) -> LogEvent | None:
    rank = default_rank
    timestamp: float | None = None
    level: str | None = None
    source: str | None = None
    msg = text
    m = TORCH_RANK_PREFIX_RE.match(msg)
    if m:
        rank, msg = rank_number(m.group("rank"), rank), msg[m.end() :]
    m = _PREFIX_RE.match(msg)
    if m:
        timestamp = _parse_timestamp(m.group("ts"))
        level, source, msg = m.group("lvl"), m.group("src"), m.group("msg")
    m = _DIST_RANK_RE.match(msg)
    if m:
        rank, msg = rank_number(m.group("rank"), rank), m.group("msg")
    found = _recognise(msg, source)
    if found is None:  # nothing of DeepSpeed's: the script's own progress print? (runner/metrics/prints.py)
        printed = parse_progress_print(msg)
        found = ("loss", printed) if printed is not None else None
    if found is None:
        if level is None:
            return None
        found = ("log", {"level": level, "source": source, "message": msg})
    kind, values = found
    if kind == "overflow" and values.get("rank") is not None:
        rank = values.pop("rank")
    values.pop("rank", None)
    if kind == "nccl_timeout" and rank is None:
        m = re.search(r"\[Rank (\d+)\]", msg)
        rank = rank_number(m.group(1), None) if m else None
    return LogEvent(kind=kind, values=values, raw=text, rank=rank, timestamp=timestamp, level=level)


def _recognise(msg: str, source: str | None) -> tuple[str, dict[str, Any]] | None:
    # Cheapest and most frequent first; each branch is guarded by a substring test before any regex.
    if "time (ms)" in msg:
        return _timers(msg)
    if "global_step=" in msg:
        return _throughput(msg)
    if "skipped=" in msg:
        return _step(msg)
    # The launcher's records before the script's dict prints: a launcher that prints (not logs) its record can
    # have a rank's dict print land before its newline (parse_line splits off the opposite order). A lost spawn line
    # is a rank dswiz never watches; a lost loss print is one point of the curve.
    if "spawned with command" in msg:
        found = _spawn(msg)
        if found is not None:
            return found
    if "exits with return code" in msg or "exits successfully" in msg:
        found = _exit(msg)
        if found is not None:
            return found
    if "{" in msg and "}" in msg:
        found = _loss_dict(msg)
        if found is not None:
            return found
    if "OVERFLOW!" in msg:
        return _overflow(msg)
    if "out of memory" in msg or "can't allocate memory" in msg:
        return _oom(msg)
    if "Watchdog caught collective operation timeout" in msg:
        return _nccl(msg)
    if "Main process received" in msg:
        m = _SIGNAL_RE.search(msg)
        return ("signal", {"signal": m.group("sig")}) if m else None
    if msg.startswith("dist_world_size="):
        m = _WORLD_RE.match(msg)
        n = _int(m.group("n")) if m else None
        return ("world", {"world_size": n}) if n is not None and n <= MAX_RANK else None
    if source == "config.py":
        m = _DSCONFIG_RE.match(msg)
        return ("ds_config", {"key": m.group("key"), "value": m.group("value").strip()}) if m else None
    if ("Error" in msg or "Exception" in msg or "Interrupt" in msg) and source is None:
        m = _EXCEPTION_RE.match(msg.strip())
        if m:
            return ("exception", {"type": m.group("type"), "message": m.group("msg") or ""})
    return None


def _timers(msg: str) -> tuple[str, dict[str, Any]] | None:
    idx = msg.find("time (ms)")
    items = _TIMER_ITEM_RE.findall(msg[idx:])
    if not items:
        return None
    timers = {}
    for name, value in items:
        number = _float(value)
        if number is not None:
            timers[name.strip()] = number
    return ("timers", {"timers_ms": timers}) if timers else None


def _throughput(msg: str) -> tuple[str, dict[str, Any]] | None:
    m = _THROUGHPUT_RE.search(msg)
    if not m:
        return None
    step = _int(m.group("step"))
    if step is None:
        return None
    values: dict[str, Any] = {
        "epoch": _int(m.group("epoch")),
        "micro_step": _int(m.group("micro")),
        "global_step": step,
        "running_avg_samples_per_sec": _positive(m.group("avg")),
        "curr_samples_per_sec": _positive(m.group("curr")),
    }
    for key, group in (("mem_allocated_bytes", "mem"), ("max_mem_allocated_bytes", "maxmem")):
        gib = _float(m.group(group)) if m.group(group) else None
        values[key] = _bytes(gib * 1024**3) if gib is not None and gib >= 0 else None
    return "throughput", values


def _step(msg: str) -> tuple[str, dict[str, Any]] | None:
    m = _STEP_RE.search(msg)
    if not m:
        return None
    lr = tuple(x for x in (_float(t) for t in re.findall(_NUM, m.group("lr"))) if x is not None)
    mom_text = m.group("mom") or ""
    mom = tuple(x for x in (_float(t) for t in re.findall(_NUM, mom_text)) if x is not None)
    step, skipped = _int(m.group("step")), _int(m.group("skipped"))
    if step is None or skipped is None:
        return None
    return "step", {"step": step, "skipped": skipped, "lr": lr, "mom": mom}


def _overflow(msg: str) -> tuple[str, dict[str, Any]] | None:
    m = _OVERFLOW_RE.search(msg)
    if not m:
        return None
    values: dict[str, Any] = {"attempted_scale": None, "new_scale": None, "hysteresis": None}
    if m.group("rank") is not None:
        values["rank"] = rank_number(m.group("rank"), None)
    rest = m.group("rest")
    s = _SCALE_RE.search(rest)
    if s:
        values["attempted_scale"], values["new_scale"] = _int(s.group("att")), _int(s.group("new"))
    h = _HYST_RE.search(rest)
    if h:
        values["attempted_scale"], values["hysteresis"] = _int(h.group("att")), _int(h.group("h"))
    return "overflow", values


def _spawn(msg: str) -> tuple[str, dict[str, Any]] | None:
    m = _SPAWN_RE.search(msg)
    if not m:
        return None
    cmd = m.group("cmd")
    argv: tuple[str, ...] = ()
    try:
        parsed = ast.literal_eval(cmd) if len(cmd) < 16384 else None
        if isinstance(parsed, list) and all(isinstance(a, str) for a in parsed):
            argv = tuple(parsed)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        argv = ()
    lr = _LOCAL_RANK_RE.search(cmd)
    pid = _int(m.group("pid"))
    if pid is None:
        return None
    return "spawn", {
        "pid": pid,
        "local_rank": rank_number(lr.group("lr"), None) if lr else None,
        "argv": argv,
    }


def _exit(msg: str) -> tuple[str, dict[str, Any]] | None:
    m = _EXIT_OK_RE.search(msg)
    if m and _int(m.group("pid")) is not None:
        return "exit", {"pid": _int(m.group("pid")), "return_code": 0}
    m = _EXIT_FAIL_RE.search(msg)
    if m and _int(m.group("rc")) is not None:
        # launch.py prints the *last spawned* command here, not the failed one: no pid, no rank to trust.
        return "exit", {"pid": None, "return_code": _int(m.group("rc"))}
    return None


def _oom(msg: str) -> tuple[str, dict[str, Any]] | None:
    m = _OOM_RE.search(msg)
    if m:
        values: dict[str, Any] = {
            "device": m.group("dev").lower(),
            "tried_bytes": _size(m.group("size")),
            "gpu": None,
            "total_bytes": None,
            "free_bytes": None,
        }
        g = _OOM_GPU_NEW_RE.search(msg) or _OOM_GPU_OLD_RE.search(msg)
        if g:
            values.update(
                gpu=rank_number(g.group("gpu"), None),
                total_bytes=_size(g.group("total")),
                free_bytes=_size(g.group("free")),
            )
        return "oom", values
    m = _OOM_CPU_RE.search(msg)
    if m:
        return "oom", {"device": "cpu", "tried_bytes": _bytes(_int(m.group("bytes"))), "gpu": None}
    return None


def _nccl(msg: str) -> tuple[str, dict[str, Any]]:
    values: dict[str, Any] = {"op": None, "timeout_ms": None, "ran_ms": None, "seq": None}
    m = _NCCL_DETAIL_RE.search(msg)
    if m:
        values.update(
            op=m.group("op"),
            timeout_ms=_int(m.group("timeout")),
            ran_ms=_int(m.group("ran")),
            seq=_int(m.group("seq")),
        )
    return "nccl_timeout", values


def _loss_dict(msg: str) -> tuple[str, dict[str, Any]] | None:
    start = _DICT_START_RE.search(msg)
    end = msg.rfind("}")
    if not start or end <= start.start() or end - start.start() > 8192:
        return None
    try:
        parsed = ast.literal_eval(msg[start.start() : end + 1])
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return None
    if not isinstance(parsed, dict) or not any(k in parsed for k in _LOSS_KEYS):
        return None
    values: dict[str, Any] = {}
    for key, value in parsed.items():
        if not isinstance(key, str):
            continue
        number = _number(value)
        if number is not None:
            values[key] = number
    if not any(k in values for k in _LOSS_KEYS):
        return None
    if "step" in values:
        step = values["step"]
        if abs(step) < MAX_INT:
            values["step"] = int(step)
        else:
            del values["step"]
    return "loss", values


def _number(value: object) -> float | int | None:
    """A dict value as a number: ints stay ints, floats and numeric strings ('2.123', transformers 5) -> float."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if abs(value) < MAX_INT else None
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str) and len(value) < 64:
        return _float(value)
    return None


def _float(text: str) -> float | None:
    try:
        value = float(text)
    except (ValueError, OverflowError):
        return None
    return value if math.isfinite(value) else None


def _positive(text: str) -> float | None:
    value = _float(text)
    return value if value is not None and value >= 0 else None


def _size(text: str) -> int | None:
    m = re.match(r"([\d.]+) ?([KMGT]?i?B)$", text.strip())
    if not m or m.group(2) not in _UNIT:
        return None
    number = _float(m.group(1))
    return _bytes(number * _UNIT[m.group(2)]) if number is not None else None


def _int(text: str) -> int | None:
    return whole_number(text, limit=MAX_INT)


def _bytes(n: float | int | None) -> int | None:
    """A byte count, when it is one (1 EiB at most)."""
    return int(n) if n is not None and 0 <= n <= MAX_SIZE else None


def _parse_timestamp(text: str) -> float | None:
    try:
        return datetime.strptime(text.replace(",", "."), "%Y-%m-%d %H:%M:%S.%f").timestamp()
    except ValueError:
        try:
            return datetime.strptime(text, "%Y-%m-%d %H:%M:%S").timestamp()
        except ValueError:
            return None
