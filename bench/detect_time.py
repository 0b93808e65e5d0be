"""Wall time of `dswiz detect --json` in fresh processes (target: median <= 0.3 s), plus where the time goes.

    python3 bench/detect_time.py                 # 15 runs, writes bench/results/detect_time-<date>.{json,md}
    python3 bench/detect_time.py --smoke         # 3 runs, quick check of the script itself
    python3 bench/detect_time.py --runs 30 --out DIR

Runs `python -m wizard detect --json` with PYTHONPATH = the repository root, so no install is needed. The bare
interpreter start (`python -c pass`) is measured the same way for comparison. Results are saved after every run,
so a cut-off run still leaves its figures.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time

from _common import ROOT, md_heading, md_table, parse_timing_args, repo_env, run_in_group

TARGET_S = 0.3

PHASES = r"""
import json, time
t = time.perf_counter()
from wizard.hardware.nvml import read_gpus
from wizard.hardware.host import read_host
from wizard.hardware.software import read_software
t_import = time.perf_counter()
reading = read_gpus()
t_nvml = time.perf_counter()
read_host()
t_host = time.perf_counter()
read_software()
t_sw = time.perf_counter()
r = lambda x: round(x, 4)
print(json.dumps({"import_s": r(t_import - t), "nvml_s": r(t_nvml - t_import), "host_s": r(t_host - t_nvml),
                  "software_s": r(t_sw - t_host), "gpus": len(reading.gpus), "no_gpu_reason": reading.reason}))
"""


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    proc = run_in_group(cmd, cwd=ROOT, env=env, capture=True, timeout=120)
    return time.perf_counter() - start, proc


def main() -> int:
    args, runs = parse_timing_args(__doc__ or "", default_runs=15)
    env = repo_env()
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = dt.date.today().isoformat()
    name = f"detect_time-{stamp}{'-smoke' if args.smoke else ''}"
    json_path, md_path = args.out / f"{name}.json", args.out / f"{name}.md"

    result: dict[str, object] = {
        "command": "python -m wizard detect --json",
        "bench": "bench/detect_time.py" + (" --smoke" if args.smoke else f" --runs {runs}"),
        "date": stamp,
        "host": platform.node(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "target_s": TARGET_S,
        "detect_s": [],
        "python_startup_s": [],
    }

    def save() -> None:
        detect = result["detect_s"]
        assert isinstance(detect, list)
        if detect:
            result["median_s"] = statistics.median(detect)
            result["min_s"] = min(detect)
            result["max_s"] = max(detect)
            result["meets_target"] = result["median_s"] <= TARGET_S
        startup = result["python_startup_s"]
        assert isinstance(startup, list)
        if startup:
            result["python_startup_median_s"] = statistics.median(startup)
        json_path.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
        md_path.write_text(markdown(result))

    # Warm the file cache once (the first process after a checkout reads every .pyc from disk).
    _, first = timed([sys.executable, "-m", "wizard", "detect", "--json"], env)
    if first.returncode != 0:
        print(first.stderr, file=sys.stderr)
        return 1
    report = json.loads(first.stdout)
    result["gpus"] = report["total_gpus"]
    result["gpu_names"] = sorted({g["name"] for g in report["gpus"]})
    result["no_gpu_reason"] = report["no_gpu_reason"]

    for i in range(runs):
        seconds, proc = timed([sys.executable, "-m", "wizard", "detect", "--json"], env)
        if proc.returncode != 0:
            print(proc.stderr, file=sys.stderr)
            return 1
        result["detect_s"].append(round(seconds, 4))  # type: ignore[union-attr]
        startup, _ = timed([sys.executable, "-c", "pass"], env)
        result["python_startup_s"].append(round(startup, 4))  # type: ignore[union-attr]
        save()
        print(
            f"run {i + 1}/{runs}: detect --json {seconds:.3f} s (python startup {startup:.3f} s)", flush=True
        )

    _, phases = timed([sys.executable, "-c", PHASES], env)
    if phases.returncode == 0:
        result["phases_s"] = json.loads(phases.stdout.strip().splitlines()[-1])
    save()
    print(
        f"median {result['median_s']:.3f} s over {runs} runs (target <= {TARGET_S} s: "
        f"{'met' if result['meets_target'] else 'NOT met'}); python startup alone "
        f"{result['python_startup_median_s']:.3f} s"
    )
    if "phases_s" in result:
        print("phases (one process):", json.dumps(result["phases_s"]))
    print(f"wrote {json_path.relative_to(ROOT) if json_path.is_relative_to(ROOT) else json_path}")
    return 0


def markdown(result: dict[str, object]) -> str:
    lines = md_heading(
        f"`dswiz detect --json` wall time ({result['date']})",
        f"Command: `{result['bench']}` on {result['host']} ({result['cpus']} CPUs, Python {result['python']}), "
        f"{result.get('gpus', '?')} GPU(s) {result.get('gpu_names') or ''}.",
    )
    lines += md_table(
        ("measure", "seconds"),
        [
            (key.removesuffix("_s").replace("_", " "), f"{result[key]:.3f}")
            for key in ("median_s", "min_s", "max_s", "python_startup_median_s")
            if key in result
        ],
    )
    lines.append(
        f"\nTarget: median <= {result['target_s']} s -> {'met' if result.get('meets_target') else 'not met'}."
    )
    phases = result.get("phases_s")
    if isinstance(phases, dict):
        lines.append("\nPhases in one process: " + ", ".join(f"{k} {v}" for k, v in phases.items()))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
