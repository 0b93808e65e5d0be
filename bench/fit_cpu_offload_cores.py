"""How the host's side of an offloaded optimizer step follows the cores a rank gets: the fit behind
calibration.CPU_ADAM_CORE_SECONDS_PER_PARAM, from committed readings (no GPU run).

    python bench/fit_cpu_offload_cores.py                 # prints the table, writes the results
    python bench/fit_cpu_offload_cores.py --out /tmp/oc   # elsewhere

Readings: two offloaded configs run on one H200 machine with the bench and every config's process narrowed to the
first 2, 4, 8 and 16 of its host's 16 CPUs (``bench/plan_accuracy.py --family phases --indices 40,1 --cpus N
--label coresN``): llama-1b ZeRO-3 with the optimizer and the parameters on the CPU, micro-batch 4, and GPT-2-XL
ZeRO-2 with the optimizer on the CPU, micro-batch 16, each with activation checkpointing. The step phase (DeepSpeed's
``step``, Row.phase_s) is where the host's work lands. Its slope against 1 / cores, per parameter, is the part the
cores share; the planner prices that part as CPU_ADAM_CORE_SECONDS_PER_PARAM / cores per rank, beside a part they do
not shorten (CPU_ADAM_SECONDS_PER_PARAM). The page compares the step phase the planner predicts now with the
measured one at each core count, and with what the earlier rule (1.49e8 parameters a second a core) predicted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import plan_accuracy as pa  # noqa: E402
from _common import md_heading, md_table, write_result  # noqa: E402

from wizard.hardware.report import HardwareReport  # noqa: E402
from wizard.planner import calibration as cal  # noqa: E402
from wizard.planner import finetune as ft  # noqa: E402
from wizard.planner.throughput import CPU_ADAM_PART  # noqa: E402

CORES = (2, 4, 8, 16)
INPUTS = tuple(f"bench/results/plan_accuracy-2026-12-07-1gpu-phases-cores{n}.json" for n in CORES)
STEM = "cpu_offload_cores-2026-12-07"
EARLIER_PARAMS_PER_SECOND_PER_CORE = 1.49e8  # the rule before this fit


def readings(inputs: tuple[str, ...] = INPUTS) -> list[dict[str, Any]]:
    """One entry per ok row: the model, the cores its process had, its parameters, the measured step phase and the
    planner's step phase now (with its CPU Adam part)."""
    out = []
    for path in inputs:
        doc = json.loads((ROOT / path).read_text())
        hw = HardwareReport.from_dict(doc["hardware"])
        cores = hw.host.work_cores
        for r in doc["rows"]:
            step = (r.get("phase_s") or {}).get("step")
            if r["status"] != "ok" or not step or cores is None:
                continue
            spec, _s, _seq = pa._row_case(r)
            parts = dict(pa.row_throughput(hw, r).parts)
            out.append(
                {
                    "model": r["config"]["model"],
                    "label": pa._label(r),
                    "cores": cores,
                    "params": ft.trainable_params(spec),
                    "measured_s": statistics.median(step),
                    "predicted_s": pa.step_phase_seconds(parts),
                    "cpu_adam_s": parts[CPU_ADAM_PART],
                }
            )
    return out


def slope(rows: list[dict[str, Any]]) -> float:
    """Least squares of (step(c) - step(16)) against params * (1/c - 1/16): core-seconds a parameter."""
    at16 = next(r["measured_s"] for r in rows if r["cores"] == 16)
    xs = [r["params"] * (1 / r["cores"] - 1 / 16) for r in rows if r["cores"] != 16]
    ys = [r["measured_s"] - at16 for r in rows if r["cores"] != 16]
    return sum(x * y for x, y in zip(xs, ys, strict=True)) / sum(x * x for x in xs)


def earlier_step(r: dict[str, Any]) -> float:
    """The step phase the per-core rule predicted: today's prediction with its CPU Adam part swapped back."""
    return (
        r["predicted_s"] - r["cpu_adam_s"] + r["params"] / (EARLIER_PARAMS_PER_SECOND_PER_CORE * r["cores"])
    )


def run(out: Path | None) -> dict[str, Any]:
    rows = readings()
    models = sorted({r["model"] for r in rows})
    slopes = {m: slope([r for r in rows if r["model"] == m]) for m in models}
    table = []
    for r in sorted(rows, key=lambda r: (r["model"], r["cores"])):
        r["error"] = r["predicted_s"] / r["measured_s"] - 1
        r["earlier_error"] = earlier_step(r) / r["measured_s"] - 1
        table.append(r)
    doc = {
        "inputs": list(INPUTS),
        "slopes": slopes,
        "mean_slope": statistics.mean(slopes.values()),
        "calibration": {
            "CPU_ADAM_CORE_SECONDS_PER_PARAM": cal.CPU_ADAM_CORE_SECONDS_PER_PARAM,
            "CPU_ADAM_SECONDS_PER_PARAM": cal.CPU_ADAM_SECONDS_PER_PARAM,
        },
        "rows": table,
    }
    md = md_heading(
        "The offloaded step against the host's cores (one H200 machine, 2026-12-07)",
        "The step phase (DeepSpeed's `step`: CPU Adam and the host's other passes, the copies) of two offloaded "
        "configs with the process narrowed to 2-16 of the host's 16 CPUs (`bench/plan_accuracy.py --family phases "
        "--indices 40,1 --cpus N`), against the planner's step phase now and under the per-core rule before "
        "(1.49e8 parameters a second a core). `python3 bench/fit_cpu_offload_cores.py`.",
        "Slope of the step against 1 / cores, core-seconds a parameter: "
        + ", ".join(f"{m} {v:.3g}" for m, v in slopes.items())
        + f"; calibration.CPU_ADAM_CORE_SECONDS_PER_PARAM = {cal.CPU_ADAM_CORE_SECONDS_PER_PARAM:.3g}, "
        f"CPU_ADAM_SECONDS_PER_PARAM = {cal.CPU_ADAM_SECONDS_PER_PARAM:.3g} (the 16-core total kept).",
    )
    md += md_table(
        ("config", "cores", "step measured s", "planner now s", "error", "per-core rule s", "error"),
        (
            (
                r["label"],
                r["cores"],
                f"{r['measured_s']:.3f}",
                f"{r['predicted_s']:.3f}",
                f"{r['error']:+.1%}",
                f"{earlier_step(r):.3f}",
                f"{r['earlier_error']:+.1%}",
            )
            for r in table
        ),
    )
    text = "\n".join(md) + "\n"
    print(text)
    if out is not None:
        write_result(out, STEM, doc, text)
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args(argv)
    run(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
