"""How fast DeepSpeed's CPU Adam steps on this host, by thread count, beside what the host's memory moves: the planner
prices an offloaded optimizer step as a part the cores per rank share and a part they do not
(wizard.planner.calibration.CPU_ADAM_CORE_SECONDS_PER_PARAM / CPU_ADAM_SECONDS_PER_PARAM, throughput._optimizer_seconds;
it was a fixed rate per core when this script was written). This script measures how the op's rate grows with the
threads, and where the host's memory bandwidth stops it.

    python3 bench/cpu_adam_rate.py                      # threads 1, 2, 4, ... up to the cores; 2^27 parameters
    python3 bench/cpu_adam_rate.py --threads 1,8,16 --params 268435456
    python3 bench/cpu_adam_rate.py --smoke              # 2^20 parameters, threads 1 and 2: checks the script
    python3 bench/cpu_adam_rate.py --out DIR            # JSON + markdown (default bench/results/)

Each thread count runs in a child process of its own with OMP_NUM_THREADS set, since the op's OpenMP runtime reads it
once. (DeepSpeed's launcher sets it per rank only with --bind_cores_to_rank, launcher/launch.py 0.19.8, which dswiz
does not pass: each rank's CPU Adam runs on every core, the ranks of a node at once.) A child times, each the median of
--repeats after a warm-up:
- DeepSpeedCPUAdam.step on one fp32 tensor of --params elements with its gradient (the op ZeRO-Offload steps each
  sub-group with; fp32 states), as parameters per second;
- a triad (c = a + 2 b, fp32, torch on the same threads) as GB/s moved (12 bytes an element): the memory the host
  streams at that thread count;
- an fp32 -> bf16 conversion (torch's copy_ on the same threads) as GB/s of 16-bit written: what a pageable
  write-back of 16-bit weights converts on the host;
- the gradients' norm and an in-place unscaling: with Adam and the conversion, the passes ZeRO's offloaded step makes
  over each fp32 partition on the host (runtime/zero/stage3.py step, 0.19.8), together as parameters per second.
Nothing here needs a GPU; the GPU machines' hosts are the ones that matter (their rows are the planner's readings).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))  # _common, also when this file is loaded by a test

from _common import (  # noqa: E402
    md_heading,
    md_table,
    positive_int,
    positive_ints,
    repo_env,
    result_stem,
    run_in_group,
    write_result,
)

DEFAULT_PARAMS = 1 << 27  # 0.5 GiB a tensor, 2 GiB for the parameter, its gradient and Adam's two states
SMOKE_PARAMS = 1 << 20
TRIAD_BYTES_PER_ELEMENT = 12  # read a and b, write c (fp32)
CHILD_TIMEOUT_S = 900  # the first child JIT-builds the op (about a minute on a GPU machine's host)


def thread_counts(cores: int) -> tuple[int, ...]:
    """1, 2, 4, ... up to ``cores``, and ``cores`` itself."""
    out, t = [], 1
    while t < cores:
        out.append(t)
        t *= 2
    return (*out, max(1, cores))


def _median_seconds(fn: Any, repeats: int) -> float:
    fn()  # warm-up: first touch of the pages, the op's state
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def child(params: int, repeats: int) -> dict[str, Any]:
    """One thread count's readings (this process's OMP_NUM_THREADS)."""
    import torch
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    threads = int(os.environ.get("OMP_NUM_THREADS", "1"))
    torch.set_num_threads(threads)
    p = torch.nn.Parameter(torch.randn(params, dtype=torch.float32))
    p.grad = torch.randn(params, dtype=torch.float32) * 1e-3
    before = p.detach().clone()
    opt = DeepSpeedCPUAdam([p], lr=1e-4, adamw_mode=True)
    adam = _median_seconds(opt.step, repeats)
    updated = bool((p.detach() != before).any())  # the op stepped, not a no-op
    del before
    a, b, c = torch.randn(params), torch.randn(params), torch.empty(params)
    triad = _median_seconds(lambda: torch.add(a, b, alpha=2.0, out=c), repeats)
    half = torch.empty(params, dtype=torch.bfloat16)
    convert = _median_seconds(lambda: half.copy_(a), repeats)
    # the rest of what ZeRO's offloaded step does to each fp32 partition on the host (stage3.py step, 0.19.8): the
    # gradients' norm, their unscaling / clipping in place, then Adam, then the 16-bit copy of the parameters
    norm = _median_seconds(lambda: torch.linalg.vector_norm(p.grad), repeats)
    unscale = _median_seconds(lambda: p.grad.mul_(1.0), repeats)
    return {
        "threads": threads,
        "adam_s": adam,
        "adam_params_per_s": params / adam,
        "adam_updated": updated,
        "triad_gbs": TRIAD_BYTES_PER_ELEMENT * params / triad / 1e9,
        "convert_bf16_gbs": 2 * params / convert / 1e9,
        "norm_s": norm,
        "unscale_s": unscale,
        "convert_s": convert,
        # the offloaded step's host passes together, as parameters per second
        "step_params_per_s": params / (norm + unscale + adam + convert),
    }


def run_child(threads: int, params: int, repeats: int) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", "--params", str(params), "--repeats", str(repeats)]
    env = repo_env(OMP_NUM_THREADS=str(threads))
    done = run_in_group(cmd, timeout=CHILD_TIMEOUT_S, capture=True, env=env)
    if done.returncode != 0:
        tail = (done.stderr or "").strip().splitlines()[-5:]
        return {"threads": threads, "error": f"exit {done.returncode}: " + " | ".join(tail)}
    lines = (done.stdout or "").strip().splitlines()
    try:
        row = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        return {"threads": threads, "error": f"the child printed no reading (last line: {lines[-1:]!r})"}
    return row if isinstance(row, dict) else {"threads": threads, "error": f"not a reading: {row!r}"}


def run(args: argparse.Namespace) -> dict[str, Any]:
    cores = os.cpu_count() or 1
    params = SMOKE_PARAMS if args.smoke else args.params
    threads = args.threads or ((1, min(2, cores)) if args.smoke else thread_counts(cores))
    rows = []
    for t in dict.fromkeys(threads):
        row = run_child(t, params, args.repeats)
        rows.append(row)
        if "error" in row:
            print(f"{t:3d} threads: {row['error']}")
        else:
            print(
                f"{t:3d} threads: CPU Adam {row['adam_params_per_s'] / 1e9:.2f}e9 params/s "
                f"({row['adam_s'] * 1e3:.1f} ms), triad {row['triad_gbs']:.1f} GB/s, "
                f"fp32->bf16 {row['convert_bf16_gbs']:.1f} GB/s written, "
                f"the step's host passes {row['step_params_per_s'] / 1e9:.2f}e9 params/s",
                flush=True,
            )
    return {
        "date": dt.date.today().isoformat(),
        "host": platform.node(),
        "cpu_model": _cpu_model(),
        "cores": cores,
        "smoke": bool(args.smoke),
        "params": params,
        "repeats": args.repeats,
        "rows": rows,
    }


def _cpu_model() -> str | None:
    from wizard.hardware.host import cpu_model

    return cpu_model()


def markdown(doc: dict[str, Any]) -> str:
    lines = md_heading(
        "DeepSpeed's CPU Adam by thread count, beside the host's memory bandwidth",
        f"{doc['host']} ({doc['date']}; {doc['cpu_model']}, {doc['cores']} cores): DeepSpeedCPUAdam.step on "
        f"{doc['params']:,} fp32 parameters, a torch triad and an fp32 -> bf16 copy on the same threads, the "
        f"median of {doc['repeats']} after a warm-up (bench/cpu_adam_rate.py).",
    )
    ok = [r for r in doc["rows"] if "error" not in r]
    one = next((r for r in ok if r["threads"] == 1), None)
    lines += md_table(
        (
            "threads",
            "CPU Adam params/s",
            "per thread",
            "speed-up over 1 thread",
            "triad GB/s",
            "Adam bytes/param at the triad's rate",
            "fp32 -> bf16 GB/s written",
            "step's host passes params/s",
        ),
        (
            (
                r["threads"],
                f"{r['adam_params_per_s']:.3g}",
                f"{r['adam_params_per_s'] / r['threads']:.3g}",
                f"{r['adam_params_per_s'] / one['adam_params_per_s']:.2f}" if one else "-",
                f"{r['triad_gbs']:.1f}",
                f"{r['triad_gbs'] * 1e9 / r['adam_params_per_s']:.1f}",
                f"{r['convert_bf16_gbs']:.1f}",
                f"{r['step_params_per_s']:.3g}",
            )
            for r in ok
        ),
    )
    errors = [r for r in doc["rows"] if "error" in r]
    if errors:
        lines += ["", *(f"- {r['threads']} threads: {r['error']}" for r in errors)]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--smoke", action="store_true", help="2^20 parameters, threads 1-2: check that the script works"
    )
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--label", default="", help="appended to the result files' names")
    ap.add_argument(
        "--params", type=positive_int, default=DEFAULT_PARAMS, help="fp32 parameters stepped (default 2^27)"
    )
    ap.add_argument(
        "--threads", type=positive_ints, default=None, help="e.g. 1,4,16 (default 1, 2, 4, ... the cores)"
    )
    ap.add_argument(
        "--repeats", type=positive_int, default=5, help="timed steps; the median is kept (default 5)"
    )
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.params, args.repeats)))
        return 0
    doc = run(args)
    write_result(args.out, result_stem("cpu_adam_rate", doc, args.label), doc, markdown(doc))
    return 0 if all("error" not in r for r in doc["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
