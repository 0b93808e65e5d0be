"""What the bench scripts share: the repository root, a child Python run from it (its environment), and markdown
tables.

The scripts run as files (``python bench/x.py``), so this module is imported as ``_common`` from the script's
own folder (Python puts it first on ``sys.path``); it puts the repository root on ``sys.path`` too. Importing it
needs nothing outside the standard library (dswiz's reaper is standard library only; torch and bitsandbytes are
imported by the helpers that use them).
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(1, str(ROOT))

from runner import reaper  # noqa: E402  (after the root is on sys.path)

# Qwen2-1.5B's shape (its config.json on the hub: 28 layers, hidden 1536, 12 heads, 2 KV heads, ffn 8960, tied): a
# model family the planner's constants were not fitted to (bench/probe_calibration.py, plan_accuracy's sweep).
QWEN2_1_5B: dict[str, Any] = {
    "model_type": "qwen2", "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
    "num_attention_heads": 12, "num_key_value_heads": 2, "vocab_size": 151936, "max_position_embeddings": 32768,
    "tie_word_embeddings": True, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
}  # fmt: skip
# Another family the constants were not fitted to (GPT-NeoX: parallel attention + MLP, partial rotary, GELU, untied):
# Pythia's shapes, from their config.json on the hub. Pythia-1B has head dim 256 (8 heads of hidden 2048).
PYTHIA_1_4B: dict[str, Any] = {
    "model_type": "gpt_neox", "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 24,
    "num_attention_heads": 16, "vocab_size": 50304, "max_position_embeddings": 2048, "rotary_pct": 0.25,
    "use_parallel_residual": True, "tie_word_embeddings": False, "hidden_act": "gelu",
}  # fmt: skip
PYTHIA_1B: dict[str, Any] = {**PYTHIA_1_4B, "num_hidden_layers": 16, "num_attention_heads": 8}


def parse_timing_args(doc: str, *, default_runs: int) -> tuple[argparse.Namespace, int]:
    """The timing scripts' command line (``--runs N``, ``--smoke`` = 3 runs, ``--out DIR``): (args, runs)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=default_runs)
    ap.add_argument("--smoke", action="store_true", help="3 runs: check that the script works")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args()
    return args, 3 if args.smoke else args.runs


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1 (argparse names the flag and the value otherwise)."""
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def positive_ints(text: str) -> tuple[int, ...]:
    """An argparse type: comma-separated whole numbers of at least 1 ("1,4,16")."""
    return tuple(positive_int(x) for x in text.split(","))


def repo_env(**extra: str) -> dict[str, str]:
    """This process's environment for a child that imports the worktree's code without an install: the repository
    root first on PYTHONPATH, what PYTHONPATH held kept after it (on the GPU machine, the carried wheels: DeepSpeed,
    bitsandbytes, dswiz's own dependencies), and ``extra`` on top."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}


def run_in_group(
    cmd: Sequence[str], *, timeout: float | None, capture: bool = False, **popen: Any
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(cmd, timeout=...)`` where nothing the child starts outlives the call, nor the bench.

    The child leads a session of its own and carries a token in its environment (dswiz's job token,
    ``runner.reaper.TOKEN_ENV``), inherited by all it starts. Once the child ends, times out, or this process is
    interrupted or sent SIGTERM/SIGHUP (turned into SystemExit while it waits), its process group is killed, then
    every process still carrying the token (one that left the group: a launcher's rank, a compile job), and the
    DeepSpeed CPU all-reduce files in /dev/shm that no process holds any more are removed (DeepSpeed never removes
    them: ``reaper.remove_orphaned_shm_buffers``). Where the bench itself is SIGKILLed, dswiz's reaper does the same:
    a separate process started here (``reaper.start_reaper``) that acts when its lifeline from the bench ends.

    subprocess.run kills only the child, and waits for whatever still holds its output pipes; here the pipes are read
    for ``PIPE_GRACE_S`` at most after that cleanup. A timeout raises ``TimeoutExpired`` with the output read so far,
    as subprocess.run does. ``capture``: stdout and stderr as text (undecodable bytes replaced) in the result."""
    if capture:
        popen.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    token = secrets.token_hex(8)
    popen["env"] = {**(popen.get("env") or os.environ), reaper.TOKEN_ENV: token}
    chunks: dict[str, list[str]] = {}
    readers: dict[str, threading.Thread] = {}
    timed_out = None
    with _signals_exit(), _lifeline(token) as link:
        # bytes, decoded as they come (_drain): a text pipe's read waits for a whole buffer
        proc = subprocess.Popen(list(cmd), start_new_session=True, preexec_fn=_die_with_parent,
                                **popen)  # fmt: skip
        try:
            if link is not None:
                link.add_session(proc.pid)
            for name in ("stdout", "stderr"):
                if getattr(proc, name) is not None:
                    chunks[name] = []
                    readers[name] = threading.Thread(
                        target=_drain, args=(getattr(proc, name), chunks[name]), daemon=True
                    )
                    readers[name].start()
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired as e:
            timed_out = e
        finally:
            _end(proc, readers, token)
    out, err = ("".join(chunks[n]) if n in chunks else None for n in ("stdout", "stderr"))
    if timed_out is not None:
        timed_out.stdout, timed_out.stderr = out, err
        raise timed_out
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@contextlib.contextmanager
def _lifeline(token: str) -> Iterator[reaper.ReaperLink | None]:
    """dswiz's reaper for one child: it stops what carries ``token`` if this process dies before the block ends, or
    the block ends with an exception (a second signal may have cut the cleanup short); told ``done`` otherwise. None
    (and a line on stderr) when it cannot start: the call then runs unprotected against a SIGKILL."""
    try:
        link: reaper.ReaperLink | None = reaper.start_reaper(None, token, REAPER_GRACE_S)
    except OSError as e:
        print(f"bench: cannot start dswiz's reaper ({e}): if this bench is killed, its child's processes stay",
              file=sys.stderr)  # fmt: skip
        link = None
    try:
        yield link
    except BaseException:
        if link is not None:
            link.close()  # the cleanup may not have run to its end: the reaper does it (again)
        raise
    if link is not None:
        link.done()


REAPER_GRACE_S = 2.0  # SIGTERM to SIGKILL, when the reaper stops what a killed bench left


def _end(proc: subprocess.Popen[bytes], readers: dict[str, threading.Thread], token: str) -> None:
    """Kill the child's group, reap the child, stop every process that still carries ``token``, remove the
    all-reduce files no process holds; then read its pipes for ``PIPE_GRACE_S`` at most (a pipe a reader still waits
    on, held by a process this user cannot stop, is left to it: closing it would wait for that read)."""
    kill_group(proc.pid)
    proc.wait()
    reaper.stop_job((), token, grace_s=0.0)  # by token: the group id may be reused once the child is reaped
    reaper.remove_orphaned_shm_buffers(min_age_s=0.0)  # its ranks' files were written when it started
    deadline = time.monotonic() + PIPE_GRACE_S
    for name, t in readers.items():
        t.join(max(0.0, deadline - time.monotonic()))
        if not t.is_alive():
            getattr(proc, name).close()


PIPE_GRACE_S = 5.0  # how long the output pipes are read after the child's group is gone


def _drain(pipe: Any, into: list[str]) -> None:
    """Append what ``pipe`` (a bytes pipe) delivers, UTF-8 (undecodable bytes replaced), as it comes."""
    decode = codecs.getincrementaldecoder("utf-8")(errors="replace").decode
    with contextlib.suppress(OSError, ValueError):  # the pipe closed under it: what was read stays
        for chunk in iter(lambda: os.read(pipe.fileno(), 65536), b""):
            into.append(decode(chunk))
    into.append(decode(b"", final=True))


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the bench dies (prctl PR_SET_PDEATHSIG; nothing off Linux)."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG


@contextlib.contextmanager
def _signals_exit() -> Any:
    """SIGTERM and SIGHUP raise SystemExit (128 + the signal) while the block runs, so that its ``finally`` clauses
    run (Python's default handlers end the process without them); the old handlers come back after. Off the main
    thread, where handlers cannot be set, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def leave(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    old = {sig: signal.signal(sig, leave) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def kill_group(pgid: int) -> None:
    """SIGKILL to every process of the group ``pgid`` (nothing when it is empty)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def run_repo_python(args: Sequence[str], *, timeout: float) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` (this interpreter) in the repository root (``repo_env``), output captured, in a process
    group of its own (``run_in_group``).

    The child imports the worktree's code without an install; a failure is the caller's to read (no raise)."""
    return run_in_group([sys.executable, *args], timeout=timeout, capture=True, cwd=ROOT, env=repo_env())


def head_commit() -> str:
    """The repository's HEAD as a short hash ("unknown" outside a git checkout), for a result re-predicted by it."""
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        )
    except OSError:
        return "unknown"
    return done.stdout.strip() or "unknown"


def md_heading(title: str, *intro: str) -> list[str]:
    """A result page's first lines: ``# title``, then each intro paragraph, each followed by a blank line."""
    lines = [f"# {title}", ""]
    for paragraph in intro:
        lines += [paragraph, ""]
    return lines


def md_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """A markdown table as lines: the header, the rule, one line per row (cells as ``str``)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return lines


def load_bench_script(name: str) -> Any:
    """Another bench script (``bench/<name>.py``) as a module, to share its helpers without a package."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def write_result(
    out: Path, stem: str, doc: dict[str, Any], markdown: str, *, sort_keys: bool = False
) -> None:
    """A bench's result: ``<stem>.json`` (the raw document) and ``<stem>.md`` beside it in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(doc, indent=1, sort_keys=sort_keys) + "\n")
    (out / f"{stem}.md").write_text(markdown)
    print(f"wrote {out / stem}.json and .md")


def result_stem(name: str, doc: dict[str, Any], label: str) -> str:
    """``<name>-<date>[-smoke][-<label>]``, the result files' name."""
    return f"{name}-{doc['date']}" + ("-smoke" if doc["smoke"] else "") + (f"-{label}" if label else "")


def saved_tensor_bytes(params: Iterable[Any], forward: Callable[[], Any]) -> int:
    """Bytes of the tensors autograd saves for backward while ``forward()`` runs, each storage once, the
    parameters' (``params``) left out."""
    import torch

    skip = {p.untyped_storage().data_ptr() for p in params}
    seen: dict[int, int] = {}

    def pack(t: Any) -> Any:
        storage = t.untyped_storage()
        if storage.data_ptr() not in skip:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        forward()
    return sum(seen.values())


def quantize_linears_(model: Any, dtype: Any, double_quant: bool, storage: Any) -> None:
    """Every nn.Linear but lm_head -> bitsandbytes Linear4bit (NF4), as transformers' bitsandbytes loader builds it:
    each weight quantized where it lies (GPU, or CPU with bitsandbytes' CPU backend), its 16-bit copy dropped.
    ``storage``: the packed weights' dtype (uint8, or the compute dtype for ZeRO-3, as HF's QLoRA + ZeRO-3 recipe)."""
    import bitsandbytes as bnb
    import torch

    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if not isinstance(child, torch.nn.Linear) or name == "lm_head":
                continue
            with torch.device("meta"):
                q = bnb.nn.Linear4bit(child.in_features, child.out_features, bias=child.bias is not None,
                                      compute_dtype=dtype, compress_statistics=double_quant, quant_type="nf4",
                                      quant_storage=storage)  # fmt: skip
            weight = bnb.nn.Params4bit(child.weight.data, requires_grad=False, compress_statistics=double_quant,
                                       quant_type="nf4", quant_storage=storage)  # fmt: skip
            q.weight = weight.to(child.weight.device)
            if child.bias is not None:
                q.bias = torch.nn.Parameter(child.bias.data, requires_grad=False)
            setattr(parent, name, q)
            del child, weight
