"""The run directory: the contract between `dswiz launch` (which writes it) and `dswiz monitor` (which reads it).

One directory per run, mode 0700, by default under ``$XDG_STATE_HOME/dswiz/runs/<run-id>`` (``~/.local/state``
when unset); ``--run-dir`` chooses another. Layout::

    <run>/run.json            what was run and how it ended (RunRecord, written atomically, updated at the end)
    <run>/config/             copies of the configs the job was launched with (ds_config.json, accelerate.yaml, ...;
                              deepspeed_env when fixes must reach other nodes through DS_ENV_FILE)
    <run>/logs/combined.log   everything the launcher printed (stdout+stderr of the whole job), as it came; with
                              per-rank logs on, the ranks' own output is only in logs/ranks/ (read both)
    <run>/logs/ranks/         DeepSpeed --enable_each_rank_log output (<timestamp>_rank<N>.log)
    <run>/csv/                DeepSpeed csv monitor output (csv_monitor.output_path); job_name "dswiz"
    <run>/metrics.jsonl       one JSON snapshot per interval (the monitor's history; appended)
    <run>/metrics.*.x*.jsonl  older history: archived past 4 MiB, thinned to stay bounded (runner.metrics.rotation)
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from runner import reaper
from wizard.errors import DswizError, quoted

# The parts of the layout the launch command itself names (the builder is pure core and defines them).
from wizard.launch_command import CONFIG_DIR as CONFIG_DIR
from wizard.launch_command import CSV_DIR as CSV_DIR
from wizard.launch_command import CSV_JOB_NAME as CSV_JOB_NAME
from wizard.launch_command import RANK_LOGS_DIR as RANK_LOGS_DIR
from wizard.typed_json import MAX_INT, typed_fields
from wizard.units import whole_number

RUN_JSON = "run.json"
LOGS_DIR = "logs"
COMBINED_LOG = "logs/combined.log"
METRICS_JSONL = "metrics.jsonl"

_RUN_ID_RE = re.compile(r"^\d{8}-\d{6}(-\d+)?$")


def state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "dswiz"


def runs_root() -> Path:
    return state_dir() / "runs"


def new_run_id(root: Path | None = None) -> str:
    """``20261130-013500``, with ``-N`` appended when that second already has a run."""
    root = root or runs_root()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run_id, n = stamp, 1
    while (root / run_id).exists():
        run_id = f"{stamp}-{n}"
        n += 1
    return run_id


def is_run_id(text: str) -> bool:
    return bool(_RUN_ID_RE.match(text))


# ----------------------------------------------------------------------------------------------- run.json

RUN_JSON_VERSION = 1
# RunRecord.status values
STATUS_RUNNING = "running"
STATUS_FINISHED = "finished"  # the job ended by itself (verdict says how)
STATUS_INTERRUPTED = "interrupted"  # dswiz stopped it (Ctrl-C, SIGTERM, SIGHUP, --stall-timeout)
# dswiz died before writing the end: written by its reaper (runner/reaper.py), or seen later from a "running" record
# whose supervisor process is gone.
STATUS_SUPERVISOR_LOST = reaper.STATUS_SUPERVISOR_LOST


@dataclass(frozen=True)
class RunVerdict:
    """How a run ended, in words: ``kind`` is one of VERDICT_KINDS, ``summary`` the one-line sentence."""

    kind: str
    summary: str
    rank: int | None = None  # the rank the verdict is about, when one is
    exception: str | None = None  # "RuntimeError: injected failure …"
    advice: tuple[str, ...] = ()  # what to do next, one sentence each
    evidence: tuple[str, ...] = ()  # the log lines it rests on

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["advice"] = list(self.advice)
        d["evidence"] = list(self.evidence)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunVerdict:
        """Read ``to_dict`` back; DswizError naming a key of the wrong type."""
        if not isinstance(d, Mapping):
            raise _bad("verdict", d, "an object")
        kw = _typed_or_refused(cls, d, skip=("advice", "evidence"), prefix="verdict.")
        return cls(
            **{"kind": "unknown", "summary": "", **kw},
            advice=_strings(d, "advice", "verdict."),
            evidence=_strings(d, "evidence", "verdict."),
        )


@dataclass(frozen=True)
class LauncherProcess:
    """One launcher dswiz started (one per node rank when every node runs here)."""

    argv: tuple[str, ...]
    pid: int
    pgid: int  # == sid: each launcher leads its own session; every process of the job carries it
    node_rank: int | None = None


@dataclass(frozen=True)
class RunRecord:
    """run.json: what was run and how it ended. Written when the job starts, updated as ranks appear and at the
    end. Readers must accept unknown keys (newer writers) and missing optional ones (older writers)."""

    run_id: str
    run_dir: str
    status: str  # STATUS_*
    started_at: float  # epoch seconds
    command: tuple[str, ...]  # the first (usually only) launcher's argv
    command_line: str  # copy-pasteable: env changes + argv
    env_changes: dict[str, str | None] = field(default_factory=dict)
    cwd: str = ""
    launcher: str = "deepspeed"
    script: str = ""
    script_args: tuple[str, ...] = ()
    configs: dict[str, str] = field(default_factory=dict)  # original path -> copy in <run>/config
    config_changes: tuple[str, ...] = ()  # what the copies change, in words
    launchers: tuple[LauncherProcess, ...] = ()
    rank_pids: dict[int, int] = field(default_factory=dict)  # global rank -> pid (from the launcher's lines)
    world_size: int | None = None
    hostname: str | None = None
    dswiz_version: str | None = None
    ended_at: float | None = None
    exit_code: int | None = None  # dswiz's exit code (the job's, or 128+signal when interrupted)
    launcher_exit_codes: tuple[int | None, ...] = ()  # each launcher's own return code (negative: signal)
    interrupted_by: str | None = None  # "SIGINT", "SIGTERM", "SIGHUP"
    verdict: RunVerdict | None = None
    # What the plan predicted (runner.metrics.plan.PlanInfo reads it): from the config folder's dswiz-plan.json.
    plan: dict[str, Any] | None = None
    # Who supervises the run: dswiz's pid and its start time (clock ticks after boot, /proc/PID/stat field 22) on
    # the boot ``boot_id``: a pid alone can be reused. ``job_token`` is in every job process's environment
    # (DSWIZ_JOB_TOKEN); ``reaper_pid`` the process that stops the job if dswiz dies.
    supervisor_pid: int | None = None
    supervisor_start: int | None = None
    boot_id: str | None = None
    job_token: str | None = None
    reaper_pid: int | None = None
    # Where the job runs: its nodes in order (node 0 first; from the hostfile, or the Slurm allocation's) and the
    # scheduler's job ("slurm 4242") when it runs inside one. Empty / None on one machine.
    hosts: tuple[str, ...] = ()
    scheduler_job: str | None = None
    version: int = RUN_JSON_VERSION

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["command"] = list(self.command)
        d["script_args"] = list(self.script_args)
        d["hosts"] = list(self.hosts)
        d["config_changes"] = list(self.config_changes)
        d["launcher_exit_codes"] = list(self.launcher_exit_codes)
        d["launchers"] = [{**asdict(p), "argv": list(p.argv)} for p in self.launchers]
        d["rank_pids"] = {str(k): v for k, v in sorted(self.rank_pids.items())}
        d["verdict"] = self.verdict.to_dict() if self.verdict else None
        return d

    @classmethod
    def from_dict(cls, d: Any) -> RunRecord:
        """Read ``to_dict`` back: unknown keys are ignored, missing optional ones take their defaults; a key of
        the wrong type (``"launchers": 5``) or a missing required one is a DswizError naming it."""
        if not isinstance(d, Mapping):
            raise DswizError(f"{RUN_JSON} holds {type(d).__name__}, not a JSON object", RUN_JSON_FIX)
        kw = _typed_or_refused(cls, d, skip=_STRUCTURED)
        missing = [
            f.name for f in fields(cls) if f.name in _REQUIRED and f.name not in kw and f.name not in d
        ]
        if missing:
            raise DswizError(f"{RUN_JSON} lacks {', '.join(missing)}", RUN_JSON_FIX)
        for name in ("command", "script_args", "config_changes", "hosts"):
            kw[name] = _strings(d, name)
        for name in ("env_changes", "configs"):
            kw[name] = _string_map(d, name, none_ok=name == "env_changes")
        kw["launchers"] = tuple(_launcher(p) for p in _list(d, "launchers"))
        kw["rank_pids"] = _rank_pids(d.get("rank_pids"))
        codes = _list(d, "launcher_exit_codes")
        if not all(c is None or _whole(c) for c in codes):
            raise _bad("launcher_exit_codes", codes, "a list of whole numbers")
        kw["launcher_exit_codes"] = tuple(codes)
        kw["verdict"] = RunVerdict.from_dict(d["verdict"]) if d.get("verdict") is not None else None
        plan = d.get("plan")
        if plan is not None and not isinstance(plan, dict):
            raise _bad("plan", plan, "an object")
        kw["plan"] = plan
        return cls(**kw)


def placement_words(record: RunRecord) -> str:
    """Where this part of the job runs, in words: "node 1 of 2 (gpu01, gpu02), slurm job 4242"; "" on one
    machine outside a scheduler."""
    parts = []
    ranks = sorted({p.node_rank for p in record.launchers if p.node_rank is not None})
    if record.hosts and len(record.hosts) > 1:
        shown = ", ".join(record.hosts[:4]) + (
            f", … {len(record.hosts) - 4} more" if len(record.hosts) > 4 else ""
        )
        here = (
            f"node {', '.join(map(str, ranks))} of {len(record.hosts)}"
            if ranks
            else f"{len(record.hosts)} nodes"
        )
        parts.append(f"{here} ({shown})")
    if record.scheduler_job:
        parts.append(f"{record.scheduler_job.replace(' ', ' job ', 1)}")
    return ", ".join(parts)


def process_start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks after boot (/proc/PID/stat field 22); None when it is not running."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read().decode("ascii", "replace")
        return int(raw[raw.rfind(")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip() or None
    except OSError:
        return None


def supervisor_alive(record: RunRecord) -> bool | None:
    """Is the dswiz that supervises ``record`` still running? None when that cannot be told here (another host,
    or a record from a dswiz that did not write its pid)."""
    if record.supervisor_pid is None or record.supervisor_start is None:
        return None
    import socket  # only here: most readers never ask

    if record.hostname and record.hostname != socket.gethostname():
        return None
    if record.boot_id and record.boot_id != boot_id():
        return False  # the machine rebooted since
    return process_start_ticks(record.supervisor_pid) == record.supervisor_start


def effective_status(record: RunRecord) -> str:
    """run.json's status, except that a "running" run whose dswiz is gone is ``STATUS_SUPERVISOR_LOST``."""
    if record.status == STATUS_RUNNING and supervisor_alive(record) is False:
        return STATUS_SUPERVISOR_LOST
    return record.status


# -------------------------------------------------------------------------------- reading run.json strictly

RUN_JSON_FIX = (
    "run.json is written by `dswiz launch`: restore it from a backup, or pass another run directory "
    "(the run's output is still in its logs/ folder)"
)
_REQUIRED = ("run_id", "run_dir", "status", "started_at", "command", "command_line")
_STRUCTURED = (
    "command",
    "script_args",
    "hosts",
    "config_changes",
    "env_changes",
    "configs",
    "launchers",
    "rank_pids",
    "launcher_exit_codes",
    "verdict",
    "plan",
)


def _bad(key: str, value: Any, expected: str) -> DswizError:
    return DswizError(f"{RUN_JSON}: {key} is {quoted(value)}, not {expected}", RUN_JSON_FIX)


def _whole(value: Any) -> bool:
    return type(value) is int and abs(value) < MAX_INT


def _typed_or_refused(
    cls: type, d: Mapping[str, Any], *, skip: tuple[str, ...], prefix: str = ""
) -> dict[str, Any]:
    """The plain fields of ``cls`` from ``d``; a present, non-null value of another type is refused."""
    kw = typed_fields(cls, d, skip=skip)
    for f in fields(cls):
        if f.name in d and f.name not in skip and f.name not in kw:
            raise _bad(prefix + f.name, d[f.name], f"a {str(f.type).replace(' | None', '')}")
    return kw


def _list(d: Mapping[str, Any], key: str) -> list[Any]:
    value = d.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise _bad(key, value, "a list")
    return value


def _strings(d: Mapping[str, Any], key: str, prefix: str = "") -> tuple[str, ...]:
    value = _list(d, key)
    if not all(isinstance(v, str) for v in value):
        raise _bad(prefix + key, value, "a list of strings")
    return tuple(value)


def _string_map(d: Mapping[str, Any], key: str, *, none_ok: bool) -> dict[str, Any]:
    value = d.get(key)
    if value is None:
        return {}
    ok = isinstance(value, dict) and all(
        isinstance(v, str) or (none_ok and v is None) for v in value.values()
    )
    if not ok:
        raise _bad(key, value, "an object of strings")
    return dict(value)


def _launcher(p: Any) -> LauncherProcess:
    if not isinstance(p, Mapping) or not _whole(p.get("pid")) or p["pid"] <= 0:
        raise _bad("launchers[]", p, 'an object with a positive "pid"')
    pgid = p.get("pgid", p["pid"])
    node_rank = p.get("node_rank")
    argv = p.get("argv") or []
    if not (_whole(pgid) and pgid > 0) or not (node_rank is None or _whole(node_rank)):
        raise _bad("launchers[]", p, 'an object with a positive "pgid" and a whole "node_rank"')
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise _bad("launchers[].argv", argv, "a list of strings")
    return LauncherProcess(argv=tuple(argv), pid=p["pid"], pgid=pgid, node_rank=node_rank)


def _rank_pids(value: Any) -> dict[int, int]:
    if value is None:
        return {}
    pairs = (
        [(whole_number(k) if isinstance(k, str) else None, v) for k, v in value.items()]
        if isinstance(value, dict)
        else None
    )
    if pairs is None or not all(k is not None and k >= 0 and _whole(v) and v > 0 for k, v in pairs):
        raise _bad("rank_pids", value, 'an object of rank -> pid ("0": 4242)')
    return {int(k): v for k, v in pairs if k is not None}


def write_run_record(run_dir: Path | str, record: RunRecord) -> Path:
    """Atomically (temp file + rename, mode 0600) replace ``<run>/run.json``: a reader never sees half a file."""
    path = Path(run_dir) / RUN_JSON
    _replace_text(path, json.dumps(record.to_dict(), indent=2, sort_keys=True) + "\n")
    return path


def _replace_text(path: Path, text: str) -> None:
    """``path`` replaced by ``text`` at once (temp file + fsync + rename, mode 0600): the reaper's rule, which
    writes run.json too when dswiz died."""
    reaper.replace_text(str(path), text)


def read_run_record(run_dir: Path | str) -> RunRecord:
    """Read ``<run>/run.json``; DswizError naming the problem when it is missing or unreadable."""
    path = Path(run_dir) / RUN_JSON
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return RunRecord.from_dict(data)
    except FileNotFoundError as e:
        raise DswizError(f"{path} does not exist", "pass a run directory made by `dswiz launch`") from e
    except DswizError as e:
        raise DswizError(f"{path}: {e.problem.removeprefix(RUN_JSON + ': ')}", e.fix) from None
    except (OSError, ValueError, RecursionError) as e:
        raise DswizError(f"{path} cannot be read ({str(e)[:100]})", RUN_JSON_FIX) from None


def write_private_file(path: Path | str, text: str) -> None:
    """Write a new file in the run directory, mode 0600 (configs and env files can hold secrets); an existing file
    is refused (one run, nothing overwritten)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)


def make_run_dir(path: Path | str) -> Path:
    """Create the run directory (mode 0700: logs and configs can hold secrets) and its sub-folders.

    An existing non-empty directory is refused: one directory per run, nothing overwritten.
    """
    path = Path(path)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise DswizError(
            f"run directory {path} already exists and is not empty",
            "choose a new --run-dir (or leave it out: dswiz makes a fresh one per run)",
        )
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(path, 0o700)
        for sub in (CONFIG_DIR, LOGS_DIR, RANK_LOGS_DIR, CSV_DIR):
            (path / sub).mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as e:
        raise DswizError(
            f"cannot create run directory {path}: {e.strerror}", "choose a writable --run-dir"
        ) from e
    _remember_elsewhere(path)
    return path


# A run made with --run-dir outside the runs root is listed here (one absolute path per line), so that `dswiz
# monitor` without a target still finds the latest run wherever it was made.
ELSEWHERE_INDEX = "elsewhere.txt"
# Only the newest lines are read (one line per run made elsewhere); past twice as many the file is cut back to them.
_ELSEWHERE_KEEP = 200


def _remember_elsewhere(path: Path) -> None:
    root = runs_root()
    try:
        where = path.resolve()
        if where.parent == root.resolve():
            return
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        index = root / ELSEWHERE_INDEX
        with index.open("a", encoding="utf-8") as f:
            f.write(f"{where}\n")
        lines = index.read_text(encoding="utf-8", errors="replace").splitlines()  # at most 2 x KEEP paths
        if len(lines) > 2 * _ELSEWHERE_KEEP:  # (a line another launch appends meanwhile may be lost)
            _replace_text(index, "".join(f"{line}\n" for line in lines[-_ELSEWHERE_KEEP:]))
    except OSError:
        pass  # only `dswiz monitor` without a target misses the run: never a reason to fail a launch


def run_dirs_elsewhere(root: Path) -> list[Path]:
    """The run directories made outside ``root`` that still exist (newest entries last; unreadable index: none)."""
    try:
        lines = (root / ELSEWHERE_INDEX).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    seen: dict[str, None] = {}
    for line in lines[-_ELSEWHERE_KEEP:]:
        if line.startswith("/") and "\0" not in line:
            seen.pop(line, None)
            seen[line] = None
    return [p for p in map(Path, seen) if p.is_dir()]
