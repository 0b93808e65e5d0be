"""Refit the stage-0 optimizer step (16-bit) on the committed H200 measurements (no GPU run), per tensor, with
leave-one-model-out errors.

    python bench/fit_stage0_step.py                 # prints the fit, the held-out errors, writes the results
    python bench/fit_stage0_step.py --out /tmp/s0   # elsewhere

DeepSpeed's stage 0 in 16 bits wraps the optimizer in FP16_UnfusedOptimizer (for bf16 too), which takes the
parameter tensors one by one (runtime/fp16/unfused_optimizer.py, step, DeepSpeed 0.19.8). Rows: the step phase
(CUDA events around DeepSpeed's step, the median of the timed steps: bench/plan_accuracy.py Row.phase_s) of every ok
stage-0 row of the raw files below whose optimizer ran on the GPU, merged as `plan_accuracy.py --analyze` merges
them. Two forms are compared on them: the per-layer form the other stages use (calibration.OPTIMIZER_SECONDS_PER_LAYER
a layer and a per-parameter figure, as committed before this fit: 3.02e-11 s) and the per-tensor form
(calibration.STAGE0_SECONDS_PER_TENSOR a tensor, ModelSpec.parameter_tensors, and
OPTIMIZER_SECONDS_PER_PARAM["stage 0"]). Least squares on the log error, Nelder-Mead over log values; leave one
model out: each model's rows predicted with the constants fit on the other models' rows.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import plan_accuracy as pa  # noqa: E402

from wizard.hardware.report import HardwareReport  # noqa: E402
from wizard.planner import calibration as cal  # noqa: E402
from wizard.planner import finetune as ft  # noqa: E402

INPUTS_FROM = "bench/results/plan_accuracy-2026-12-04-1gpu-all-m-summary.json"
RAW_FILES = tuple(json.loads((ROOT / INPUTS_FROM).read_text())["inputs"])
FIT = ("STAGE0_SECONDS_PER_TENSOR", "OPTIMIZER_SECONDS_PER_PARAM[stage 0]")
PER_LAYER_BEFORE = 3.02e-11  # OPTIMIZER_SECONDS_PER_PARAM["stage 0"] as committed with the per-layer form
STEM = "stage0_step_fit-2026-12-04"


# Stage 0's fixed cost a step outside its step phase (calibration.STAGE0_STEP_SECONDS), fit to whole steps when the
# step itself was timed per layer; with the step per tensor, whole-step tokens/s are compared at these values.
FIXED_COST_VALUES = (0.0, 0.005, 0.0142)


def load_rows() -> tuple[HardwareReport, list[dict[str, Any]], list[dict[str, Any]]]:
    """(the H200, stage-0 rows with a timed step phase, every ok stage-0 row with tokens/s)."""
    hw, merged = pa.one_gpu_run([json.loads((ROOT / f).read_text()) for f in RAW_FILES])
    ok = [r for r in merged if r["status"] == "ok"]
    rows = [r for r in pa.optimizer_step_rows(ok) if r["config"]["zero_stage"] == 0]
    whole = [
        r
        for r in ok
        if r["config"]["zero_stage"] == 0
        and r.get("tokens_per_sec")
        and pa._row_optimizer(r["config"]) == "ds"
    ]
    assert rows, "no one-GPU stage-0 row with a timed step in the raw files"
    return hw, rows, whole


def fixed_cost_errors(hw: HardwareReport, whole: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Whole-step tokens/s errors of the stage-0 rows at each FIXED_COST_VALUES (the module's value restored)."""
    saved = cal.STAGE0_STEP_SECONDS
    out = {}
    try:
        for v in FIXED_COST_VALUES:
            cal.STAGE0_STEP_SECONDS = v
            errs = [pa.row_throughput(hw, r).tokens_per_sec / r["tokens_per_sec"] - 1 for r in whole]
            a = [abs(e) for e in errs]
            out[f"{v:g}"] = {
                "median_abs": statistics.median(a),
                "p95_abs": pa._pct(a, 0.95),
                "max_abs": max(a),
            }
    finally:
        cal.STAGE0_STEP_SECONDS = saved
    return out


def measured(r: dict[str, Any]) -> float:
    return float(statistics.median(r["phase_s"]["step"]))


def predicted(hw: HardwareReport, rows: list[dict[str, Any]]) -> list[float]:
    return [pa.step_phase_seconds(dict(pa.row_throughput(hw, r).parts)) for r in rows]


def per_layer_form(rows: list[dict[str, Any]]) -> list[float]:
    """The step as the per-layer form predicted it before (the H200 is the calibration card: no bandwidth scaling)."""
    return [
        cal.OPTIMIZER_SECONDS_PER_LAYER * layers + PER_LAYER_BEFORE * params
        for layers, _, params in map(_shape, rows)
    ]


def _shape(r: dict[str, Any]) -> tuple[float, float, float]:
    """(layers, tensors, parameters) of a row's model, as the optimizer steps them."""
    model = pa._row_case(r)[0]
    return float(model.layers), float(ft.trainable_tensor_count(model)), float(ft.trainable_params(model))


def _linear_fit(xs: list[tuple[float, float]], ys: list[float]) -> tuple[float, float]:
    """(a, b) minimising the squared relative error of a*x0 + b*x1 against ys (weighted least squares, 2x2)."""
    rows = [(x0 / y, x1 / y) for (x0, x1), y in zip(xs, ys, strict=True)]
    s00 = sum(u * u for u, _ in rows)
    s01 = sum(u * v for u, v in rows)
    s11 = sum(v * v for _, v in rows)
    t0, t1 = sum(u for u, _ in rows), sum(v for _, v in rows)
    det = s00 * s11 - s01 * s01
    return (t0 * s11 - t1 * s01) / det, (s00 * t1 - s01 * t0) / det


def compare_forms(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Both forms fit the same way on the same rows (relative least squares, no constant from elsewhere), on all
    rows and with each model held out: per layer (a a layer + b a parameter) against per tensor."""
    shapes = [_shape(r) for r in rows]
    ys = [measured(r) for r in rows]
    models = [r["config"]["model"] for r in rows]
    out: dict[str, dict[str, Any]] = {}
    for form, pick in (("per layer", 0), ("per tensor", 1)):
        xs = [(sh[pick], sh[2]) for sh in shapes]
        a, b = _linear_fit(xs, ys)
        fitted = [(a * x0 + b * x1) / y - 1 for (x0, x1), y in zip(xs, ys, strict=True)]
        held = []
        for i, m in enumerate(models):
            train = [j for j, other in enumerate(models) if other != m]
            a_h, b_h = _linear_fit([xs[j] for j in train], [ys[j] for j in train])
            held.append((a_h * xs[i][0] + b_h * xs[i][1]) / ys[i] - 1)
        out[form] = {"constants": [a, b], "errors": fitted, "held_out": held}
    return out


def _errors(pred: list[float], rows: list[dict[str, Any]]) -> list[float]:
    return [p / measured(r) - 1 for p, r in zip(pred, rows, strict=True)]


def fit(hw: HardwareReport, rows: list[dict[str, Any]]) -> dict[str, float]:
    found = pa._fit_log(FIT, lambda: predicted(hw, rows), [measured(r) for r in rows], step=0.4, iters=3000)
    return dict(found["constants"])


def run() -> dict[str, Any]:
    hw, rows, whole = load_rows()
    committed = {n: pa._get_constant(n) for n in FIT}
    now = _errors(predicted(hw, rows), rows)
    before = _errors(per_layer_form(rows), rows)
    constants = fit(hw, rows)
    held_out: dict[str, Any] = {}
    held: dict[str, float] = {}
    for model in dict.fromkeys(r["config"]["model"] for r in rows):
        c = fit(hw, [r for r in rows if r["config"]["model"] != model])
        test = [r for r in rows if r["config"]["model"] == model]
        try:
            for name, v in c.items():
                pa._set_constant(name, v)
            errs = _errors(predicted(hw, test), test)
        finally:
            for name, v in committed.items():
                pa._set_constant(name, v)
        held_out[model] = c
        held.update({pa._label(r): e for r, e in zip(test, errs, strict=True)})
    labels = [pa._label(r) for r in rows]
    return {
        "note": "refit on committed H200 measurements (no new GPU run): bench/fit_stage0_step.py",
        "inputs": list(RAW_FILES),
        "constants_committed": committed,
        "constants_fit": constants,
        "held_out_constants": held_out,
        "forms_refit": compare_forms(rows),
        "fixed_cost_committed": cal.STAGE0_STEP_SECONDS,
        "fixed_cost_rows": len(whole),
        "fixed_cost_errors": fixed_cost_errors(hw, whole),
        "rows": {
            lab: {
                "measured_s": measured(r),
                "tensors": int(tensors),
                "params": int(params),
                "layers": int(layers),
                "error_per_layer_form": b,
                "error_now": n,
                "error_held_out": held[lab],
            }
            for lab, r, (layers, tensors, params), b, n in zip(
                labels, rows, map(_shape, rows), before, now, strict=True
            )
        },
    }


def _abs(xs: list[float]) -> str:
    a = [abs(x) for x in xs]
    return f"{statistics.median(a):.1%} / {max(a):.1%}"


def markdown(res: dict[str, Any]) -> str:
    rows = res["rows"]
    md = [
        "# Stage-0 optimizer step, per tensor (committed H200 rows, no new GPU run)",
        "",
        f"`python bench/fit_stage0_step.py`: {len(rows)} stage-0 rows (bf16, one H200, one rank) with a timed step "
        f"phase, from the raw files of {INPUTS_FROM}. Signed errors of the step phase (positive: over-predicts).",
        "",
        "| constant | committed | fit on all rows |",
        "|---|---:|---:|",
        *[
            f"| {n} | {v:.4g} | {res['constants_fit'][n]:.4g} |"
            for n, v in res["constants_committed"].items()
        ],
        "",
        "| row | tensors | params | layers | step s | per-layer form as committed before | per tensor, now | held-out model |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for lab, r in rows.items():
        md.append(
            f"| {lab} | {r['tensors']} | {r['params'] / 1e9:.2f}B | {r['layers']} | {r['measured_s']:.4f} | "
            f"{r['error_per_layer_form']:+.1%} | {r['error_now']:+.1%} | {r['error_held_out']:+.1%} |"
        )
    col = {k: [r[k] for r in rows.values()] for k in ("error_per_layer_form", "error_now", "error_held_out")}
    md += [
        "",
        f"|error| median / max: per-layer form {_abs(col['error_per_layer_form'])}; per tensor, now "
        f"{_abs(col['error_now'])}; held-out model {_abs(col['error_held_out'])}.",
        "",
        "Both forms refit the same way on these rows (relative least squares; the per-layer column above keeps the "
        "constants fit elsewhere), |error| median / max:",
        "",
        "| form | a (per layer or tensor) | b (per parameter) | all rows | each model held out |",
        "|---|---:|---:|---:|---:|",
        *[
            f"| {form} | {f['constants'][0]:.3g} s | {f['constants'][1]:.3g} s | {_abs(f['errors'])} | "
            f"{_abs(f['held_out'])} |"
            for form, f in res["forms_refit"].items()
        ],
        "",
        f"Stage 0's fixed cost a step outside the step phase (STAGE0_STEP_SECONDS, committed "
        f"{res['fixed_cost_committed']:g} s): whole-step tokens/s |error| of the {res['fixed_cost_rows']} stage-0 "
        "rows with the per-tensor step, by value:",
        "",
        "| STAGE0_STEP_SECONDS | median | p95 | max |",
        "|---:|---:|---:|---:|",
        *[
            f"| {v} | {e['median_abs']:.1%} | {e['p95_abs']:.1%} | {e['max_abs']:.1%} |"
            for v, e in res["fixed_cost_errors"].items()
        ],
        "",
        "Leave-one-model-out constants:",
        "",
        *pa.held_out_constants_table(FIT, res["held_out_constants"]),
        "",
    ]
    return "\n".join(md)


def main() -> int:
    return pa.refit_main(__doc__, STEM, run, markdown)


if __name__ == "__main__":
    sys.exit(main())
