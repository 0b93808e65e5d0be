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
import tempfile
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from wizard.errors import DswizError

# The parts of the layout the launch command itself names (the builder is pure core and defines them).
from wizard.launch_command import CONFIG_DIR as CONFIG_DIR
from wizard.launch_command import CSV_DIR as CSV_DIR
from wizard.launch_command import CSV_JOB_NAME as CSV_JOB_NAME
from wizard.launch_command import RANK_LOGS_DIR as RANK_LOGS_DIR

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
# dswiz died before writing the end: written by its reaper (runner/job/reaper.py, which cannot import this module
# and spells it itself), or seen later from a "running" record whose supervisor process is gone.
STATUS_SUPERVISOR_LOST = "supervisor_lost"


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
    def from_dict(cls, d: dict[str, Any]) -> RunVerdict:
        return cls(
            kind=str(d.get("kind", "unknown")),
            summary=str(d.get("summary", "")),
            rank=d.get("rank"),
            exception=d.get("exception"),
            advice=tuple(d.get("advice") or ()),
            evidence=tuple(d.get("evidence") or ()),
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
    version: int = RUN_JSON_VERSION

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["command"] = list(self.command)
        d["script_args"] = list(self.script_args)
        d["config_changes"] = list(self.config_changes)
        d["launcher_exit_codes"] = list(self.launcher_exit_codes)
        d["launchers"] = [{**asdict(p), "argv": list(p.argv)} for p in self.launchers]
        d["rank_pids"] = {str(k): v for k, v in sorted(self.rank_pids.items())}
        d["verdict"] = self.verdict.to_dict() if self.verdict else None
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunRecord:
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        kw["command"] = tuple(d.get("command") or ())
        kw["script_args"] = tuple(d.get("script_args") or ())
        kw["config_changes"] = tuple(d.get("config_changes") or ())
        kw["launcher_exit_codes"] = tuple(d.get("launcher_exit_codes") or ())
        kw["launchers"] = tuple(
            LauncherProcess(
                argv=tuple(p.get("argv") or ()),
                pid=int(p["pid"]),
                pgid=int(p.get("pgid", p["pid"])),
                node_rank=p.get("node_rank"),
            )
            for p in d.get("launchers") or ()
        )
        kw["rank_pids"] = {int(k): int(v) for k, v in (d.get("rank_pids") or {}).items()}
        kw["verdict"] = RunVerdict.from_dict(d["verdict"]) if d.get("verdict") else None
        return cls(**kw)


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


def write_run_record(run_dir: Path | str, record: RunRecord) -> Path:
    """Atomically (temp file + rename, mode 0600) replace ``<run>/run.json``: a reader never sees half a file."""
    path = Path(run_dir) / RUN_JSON
    text = json.dumps(record.to_dict(), indent=2, sort_keys=True) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=".run.json.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def read_run_record(run_dir: Path | str) -> RunRecord:
    """Read ``<run>/run.json``; DswizError naming the problem when it is missing or unreadable."""
    path = Path(run_dir) / RUN_JSON
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return RunRecord.from_dict(data)
    except FileNotFoundError as e:
        raise DswizError(f"{path} does not exist", "pass a run directory made by `dswiz launch`") from e
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DswizError(f"{path} cannot be read ({e})", "pass a run directory made by `dswiz launch`") from e


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
    return path
