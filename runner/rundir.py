"""The run directory: the contract between `dswiz launch` (which writes it) and `dswiz monitor` (which reads it).

One directory per run, mode 0700, by default under ``$XDG_STATE_HOME/dswiz/runs/<run-id>`` (``~/.local/state``
when unset); ``--run-dir`` chooses another. Layout::

    <run>/run.json            what was run and how it ended (RunRecord, written atomically, updated at the end)
    <run>/config/             copies of the configs the job was launched with (ds_config.json, accelerate.yaml, ...)
    <run>/logs/combined.log   everything the launcher printed (stdout+stderr of the whole job), as it came
    <run>/logs/ranks/         DeepSpeed --enable_each_rank_log output (<timestamp>_rank<N>.log)
    <run>/csv/                DeepSpeed csv monitor output (csv_monitor.output_path); job_name "dswiz"
    <run>/metrics.jsonl       one JSON snapshot per interval (the monitor's history; appended)
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

RUN_JSON = "run.json"
CONFIG_DIR = "config"
LOGS_DIR = "logs"
COMBINED_LOG = "logs/combined.log"
RANK_LOGS_DIR = "logs/ranks"
CSV_DIR = "csv"
CSV_JOB_NAME = "dswiz"
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
