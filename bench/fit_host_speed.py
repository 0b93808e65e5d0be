"""Would the planner's tokens/s be closer if it scaled the host's work by the host's measured speed? Tried on the
committed readings (no GPU run), held out across GPU kinds.

    python bench/fit_host_speed.py                 # prints the table, writes the results
    python bench/fit_host_speed.py --out /tmp/hs   # elsewhere

Rows: every judged row (status ok, tokens/s timed, not diagnostic) of the raw files behind
plan_accuracy-2026-12-07-1gpu-all-ac.md that timed its host before it ran (bench/plan_accuracy.py Row.host_us:
microseconds per Python call, per eager torch op on small CPU tensors, per tiny autograd forward + backward). The
tokens/s error of such rows follows that speed (the report's "The host's speed": correlation 0.57 with the log of
the autograd call's time). The candidate model: the host's parts of a step -- the constants the planner prices host
time with (HOST_CONSTANTS: the framework's Python per layer, the launches, stage 3's hooks, the 16-bit wrappers and
the optimizer's per-layer / per-tensor host work) -- multiplied by (probe / reference) ** exponent, the reference
being the host the constants were fit on. Each probe is fit (a grid over the reference, around the rows' median,
and the exponent) on one GPU kind's rows and judged on the other's: the H200 machines' rows (what the constants were
fit on) and the H100 machines'. A scaling that is real carries over; one that only soaks up a kind's offset does
not.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import plan_accuracy as pa  # noqa: E402
from _common import md_heading, md_table, write_result  # noqa: E402

from wizard.hardware.report import HardwareReport  # noqa: E402
from wizard.planner import calibration as cal  # noqa: E402

INPUTS_FROM = "bench/results/plan_accuracy-2026-12-07-1gpu-all-ac-summary.json"
STEM = "host_speed_fit-2026-12-07"
PROBES = ("python_call", "torch_cpu_op", "autograd_tiny")
HOST_CONSTANTS = (
    "HOST_SECONDS_PER_LAYER",
    "STAGE3_SECONDS_PER_LAYER",
    "MICRO_STEP_SECONDS_PER_LAYER",
    "STAGE0_STEP_SECONDS",
    "OPTIMIZER_SECONDS_PER_LAYER",
    "STAGE0_SECONDS_PER_TENSOR",
    "STAGE0_FUSED_SECONDS_PER_TENSOR",
    "BOUNDARY_REDUCE_HOST_SECONDS_PER_LAYER",
)
REFERENCE_FACTORS = (0.8, 0.9, 1.0, 1.1, 1.2, 1.3)  # of the rows' median probe
EXPONENTS = (0.25, 0.5, 0.75, 1.0)
KINDS = ("H200", "H100")


@contextmanager
def host_scaled(factor: float) -> Iterator[None]:
    """The calibration's HOST_CONSTANTS multiplied by ``factor`` (a dict's every value), restored on exit."""
    saved = {name: getattr(cal, name) for name in HOST_CONSTANTS}
    try:
        for name, value in saved.items():
            scaled = {k: v * factor for k, v in value.items()} if isinstance(value, dict) else value * factor
            setattr(cal, name, scaled)
        yield
    finally:
        for name, value in saved.items():
            setattr(cal, name, value)


def errors(
    rows: list[tuple[HardwareReport, dict[str, Any], str]], probe: str, ref: float, exponent: float
) -> list[float]:
    """Each row's tokens/s error (predicted / measured - 1) with its host's parts scaled by its probe."""
    out = []
    for hw, r, _ in rows:
        with host_scaled((r["host_us"][probe] / ref) ** exponent):
            out.append(pa.row_throughput(hw, r).tokens_per_sec / r["tokens_per_sec"] - 1)
    return out


def summary(errs: list[float]) -> dict[str, float]:
    return {
        "rows": len(errs),
        "median": statistics.median(errs),
        "abs_median": statistics.median(abs(e) for e in errs),
        "within_10pct": sum(abs(e) <= 0.10 for e in errs) / len(errs),
    }


def fit(rows: list[tuple[HardwareReport, dict[str, Any], str]], probe: str) -> tuple[float, float]:
    """The (reference, exponent) of the grid whose errors on ``rows`` have the smallest median |error|."""
    median = statistics.median(r["host_us"][probe] for _, r, _ in rows)
    grid = [(median * f, a) for f in REFERENCE_FACTORS for a in EXPONENTS]
    return min(grid, key=lambda g: summary(errors(rows, probe, *g))["abs_median"])


def run(paths: list[Path] | None = None) -> dict[str, Any]:
    if paths is None:
        paths = [ROOT / p for p in json.loads((ROOT / INPUTS_FROM).read_text())["inputs"]]
    # the judged rows that timed their host with every probe, as the report's host-speed table takes them
    rows = pa.host_timed_rows([json.loads(p.read_text()) for p in paths], PROBES)
    by_kind = {k: [x for x in rows if k in x[2]] for k in KINDS}
    res: dict[str, Any] = {"inputs": INPUTS_FROM, "host_constants": list(HOST_CONSTANTS), "fits": []}
    res["unscaled"] = {k: summary(errors(v, PROBES[0], 1.0, 0.0)) for k, v in by_kind.items() if v}
    for probe in PROBES:
        for fit_on, held_out in (KINDS, KINDS[::-1]):
            if not by_kind[fit_on] or not by_kind[held_out]:
                continue
            ref, exponent = fit(by_kind[fit_on], probe)
            res["fits"].append(
                {
                    "probe": probe,
                    "fit_on": fit_on,
                    "reference": ref,
                    "exponent": exponent,
                    "fit": summary(errors(by_kind[fit_on], probe, ref, exponent)),
                    "held_out": summary(errors(by_kind[held_out], probe, ref, exponent)),
                }
            )
    return res


def _cell(s: dict[str, float]) -> str:
    return f"{s['median']:+.1%} / {s['abs_median']:.1%} / {s['within_10pct']:.0%}"


def markdown(res: dict[str, Any]) -> str:
    lines = md_heading(
        "Scaling the host's work by the host's measured speed: fit on one GPU kind, judged on the other",
        f"Rows: {res['inputs']}'s inputs that timed their host (bench/fit_host_speed.py). Cells: tokens/s error "
        "median (signed) / median |error| / share within 10 %. The host's parts ("
        + ", ".join(res["host_constants"])
        + ") times (probe / reference) ** exponent; reference and exponent fit on the first kind's rows.",
        "Unscaled (the planner as committed): "
        + "; ".join(f"{k} {s['rows']} rows {_cell(s)}" for k, s in res["unscaled"].items()),
    )
    lines += md_table(
        (
            "probe",
            "fit on",
            "reference",
            "exponent",
            "on the rows it was fit to",
            "held out (the other kind)",
        ),
        (
            (
                f["probe"],
                f["fit_on"],
                f"{f['reference']:.3g}",
                f["exponent"],
                _cell(f["fit"]),
                _cell(f["held_out"]),
            )
            for f in res["fits"]
        ),
    )
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args()
    res = run()
    text = markdown(res)
    print(text)
    write_result(args.out, STEM, res, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
