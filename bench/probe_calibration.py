"""Does one `dswiz probe` calibrate the planner on a model family it was not fitted to, and how long does it take?

    # On the GPU machine (DeepSpeed, transformers; one GPU), ~4-5 min (250 s on one H200):
    python3 bench/probe_calibration.py --out $OUT
    # Here, on CPU (2 gloo ranks, a tiny Qwen2, planned for 2xA100-80GB, top 2, one held-out run), ~1.5 min:
    python3 bench/probe_calibration.py --smoke --out /tmp/pc
    # Anywhere, again from a run's raw file (after a change to the calibration, no GPU needed):
    python3 bench/probe_calibration.py --analyze bench/results/probe_calibration-DATE-TAG.json [--out DIR]

Everything runs through the product, as a user runs it:
  1. `dswiz probe --model CONFIG --top 3` with runner/examples/train_hf.py --finetune full, into a fresh run history
     (DSWIZ_HISTORY): the planner's top 3 distinct strategies, each launched through the real launcher, stopped
     after its timed steps and recorded. Its wall time, from the command's start to its exit, is the probe's cost
     (the model is Qwen2-1.5B's shape, built from config on the GPU: a ~1.5B model).
  2. Held out: the planner's next distinct strategies (ranks 4 to 3+K) and the probe's winner at half its micro-batch,
     each written by `dswiz config` and run by `dswiz launch` the way the probe runs its candidates, recorded into a
     second history file, so that they never calibrate anything.
  3. Scored here: every held-out run is predicted by the planner from the physics alone (no history) and again with
     the corrections the probe's 3 records give (wizard.history.calibrate.corrections, exactly what `dswiz plan`
     applies); errors are |predicted / measured - 1| against what `dswiz launch` measured and recorded (steady
     tokens/s; peak GPU memory per rank as the run history holds it). The probe's own runs are never scored.

The model family (Qwen2: GQA with 2 KV heads, a 151,936-token vocabulary, SwiGLU) is one the planner's constants
were never fitted to (they come from GPT-2 and LLaMA-style rows). Results: <out>/probe_calibration-<date>-<tag>.json
(+ .md); the two history files are exported beside them (JSON lines, `dswiz history --import` reads them).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))  # _common, also when this file is loaded by a test

from _common import (  # noqa: E402
    PYTHIA_1_4B,
    PYTHIA_1B,
    QWEN2_1_5B,
    load_bench_script,
    md_heading,
    md_table,
    repo_env,
    run_in_group,
)

from wizard.config.sidecar import PlanSidecar, dump_sidecar, load_sidecar, read_sidecar  # noqa: E402
from wizard.hardware.report import HardwareReport  # noqa: E402
from wizard.history.calibrate import Corrections, corrections  # noqa: E402
from wizard.history.record import Measurement  # noqa: E402
from wizard.history.store import ENV_PATH, HistoryStore  # noqa: E402
from wizard.model import ModelSpec  # noqa: E402
from wizard.planner import PlanRequest, evaluate  # noqa: E402
from wizard.service.history import predicted_again  # noqa: E402
from wizard.service.probe import ProbeSetup, plan_for, run_candidate, write_candidate  # noqa: E402
from wizard.strategy import Strategy  # noqa: E402

TRAIN = ROOT / "runner" / "examples" / "train_hf.py"
TINY_QWEN2: dict[str, Any] = {
    **QWEN2_1_5B, "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 512, "max_position_embeddings": 256,
}  # fmt: skip
MODELS: dict[str, tuple[str, dict[str, Any]]] = {
    "qwen2-1.5b": ("Qwen2-1.5B's shape", QWEN2_1_5B),
    "pythia-1.4b": ("Pythia-1.4B's shape", PYTHIA_1_4B),
    "pythia-1b": ("Pythia-1B's shape", PYTHIA_1B),
}
GPU_RUN: dict[str, Any] = {"seq": 2048, "top": 3, "held_out": 3, "steps": 5, "warmup": 2, "timeout_s": 240.0}
SMOKE_RUN: dict[str, Any] = {"seq": 64, "top": 2, "held_out": 0, "steps": 3, "warmup": 1, "timeout_s": 400.0}
SMOKE_FLAGS = ("--hardware", "2xA100-80GB", "--precision", "fp32", "--global-batch", "8")


def _env(history: Path) -> dict[str, str]:
    return repo_env(**{ENV_PATH: str(history)})


def _script_args(model_config: Path, seq: int) -> list[str]:
    return ["--finetune", "full", "--model-config", str(model_config), "--seq-len", str(seq), "--steps", "100000",
            "--log-every", "1"]  # fmt: skip


def run_probe(work: Path, model_config: Path, run: dict[str, Any], smoke: bool) -> dict[str, Any]:
    """`dswiz probe` as a user types it; its JSON, its wall time and its stderr's end."""
    argv = [
        sys.executable, "-m", "wizard", "probe", "--model", str(model_config), "--seq-len", str(run["seq"]),
        "--top", str(run["top"]), "--steps", str(run["steps"]), "--warmup-steps", str(run["warmup"]),
        "--timeout", str(run["timeout_s"]), "--work-dir", str(work / "probe"), "--out", str(work / "winner"),
        "--json", *((*SMOKE_FLAGS, "--nproc", "2") if smoke else ()),
        str(TRAIN), *_script_args(model_config, run["seq"]),
    ]  # fmt: skip
    t0 = time.monotonic()
    proc = run_in_group(argv, env=_env(work / "probe-history.sqlite3"), cwd=work, capture=True,
                        stdin=subprocess.DEVNULL, timeout=run["timeout_s"] * run["top"] + 300)  # fmt: skip
    wall = time.monotonic() - t0
    try:
        out = json.loads(proc.stdout)
    except ValueError:
        out = {}
    return {"argv": argv[2:], "rc": proc.returncode, "wall_s": round(wall, 1), "result": out,
            "stderr_tail": proc.stderr.strip().splitlines()[-40:]}  # fmt: skip


def held_out_strategies(sidecar: PlanSidecar, probed: list[Strategy], k: int) -> list[tuple[str, Strategy]]:
    """The planner's best kinds that the probe did not measure, in rank order (from the same physics-only plan), and
    the winner at half its micro-batch."""
    p = plan_for(sidecar, PlanRequest(), use_history=False)
    seen = {s.kind for s in probed}
    later = []
    for c in p.candidates:  # the best of each kind, in the planner's rank order
        if c.fits and c.strategy.kind not in seen and len(later) < k:
            seen.add(c.strategy.kind)
            later.append(c)
    out = [(f"planner rank {p.candidates.index(c) + 1}", c.strategy) for c in later]
    if probed:
        best = probed[0]
        if best.micro_batch_size > 1:
            half = replace(best, micro_batch_size=best.micro_batch_size // 2)
            out.append(("probe winner at half its micro-batch", half))
    return out


def run_held_out(work: Path, sidecar: PlanSidecar, picks: list[tuple[str, Strategy]], run: dict[str, Any],
                 model_config: Path, smoke: bool, budget_s: float) -> list[dict[str, Any]]:  # fmt: skip
    """Each held-out strategy written by `dswiz config` and run by `dswiz launch` exactly as the probe runs its
    candidates, into the held-out history."""
    setup = ProbeSetup(
        script=str(TRAIN), script_args=tuple(_script_args(model_config, run["seq"])), work_dir=work / "held-out",
        out_dir=work / "unused", steps=run["steps"], warmup_steps=run["warmup"], timeout_s=run["timeout_s"],
        launch_args=("--nproc", "2") if smoke else (),
    )  # fmt: skip
    setup.work_dir.mkdir(parents=True, exist_ok=True)
    saved = dict(os.environ)
    os.environ.update(_env(work / "held-out-history.sqlite3"))
    out: list[dict[str, Any]] = []
    t0 = time.monotonic()
    try:
        for i, (why, s) in enumerate(picks):
            if time.monotonic() - t0 > budget_s:
                out.append({"why": why, "strategy": s.to_dict(), "status": "skipped: --budget-s spent"})
                continue
            config_dir, run_dir = setup.work_dir / f"config-{i}", setup.work_dir / f"run-{i}"
            start = time.monotonic()
            write_candidate(sidecar, s, config_dir, steps_per_print=1)
            status, figures, summary = run_candidate(setup, config_dir, run_dir, say=print)
            out.append({"why": why, "strategy": s.to_dict(), "status": status, "run_dir": str(run_dir),
                        "measured": figures.to_json(), "verdict": summary,
                        "wall_s": round(time.monotonic() - start, 1)})  # fmt: skip
            print(f"held out {why}: {status} {figures.tokens_per_sec} tokens/s ({summary})", flush=True)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return out


# ----------------------------------------------------------------------------------------------------- scoring


def _err(predicted: float | None, measured: float | None) -> float | None:
    if not predicted or not measured:
        return None
    return predicted / measured - 1


def score(hw: HardwareReport, model: ModelSpec, request: PlanRequest, probe_runs: list[Measurement],
          held_out: list[tuple[Strategy, Measurement | None]]) -> dict[str, Any]:  # fmt: skip
    """Each held-out run (the strategy it ran, its history record) predicted before (physics) and after (the probe's
    corrections); medians of |error|. A run that finished can show at most the card's memory (the allocator gives
    its cache back before it fails), so a memory prediction above the card counts as the card, as bench/
    plan_accuracy.py counts one above an allocator cap."""
    key = probe_runs[0].hardware.key if probe_runs else ""
    host_cpu = probe_runs[0].hardware.host_cpu if probe_runs else ""
    card = float(hw.min_gpu_memory_bytes or 0) or None

    def shown(predicted: float) -> float:
        return min(predicted, card) if card else predicted

    # As `dswiz plan` reads the history (wizard.service.history): runs predicted by other physics are predicted again
    # by today's; these runs are all of the sidecar's model, so a record from before records held its spec gets it.
    runs = [r if r.model_spec else replace(r, model_spec=model.to_dict()) for r in probe_runs]
    again = [predicted_again(r, hw) for r in runs]
    corr: Corrections = corrections([r for r in again if r is not None], key, host_cpu)
    rows: list[dict[str, Any]] = []
    for s, r in held_out:
        if (
            r is None
            or r.outcome not in ("success", "interrupted", "ended")
            or r.measured.tokens_per_sec is None
        ):
            rows.append(
                {"strategy": s.to_dict(), "outcome": r.outcome if r else "not recorded", "scored": False}
            )
            continue
        before = evaluate(hw, model, s, replace(request, calibration=None)).predicted
        after = evaluate(hw, model, s, replace(request, calibration=corr)).predicted
        m = r.measured
        rows.append({
            "strategy": s.to_dict(), "family": r.family, "outcome": r.outcome, "scored": True,
            "measured": {"tokens_per_sec": m.tokens_per_sec, "peak_gpu_bytes": m.peak_gpu_bytes},
            "before": {"tokens_per_sec": before.tokens_per_sec, "peak_gpu_bytes": before.gpu_bytes},
            "after": {"tokens_per_sec": after.tokens_per_sec, "peak_gpu_bytes": after.gpu_bytes},
            "tokens_err": [_err(before.tokens_per_sec, m.tokens_per_sec), _err(after.tokens_per_sec, m.tokens_per_sec)],
            "memory_err": [_err(shown(before.gpu_bytes), m.peak_gpu_bytes),
                           _err(shown(after.gpu_bytes), m.peak_gpu_bytes)],
        })  # fmt: skip
    summary: dict[str, float | None] = {}
    for what in ("tokens_err", "memory_err"):
        for i, when in enumerate(("before", "after")):
            vals = [abs(r[what][i]) for r in rows if r.get("scored") and r[what][i] is not None]
            summary[f"{what}_{when}_median"] = statistics.median(vals) if vals else None
            summary[f"{what}_{when}_max"] = max(vals) if vals else None
    return {
        "corrections": corr.summary(),
        "families": sorted(corr.families or {}),
        "rows": rows,
        "summary": summary,
    }


def _records(path: Path) -> list[Measurement]:
    return sorted(HistoryStore(path).runs(), key=lambda r: r.started_at) if path.is_file() else []


def analyze(doc: dict[str, Any]) -> dict[str, Any]:
    """Score a raw document (its sidecar's hardware and model, its two exported histories)."""
    sidecar = load_sidecar(doc["sidecar"])
    request = PlanRequest(seq_len=sidecar.seq_len, global_batch=sidecar.global_batch)
    probe_runs = [m for m in map(Measurement.from_json, doc["probe_history"]) if m is not None]
    records = {m.run_dir: m for m in map(Measurement.from_json, doc["held_out_history"]) if m is not None}
    held = [(Strategy.from_dict(h["strategy"]), records.get(h.get("run_dir", ""))) for h in doc["held_out"]]
    return score(sidecar.hardware, sidecar.model, request, probe_runs, held)


# ----------------------------------------------------------------------------------------------------- report


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.1f} %"


def _abs_pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f} %"


def markdown(doc: dict[str, Any]) -> str:
    p, sc = doc["probe"], doc["score"]
    cands = p["result"].get("candidates", [])
    intro = (
        f"{doc['date']}, {doc['tag']}: `dswiz probe --top {doc['run']['top']}` of {doc['model_name']} "
        f"(seq {doc['run']['seq']}, full fine-tune, runner/examples/train_hf.py), then {len(doc['held_out'])} held-out "
        f"runs of strategies the probe did not measure, scored before / after the probe's corrections. "
        f"Versions: {doc['versions']}."
    )
    lines = [*md_heading("One probe calibrates the planner (a model family it was not fitted to)", intro)]
    chosen = p["result"].get("chosen")
    lines += [f"**Probe wall time: {p['wall_s']:.0f} s** for {len(cands)} candidates (rc {p['rc']}; "
              f"chosen: candidate {chosen}).", ""]  # fmt: skip
    rows = [[c["label"], c["strategy"]["micro_batch_size"], c["status"],
             f"{c['predicted']['tokens_per_sec']:,.0f}",
             f"{c['measured']['tokens_per_sec']:,.0f}" if c["measured"]["tokens_per_sec"] else "-",
             f"{c['predicted']['peak_gpu_bytes'] / 2**30:.1f}",
             f"{c['measured']['peak_gpu_bytes'] / 2**30:.1f}" if c["measured"]["peak_gpu_bytes"] else "-"]
            for c in cands]  # fmt: skip
    lines += md_table(
        ["probe candidate", "mbs", "status", "pred tok/s", "meas tok/s", "pred GiB", "meas GiB"], rows
    )
    lines += ["", f"Corrections from the probe: {sc['corrections']}", ""]
    rows = []
    for h, r in zip(doc["held_out"], sc["rows"], strict=False):
        s = r["strategy"]
        label = f"z{s.get('zero_stage')} opt:{s.get('offload_optimizer')} ckpt:{s.get('activation_checkpointing')}"
        if not r.get("scored"):
            rows.append([h["why"], label, s.get("micro_batch_size"), r["outcome"], "-", "-"])
            continue
        rows.append([h["why"], label, s.get("micro_batch_size"), r["outcome"],
                     f"{_pct(r['tokens_err'][0])} -> {_pct(r['tokens_err'][1])}",
                     f"{_pct(r['memory_err'][0])} -> {_pct(r['memory_err'][1])}"])  # fmt: skip
    lines += md_table(["held out", "strategy", "mbs", "outcome", "tokens/s error", "GPU memory error"], rows)
    s = sc["summary"]
    lines += ["", "Median |error| on the held-out runs, before -> after (target <= 3 % after):", "",
              f"- tokens/s: {_abs_pct(s['tokens_err_before_median'])} -> {_abs_pct(s['tokens_err_after_median'])} "
              f"(max {_abs_pct(s['tokens_err_before_max'])} -> {_abs_pct(s['tokens_err_after_max'])})",
              f"- GPU memory: {_abs_pct(s['memory_err_before_median'])} -> {_abs_pct(s['memory_err_after_median'])} "
              f"(max {_abs_pct(s['memory_err_before_max'])} -> {_abs_pct(s['memory_err_after_max'])})", ""]  # fmt: skip
    return "\n".join(lines)


def _save(out: Path, doc: dict[str, Any]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"probe_calibration-{doc['date']}-{doc['tag']}.json"
    path.write_text(json.dumps(doc, indent=1, default=str))
    path.with_suffix(".md").write_text(markdown(doc))
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--out",
        type=Path,
        default=None,
        help="where results go (default bench/results; with --analyze:"
        " printed only, unless --out is given, so a committed result page keeps its notes)",
    )
    ap.add_argument(
        "--smoke", action="store_true", help="CPU, 2 gloo ranks, a tiny Qwen2: check the script works"
    )
    ap.add_argument("--tag", default=None, help="file name tag (default: 1gpu, or smoke)")
    ap.add_argument(
        "--budget-s", type=float, default=330.0, help="start no held-out run after this many seconds"
    )
    ap.add_argument("--analyze", type=Path, help="score a raw result file again (no runs)")
    ap.add_argument(
        "--model",
        choices=sorted(MODELS),
        default="qwen2-1.5b",
        help="the model probed and held out (built from its config on the GPU; --smoke: a tiny Qwen2)",
    )
    args = ap.parse_args(argv)
    if args.analyze:
        raw = json.loads(args.analyze.read_text())
        raw["score"] = analyze(raw)
        print(markdown(raw))
        if args.out is not None:
            print(f"wrote {_save(args.out, raw)}")
        return 0
    run = SMOKE_RUN if args.smoke else GPU_RUN
    tag = args.tag or (
        "smoke" if args.smoke else "1gpu" if args.model == "qwen2-1.5b" else f"1gpu-{args.model}"
    )
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"probe-calibration-{os.getpid()}"
    work.mkdir(parents=True)
    model_config = work / "config.json"
    model_name, model_dict = ("tiny Qwen2", TINY_QWEN2) if args.smoke else MODELS[args.model]
    model_config.write_text(json.dumps(model_dict, indent=1))
    t0 = time.monotonic()
    probe = run_probe(work, model_config, run, args.smoke)
    print(f"probe: rc {probe['rc']} in {probe['wall_s']:.0f} s", flush=True)
    if probe["rc"] not in (0, 1) or not probe["result"]:
        print("\n".join(probe["stderr_tail"]), file=sys.stderr)
    sidecar = read_sidecar(work / "probe" / "plan")
    if sidecar is None:
        print("the probe wrote no plan: see its output above", file=sys.stderr)
        return 1
    probed = [Strategy.from_dict(c["strategy"]) for c in probe["result"].get("candidates", [])]
    chosen = probe["result"].get("chosen")
    if chosen is not None:  # the winner first: held_out_strategies halves its micro-batch
        probed.insert(0, probed.pop(chosen))
    picks = held_out_strategies(sidecar, probed, run["held_out"])
    held = run_held_out(
        work, sidecar, picks, run, model_config, args.smoke, args.budget_s - (time.monotonic() - t0)
    )
    doc: dict[str, Any] = {
        "date": dt.date.today().isoformat(), "tag": tag, "run": run, "versions": load_bench_script("plan_accuracy")._versions(),
        "model_name": model_name, "model_config": json.loads(model_config.read_text()),
        "sidecar": dump_sidecar(sidecar),  # the probe's plan: hardware, model, sequence, batch
        "probe": probe, "held_out": held,
        "probe_history": [r.to_json() for r in _records(work / "probe-history.sqlite3")],
        "held_out_history": [r.to_json() for r in _records(work / "held-out-history.sqlite3")],
    }  # fmt: skip
    doc["score"] = analyze(doc)
    path = _save(args.out or ROOT / "bench" / "results", doc)
    print(markdown(doc))
    print(f"wrote {path} and {path.with_suffix('.md')} in {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
