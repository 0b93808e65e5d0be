"""What `dswiz launch` costs a training step: the same script and config run under the plain DeepSpeed launcher and
under `dswiz launch --no-tui` (log pipe + per-rank log tail + run.json + the metrics collector at 1 Hz), alternated
(ABBA...) in one invocation so that drift (clocks, thermals, caches) hits both alike. Target: overhead <= 1 %.

    python3 bench/launch_overhead.py                 # GPU: all visible GPUs, ~100M-param model, bf16, 4 pairs
    python3 bench/launch_overhead.py --smoke         # CPU: 2 ranks, tiny model, 1 pair (checks the script, ~1 min)
    python3 bench/launch_overhead.py --out DIR       # results as JSON + markdown (default bench/results/)

Step time comes from DeepSpeed's own throughput line, printed every step (steps_per_print 1, both arms):
step time = global batch / CurrSamplesPerSec. The first --warmup steps of each run are dropped; each run gives the
median of the rest; each arm the median over its runs. Results are saved after every run (a cut-off run still leaves
its figures).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))  # _common, also when this file is loaded by a test

from _common import repo_env, run_in_group  # noqa: E402

TRAIN = ROOT / "runner" / "examples" / "train_tiny.py"
TARGET_OVERHEAD = 0.01
THROUGHPUT_RE = re.compile(
    r"global_step=(\d+), RunningAvgSamplesPerSec=[^,]+, CurrSamplesPerSec=([0-9.eE+-]+)"
)


def gpu_count() -> int:
    try:
        out = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def settings(args: argparse.Namespace) -> dict:
    gpus = 0 if args.smoke else gpu_count()
    if args.smoke or gpus == 0:
        model = ["--vocab", "512", "--hidden", "128", "--layers", "2", "--heads", "4", "--seq-len", "64"]
        config = {
            "train_micro_batch_size_per_gpu": 4,
            "gradient_accumulation_steps": 1,
            "zero_optimization": {"stage": 2},
        }
        nproc = args.nproc or 2
        steps = args.steps or 12
    else:
        model = [
            "--vocab",
            "32000",
            "--hidden",
            "1024",
            "--layers",
            "12",
            "--heads",
            "16",
            "--seq-len",
            str(args.seq_len),
        ]
        config = {
            "train_micro_batch_size_per_gpu": args.micro_batch,
            "gradient_accumulation_steps": 1,
            "bf16": {"enabled": True},
            "zero_optimization": {"stage": 2},
        }
        nproc = args.nproc or gpus
        steps = args.steps or 200
    config.update(
        {
            "steps_per_print": 1,
            "log_level": "info",
            "csv_monitor": {"enabled": True, "output_path": "csv", "job_name": "dswiz"},
        }
    )
    return {"model_args": model, "config": config, "nproc": nproc, "steps": steps, "gpus": gpus}


def step_times(log_text: str, global_batch: int, warmup: int) -> list[float]:
    """Seconds per step from DeepSpeed's throughput lines, the first ``warmup`` steps dropped."""
    times = []
    for m in THROUGHPUT_RE.finditer(log_text):
        step, samples_per_sec = int(m.group(1)), float(m.group(2))
        if step > warmup and samples_per_sec > 0:
            times.append(global_batch / samples_per_sec)
    return times


def run_plain(python: str, cfg: Path, s: dict, port: int, work: Path, tag: str) -> tuple[str, float, int]:
    argv = [
        python,
        "-u",
        "-m",
        "deepspeed.launcher.runner",
        "--num_gpus",
        str(s["nproc"]),
        "--master_port",
        str(port),
    ]
    argv += [str(TRAIN), "--deepspeed_config", str(cfg), "--steps", str(s["steps"]), "--log-every", "1000000"]
    argv += s["model_args"]
    log = work / f"{tag}.log"
    t0 = time.monotonic()
    with log.open("w") as fh:
        rc = run_in_group(argv, cwd=work, stdout=fh, stderr=subprocess.STDOUT, timeout=None).returncode
    return log.read_text(errors="replace"), time.monotonic() - t0, rc


def run_dswiz(python: str, cfg: Path, s: dict, port: int, work: Path, tag: str) -> tuple[str, float, int]:
    run_dir = work / tag
    argv = [
        sys.executable,
        "-m",
        "wizard",
        "launch",
        "--no-tui",
        "--python",
        python,
        "--nproc",
        str(s["nproc"]),
    ]
    argv += ["--master-port", str(port), "--config", str(cfg), "--run-dir", str(run_dir)]
    argv += [str(TRAIN), "--steps", str(s["steps"]), "--log-every", "1000000", *s["model_args"]]
    env = repo_env()  # on the GPU machine dswiz's own dependencies come from the caller's PYTHONPATH
    t0 = time.monotonic()
    with (work / f"{tag}.stdout").open("w") as fh:
        rc = run_in_group(
            argv, cwd=work, env=env, stdout=fh, stderr=subprocess.STDOUT, timeout=None
        ).returncode
    # rank 0 prints the throughput lines; with per-rank logs they are in logs/ranks/, the launcher's in combined.log
    logs = [run_dir / "logs" / "combined.log", *sorted((run_dir / "logs" / "ranks").glob("*_rank0.log"))]
    text = "".join(p.read_text(errors="replace") for p in logs if p.exists())
    return text, time.monotonic() - t0, rc


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def write_results(out_dir: Path, result: dict) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"launch_overhead-{dt.date.today().isoformat()}{'-smoke' if result['smoke'] else ''}"
    path = out_dir / f"{stem}.json"
    path.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    lines = [
        "# `dswiz launch` overhead per training step",
        "",
        f"Command: `{result['command']}`",
        f"Machine: {result['machine']}; {result['nproc']} rank(s); {result['steps']} steps per run, "
        f"first {result['warmup']} dropped; steps_per_print 1 in both arms.",
        "",
        "| run | arm | median step (ms) | steps | wall (s) | exit |",
        "|---|---|---|---|---|---|",
    ]
    for r in result["runs"]:
        med = f"{r['median_step_s'] * 1000:.2f}" if r["median_step_s"] else "-"
        lines.append(
            f"| {r['index']} | {r['arm']} | {med} | {r['steps_measured']} | {r['wall_s']:.1f} | {r['exit']} |"
        )
    s = result.get("summary") or {}
    if s.get("overhead") is not None:
        lines += [
            "",
            f"Median step: plain deepspeed {s['plain_median_step_s'] * 1000:.2f} ms, dswiz launch "
            f"{s['dswiz_median_step_s'] * 1000:.2f} ms: overhead {s['overhead'] * 100:+.2f} % "
            f"(target <= {TARGET_OVERHEAD * 100:.0f} %).",
        ]
    (out_dir / f"{stem}.md").write_text("\n".join(lines) + "\n")
    return path


def summarize(runs: list[dict]) -> dict:
    def arm(name: str) -> float | None:
        meds = [r["median_step_s"] for r in runs if r["arm"] == name and r["median_step_s"]]
        return statistics.median(meds) if meds else None

    plain, dswiz = arm("plain"), arm("dswiz")
    overhead = (dswiz / plain - 1.0) if plain and dswiz else None
    return {
        "plain_median_step_s": plain,
        "dswiz_median_step_s": dswiz,
        "overhead": overhead,
        "within_target": overhead is not None and overhead <= TARGET_OVERHEAD,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true", help="CPU, 2 ranks, tiny model, one pair")
    p.add_argument("--pairs", type=int, default=None, help="plain/dswiz pairs (default 4; smoke 1)")
    p.add_argument("--steps", type=int, default=None, help="steps per run (default 200; smoke 12)")
    p.add_argument("--warmup", type=int, default=None, help="steps dropped per run (default 20; smoke 3)")
    p.add_argument("--nproc", type=int, default=None, help="ranks (default: every GPU; smoke 2)")
    p.add_argument(
        "--micro-batch", type=int, default=8, help="GPU mode: micro-batch per GPU (larger = GPU-bound steps)"
    )
    p.add_argument("--seq-len", type=int, default=512, help="GPU mode: sequence length")
    p.add_argument("--python", default=sys.executable, help="the training environment's python")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = p.parse_args(argv)
    s = settings(args)
    pairs = args.pairs or (1 if args.smoke else 4)
    warmup = args.warmup if args.warmup is not None else (3 if args.smoke else 20)
    global_batch = s["config"]["train_micro_batch_size_per_gpu"] * s["nproc"]
    result: dict = {
        "bench": "launch_overhead",
        "command": "python3 bench/launch_overhead.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "smoke": args.smoke,
        "machine": f"{platform.node()} ({platform.machine()}, {os.cpu_count()} CPUs, {s['gpus']} GPU(s))",
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "nproc": s["nproc"],
        "steps": s["steps"],
        "warmup": warmup,
        "global_batch": global_batch,
        "model_args": s["model_args"],
        "config": s["config"],
        "runs": [],
        "summary": None,
    }
    with tempfile.TemporaryDirectory(prefix="dswiz-bench-") as tmp:
        work = Path(tmp)
        cfg = work / "ds_config.json"
        cfg.write_text(json.dumps(s["config"], indent=2) + "\n")
        order = []
        for i in range(pairs):  # ABBA: plain, dswiz, dswiz, plain, ...
            order += ["plain", "dswiz"] if i % 2 == 0 else ["dswiz", "plain"]
        for index, arm in enumerate(order):
            runner = run_plain if arm == "plain" else run_dswiz
            text, wall, rc = runner(args.python, cfg, s, free_port(), work, f"{index:02d}-{arm}")
            times = step_times(text, global_batch, warmup)
            run = {
                "index": index,
                "arm": arm,
                "exit": rc,
                "wall_s": round(wall, 2),
                "steps_measured": len(times),
                "median_step_s": statistics.median(times) if times else None,
            }
            result["runs"].append(run)
            result["summary"] = summarize(result["runs"])
            path = write_results(args.out, result)
            med = f"{run['median_step_s'] * 1000:.2f} ms" if run["median_step_s"] else "no steps"
            print(
                f"run {index} {arm:5s}: median step {med} over {len(times)} steps, wall {wall:.1f} s, exit {rc}",
                flush=True,
            )
    summary = result["summary"] or {}
    if summary.get("overhead") is not None:
        print(
            f"plain {summary['plain_median_step_s'] * 1000:.2f} ms, dswiz {summary['dswiz_median_step_s'] * 1000:.2f} ms: "
            f"overhead {summary['overhead'] * 100:+.2f} % (target <= {TARGET_OVERHEAD * 100:.0f} %)"
        )
    print(f"results: {path} (+ .md)")
    # A run counts when its steps were measured: DeepSpeed on CPU can abort a rank at exit after training (-6).
    ok = all(r["steps_measured"] > 0 for r in result["runs"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
