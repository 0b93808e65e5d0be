"""Running the consolidation worker in the training environment's python, and placing its output safely.

The worker (runner/consolidate_worker.py) writes into a temporary folder next to OUT; only a complete result is
renamed to OUT, so OUT is never half-written. An existing OUT is kept as ``OUT.bak-<time>``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wizard.checkpoints import ZeroCheckpoint
from wizard.errors import DswizError
from wizard.fsio import backup_path

WORKER = Path(__file__).with_name("consolidate_worker.py")

# Run the worker file by path without putting its folder (runner/) on the child's sys.path, and without
# PYTHONPATH: the training environment must see only its own packages.
_BOOTSTRAP = "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"

_PYTHON_FIX = "pass --python /path/to/your/training-env/bin/python (the python that runs your training)"


@dataclass(frozen=True)
class ConsolidateOptions:
    safe_serialization: bool = False
    max_shard_size: int = 5 * 10**9  # bytes per output file (DeepSpeed's default, "5GB")
    exclude_frozen_parameters: bool = False


@dataclass
class WorkerResult:
    returncode: int
    done: dict[str, Any] | None = None  # the "done" event: {"files": [{"name", "bytes"}]}
    error: dict[str, Any] | None = None  # the "error" event: {"kind", "message"}
    stderr_tail: list[str] = field(default_factory=list)


def find_training_python(explicit: str | None = None) -> str:
    """The python that has torch and DeepSpeed: ``--python``, else this one if it has both, else the interpreter
    of the ``deepspeed`` launcher on PATH, else ``python3`` on PATH. (The worker reports a clear error if the
    choice cannot import them.)"""
    if explicit:
        found = shutil.which(explicit) if os.sep not in explicit else explicit
        if not found or not os.access(found, os.X_OK):
            raise DswizError(f"--python {explicit}: no such executable", _PYTHON_FIX)
        return found
    if importlib.util.find_spec("torch") and importlib.util.find_spec("deepspeed"):
        return sys.executable
    launcher = shutil.which("deepspeed")
    if launcher:
        try:
            with open(launcher, "rb") as fh:
                first = fh.readline().decode("utf-8", "replace").strip()
        except OSError:
            first = ""
        if first.startswith("#!"):
            interpreter = first[2:].split()[0] if first[2:].split() else ""
            if os.path.basename(interpreter).startswith("python") and os.access(interpreter, os.X_OK):
                return interpreter
    for name in ("python3", "python"):
        found = shutil.which(name)
        if found:
            return found
    raise DswizError("no python with torch and DeepSpeed found on PATH", _PYTHON_FIX)


def worker_argv(python: str, ckpt: ZeroCheckpoint, out_dir: Path, options: ConsolidateOptions) -> list[str]:
    argv = [python, "-u", "-c", _BOOTSTRAP, str(WORKER), str(ckpt.root.resolve()), str(out_dir.resolve())]
    argv += ["--tag", ckpt.tag, "--max-shard-size", str(options.max_shard_size)]
    if options.safe_serialization:
        argv.append("--safe-serialization")
    if options.exclude_frozen_parameters:
        argv.append("--exclude-frozen-parameters")
    return argv


def run_worker(
    python: str,
    ckpt: ZeroCheckpoint,
    out_dir: Path,
    options: ConsolidateOptions,
    on_event: Callable[[dict[str, Any]], None],
) -> WorkerResult:
    """Run the worker to completion, calling ``on_event`` for each event it reports. Ctrl-C stops it, then
    raises KeyboardInterrupt."""
    argv = worker_argv(python, ckpt, out_dir, options)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONUNBUFFERED"] = "1"
    guard = _CtrlC()
    with tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace") as err, guard:
        try:
            proc = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=err,
                stdin=subprocess.DEVNULL,
                text=True,
                cwd=out_dir,  # an empty folder: nothing in the user's cwd can shadow a module
                env=env,
                start_new_session=True,  # the terminal's Ctrl-C reaches dswiz only; dswiz stops the worker
            )
        except OSError as e:
            raise DswizError(f"cannot run {python}: {e.strerror}", _PYTHON_FIX) from e
        result = WorkerResult(returncode=0)
        try:
            guard.attach(proc)
            assert proc.stdout is not None
            for line in proc.stdout:
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if not isinstance(event, dict):
                    continue
                if event.get("event") == "done":
                    result.done = event
                elif event.get("event") == "error":
                    result.error = event
                on_event(event)
            result.returncode = proc.wait()
        finally:
            _stop(proc)
        err.seek(0)
        result.stderr_tail = list(deque(err.read().splitlines(), maxlen=20))
    if guard.interrupted:
        raise KeyboardInterrupt
    return result


class _CtrlC:
    """While the worker runs, Ctrl-C (SIGINT) stops the worker instead of raising at a random point: a
    KeyboardInterrupt inside subprocess.Popen, after the fork, would orphan the child."""

    def __init__(self) -> None:
        self.interrupted = False
        self._proc: subprocess.Popen[str] | None = None
        self._previous: Any = None

    def __enter__(self) -> _CtrlC:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._on_sigint)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)

    def attach(self, proc: subprocess.Popen[str]) -> None:
        self._proc = proc
        if self.interrupted:  # Ctrl-C came while it was starting
            self._terminate()

    def _on_sigint(self, signum: int, frame: object) -> None:
        self.interrupted = True
        self._terminate()

    def _terminate(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(self._proc.pid, signal.SIGTERM)


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def error_for(result: WorkerResult, python: str, ckpt: ZeroCheckpoint) -> DswizError:
    """The failure, in the user's terms: what went wrong and what to do."""
    kind = str((result.error or {}).get("kind", ""))
    message = str((result.error or {}).get("message", ""))
    if kind == "ImportError":
        return DswizError(f"{python} cannot import torch and DeepSpeed: {message}", _PYTHON_FIX)
    if kind == "MissingSafetensors":
        return DswizError(
            f"--safe-serialization needs the safetensors package, which {python} does not have",
            f"{python} -m pip install safetensors, or pass --no-safe-serialization",
        )
    if kind == "TiedWeights":
        pairs = ", ".join(" = ".join(p) for p in json.loads(message))
        return DswizError(
            f"the model has tied weights ({pairs}); DeepSpeed's zero_to_fp32 keeps them shared and safetensors "
            "cannot store shared tensors",
            "pass --no-safe-serialization (pytorch_model.bin: torch.load keeps the tie)",
        )
    if kind == "MemoryError" or result.returncode in (-signal.SIGKILL, 137):
        return DswizError(
            f"the conversion of {ckpt.tag_dir} ran out of memory (the process was killed)",
            "free memory (stop other jobs) or run it on a machine with more RAM",
        )
    if "No space left on device" in message:
        return DswizError(
            f"the disk holding the output ran full while writing the weights of {ckpt.tag_dir}",
            "free space there, or choose an OUT on a disk with more room (nothing was written to OUT)",
        )
    if "optim_states.pt" in message and "Expected" in message:
        return DswizError(
            f"{ckpt.tag_dir} is incomplete: {message}",
            "every rank must finish engine.save_checkpoint(); use another tag or save again",
        )
    item = str((result.error or {}).get("item", ""))
    if item.endswith(".pt"):  # it failed while reading this shard
        return DswizError(
            f"cannot read {item}: {kind}: {message}",
            "the file is damaged or incomplete (a save cut short, a full disk): use another tag or save again",
        )
    detail = f"{kind}: {message}" if kind else f"exit code {result.returncode}"
    return DswizError(
        f"DeepSpeed's zero_to_fp32 failed on {ckpt.tag_dir}: {detail}",
        "see its output above; if the checkpoint is intact, report the message to DeepSpeed",
    )


# -- placing the output ---------------------------------------------------------------------------------------


def check_output_path(out: Path, ckpt: ZeroCheckpoint, force: bool) -> None:
    """Refuse an OUT that is the checkpoint (or holds it), or that exists without --force."""
    out_abs, root_abs = out.resolve(), ckpt.root.resolve()
    if out_abs == root_abs or out_abs in root_abs.parents or out_abs == ckpt.tag_dir.resolve():
        raise DswizError(
            f"{out} is (or contains) the checkpoint itself",
            f"choose another output folder, e.g. {root_abs}-fp32",
        )
    if out.exists() and not force and not (out.is_dir() and not any(out.iterdir())):
        raise DswizError(
            f"{out} already exists",
            "pass --force to replace it (the old one is kept as a .bak-<time> backup), or choose another OUT",
        )


def make_temp_output(out: Path) -> Path:
    """An empty folder next to OUT (same filesystem, so the final rename is atomic)."""
    parent = out.resolve().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=parent))
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes it 0700; OUT gets a normal folder's mode
        return tmp
    except OSError as e:
        raise DswizError(f"cannot write in {parent}: {e.strerror}", "choose a writable output folder") from e


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def commit_output(tmp: Path, out: Path) -> Path | None:
    """Rename the finished ``tmp`` to ``out``; an existing ``out`` is first renamed to a backup (returned).
    An existing empty folder is simply replaced."""
    backup: Path | None = None
    if out.is_dir() and not out.is_symlink() and not any(out.iterdir()):
        out.rmdir()
    elif out.exists() or out.is_symlink():
        backup = backup_path(out)
        os.rename(out, backup)
    try:
        os.rename(tmp, out)
    except OSError:
        if backup is not None:
            os.rename(backup, out)
        raise
    return backup
