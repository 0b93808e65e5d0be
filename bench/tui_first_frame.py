"""Time to the wizard's first frame, in fresh processes (interpreter start included), and whether torch was
imported. Target: median <= 1.0 s.

    python bench/tui_first_frame.py [--runs 7] [--out bench/results/]

Each run starts `python -c <child>` headless: it builds the app through the same factory as `dswiz` (hardware
detection in a worker, as in real use), waits for the first screen to be composed and painted, and reports the
seconds since the parent launched it. Writes tui_first_frame.json and .md under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

from _common import ROOT, run_repo_python

CHILD = r"""
import sys, time, json
t_launch = float(sys.argv[1])
from wizard.tui.factory import build_app

app = build_app(hardware_spec=None)
result = {}

async def first_frame(pilot):
    await pilot.pause()  # the first screen is mounted and its first refresh has run
    result["first_frame_s"] = time.time() - t_launch
    await pilot.app.workers.wait_for_complete()
    result["torch_imported"] = "torch" in sys.modules
    pilot.app.exit()

app.run(headless=True, size=(120, 40), auto_pilot=first_frame)
print("RESULT " + json.dumps(result))
"""


def one_run() -> dict:
    proc = run_repo_python(["-c", CHILD, repr(time.time())], timeout=60)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        raise SystemExit(f"child failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    return json.loads(line[len("RESULT ") :])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args()
    one_run()  # warm the OS file cache and .pyc files: later runs measure a normal start, not a cold disk
    runs = [one_run() for _ in range(args.runs)]
    times = [r["first_frame_s"] for r in runs]
    summary = {
        "bench": "tui_first_frame",
        "command": f"python bench/tui_first_frame.py --runs {args.runs}",
        "median_s": round(statistics.median(times), 3),
        "min_s": round(min(times), 3),
        "max_s": round(max(times), 3),
        "runs_s": [round(t, 3) for t in times],
        "target_s": 1.0,
        "torch_imported": any(r["torch_imported"] for r in runs),
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tui_first_frame.json").write_text(json.dumps(summary, indent=2) + "\n")
    (args.out / "tui_first_frame.md").write_text(
        f"# Wizard time to first frame\n\n`{summary['command']}` on {summary['machine']}, Python {summary['python']}\n\n"
        f"median {summary['median_s']} s (min {summary['min_s']}, max {summary['max_s']}; target <= 1.0 s); "
        f"torch imported: {summary['torch_imported']}\n"
    )
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
