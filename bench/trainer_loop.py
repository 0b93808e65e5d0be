"""Tokens/s of one training config in three training loops, against the planner: is the loop the planner's figures
were measured in (bench/plan_accuracy.py) the one users run?

    python3 bench/trainer_loop.py --out $OUT                      # GPU: every config x loop, one process each
    python3 bench/trainer_loop.py --indices 0,1,2 --label a --out $OUT
    python3 bench/trainer_loop.py --smoke --out /tmp/tl           # CPU, a tiny GPT-2: checks the script
    python3 bench/trainer_loop.py --analyze bench/results/trainer_loop-2026-12-04-a.json
                                                                  # the markdown again, the planner as it is now

The loops, each config in a fresh process per loop (one DeepSpeed engine per process), the same model, DeepSpeed
config and input shape:
- ``bench``: plan_accuracy's run_config, what the planner's constants were fitted to: the GPU synchronized before and
  after every optimizer step, the step's median.
- ``script``: a DeepSpeed script's loop (the shape of runner/examples/train_hf.py): engine(...), engine.backward,
  engine.step, with nothing synchronizing the host but what DeepSpeed itself does; the mean over the timed steps,
  between two synchronizations.
- ``trainer``: the HF Trainer with the same DeepSpeed config (TrainingArguments(deepspeed=dict)); timed from the end
  of the last warm-up step to the end of the last timed step, synchronized there only.

Why: where the host's Python sets the pace (a small micro-batch of a ~1B model), what the host can issue while the
GPU drains decides the step. The bench synchronizes at each step's edges; a script lets the next forward's Python
run under the optimizer step's GPU tail (DeepSpeed's gradient clipping reads the norm on the host mid-step, then
queues the update), and the Trainer checks every micro-step's loss for NaN/inf on the host (logging_nan_inf_filter,
on by default), which a script's accumulating micro-steps do not wait for.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))  # _common, also when this file is loaded by a test

from _common import (  # noqa: E402
    load_bench_script,
    md_heading,
    md_table,
    repo_env,
    result_stem,
    run_in_group,
    write_result,
)

pa = load_bench_script("plan_accuracy")
Config = pa.Config

LOOPS = ("bench", "script", "trainer")
# The script and the Trainer: at least plan_accuracy's warm-up (5 steps at stage 3, whose first steps are slow), more
# timed steps than its 4, their mean (plan_accuracy's loop keeps its own counts and its median: it is what it is).
WARMUP, TIMED = 3, 8
WARMUP_STAGE3 = max(WARMUP, pa.WARMUP_STEPS_STAGE3)
# (model, stage, optimizer offload, checkpointing, micro-batch, gradient accumulation, seq): host-bound points of a
# ~1B LLaMA-style model (micro-batch 1-2, and 2 at 8 micro-steps), a compute-bound control, stage 0 and stage 3, a
# GPT-2 model, and the optimizer offloaded.
CONFIGS = (
    ("llama-1b", 1, "none", False, 1, 1, 2048),
    ("llama-1b", 1, "none", False, 2, 1, 2048),
    ("llama-1b", 1, "none", False, 2, 8, 2048),
    ("llama-1b", 1, "none", False, 8, 1, 2048),
    ("llama-1b", 0, "none", False, 4, 1, 2048),
    ("llama-1b", 3, "none", False, 4, 1, 2048),
    ("gpt2-large", 1, "none", False, 16, 1, 1024),
    ("pythia-1.4b", 2, "cpu", True, 8, 1, 2048),
)
SMOKE_CONFIGS = (
    ("tiny", 1, "none", False, 2, 1, pa.SMOKE_SEQ),
    ("tiny", 2, "none", True, 2, 2, pa.SMOKE_SEQ),
)


def configs(smoke: bool) -> list[Any]:
    rows = SMOKE_CONFIGS if smoke else CONFIGS
    return [
        Config(
            model=m, zero_stage=z, offload_optimizer=o, checkpointing=ck, micro_batch=b, grad_accum=g, seq=s
        )
        for m, z, o, ck, b, g, s in rows
    ]


def _sync(cuda: bool) -> None:
    import torch

    if cuda:
        torch.cuda.synchronize()


def _engine_inputs(c: Any, seq: int, smoke: bool) -> tuple[Any, Any, bool]:
    """(model, device, cuda): the bench's model for ``c``, built on the device as plan_accuracy builds it."""
    import torch

    cuda = torch.cuda.is_available() and not smoke
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    model = pa.build_model(pa.bench_spec(c.model), seq, device, smoke)
    if c.checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model.train(), device, cuda


def script_loop(c: Any, seq: int, smoke: bool) -> dict[str, Any]:
    import deepspeed
    import torch

    model, device, cuda = _engine_inputs(c, seq, smoke)
    engine, _, _, _ = deepspeed.initialize(
        model=model, model_parameters=model.parameters(), config=pa.ds_config(c, smoke)
    )
    ids = torch.randint(
        0, pa.bench_spec(c.model).vocab, (c.micro_batch, seq), generator=torch.Generator().manual_seed(1)
    )
    ids = ids.to(engine.device)

    def one_step() -> None:
        for _ in range(c.grad_accum):
            loss = engine(input_ids=ids, labels=ids).loss
            engine.backward(loss)
            engine.step()

    warmup, timed = _steps(smoke, c.zero_stage)
    for _ in range(warmup):
        one_step()
    _sync(cuda)
    t0 = time.perf_counter()
    ends = []
    for _ in range(timed):
        one_step()
        ends.append(time.perf_counter())
    _sync(cuda)
    total = time.perf_counter() - t0
    return {"step_s": round(total / timed, 5), "host_step_ends_s": _deltas(t0, ends), "device": device}


def trainer_loop(c: Any, seq: int, smoke: bool) -> dict[str, Any]:
    import torch
    from transformers import Trainer, TrainerCallback, TrainingArguments

    model, device, cuda = _engine_inputs(c, seq, smoke)
    warmup, timed = _steps(smoke, c.zero_stage)
    samples = (warmup + timed) * c.micro_batch * c.grad_accum
    ids = torch.randint(
        0, pa.bench_spec(c.model).vocab, (samples, seq), generator=torch.Generator().manual_seed(1)
    )

    class Ids(torch.utils.data.Dataset):  # type: ignore[type-arg]
        def __len__(self) -> int:
            return samples

        def __getitem__(self, i: int) -> dict[str, Any]:
            return {"input_ids": ids[i], "labels": ids[i]}

    class Clock(TrainerCallback):
        """The host's clock at each optimizer step's end; synchronized at the last warm-up step and the last
        timed step only."""

        def __init__(self) -> None:
            self.t0 = self.t1 = 0.0
            self.ends: list[float] = []

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step == warmup:
                _sync(cuda)
                self.t0 = time.perf_counter()
            elif state.global_step > warmup:
                if state.global_step == warmup + timed:
                    _sync(cuda)
                self.ends.append(time.perf_counter())
            if state.global_step == warmup + timed:
                self.t1 = time.perf_counter()

    clock = Clock()
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out,
            per_device_train_batch_size=c.micro_batch,
            gradient_accumulation_steps=c.grad_accum,
            max_steps=warmup + timed,
            learning_rate=1e-5,
            weight_decay=0.0,
            max_grad_norm=1.0,
            bf16=not smoke,
            deepspeed=pa.ds_config(c, smoke),
            logging_steps=10**6,
            save_strategy="no",
            report_to=[],
            disable_tqdm=True,
            gradient_checkpointing=c.checkpointing,
            gradient_checkpointing_kwargs={"use_reentrant": False} if c.checkpointing else None,
        )
        Trainer(model=model, args=args, train_dataset=Ids(), callbacks=[clock]).train()
    return {
        "step_s": round((clock.t1 - clock.t0) / timed, 5),
        "host_step_ends_s": _deltas(clock.t0, clock.ends),
        "device": device,
    }


def _steps(smoke: bool, stage: int = 0) -> tuple[int, int]:
    return (1, 2) if smoke else (WARMUP_STAGE3 if stage == 3 else WARMUP, TIMED)


def _deltas(t0: float, ends: list[float]) -> list[float]:
    return [round(b - a, 5) for a, b in zip([t0, *ends[:-1]], ends, strict=True)]


def bench_loop(c: Any, seq: int, smoke: bool) -> dict[str, Any]:
    row = pa.Row(config=asdict(c), world=1, seq_len=seq)
    pa.run_config(c, 1, seq, smoke, row)
    if row.status != "ok":
        raise RuntimeError(row.error or row.status)
    return {
        "step_s": statistics.median(row.step_s),
        "step_readings_s": row.step_s,
        "max_allocated": row.max_allocated,
        "max_reserved": row.max_reserved,
    }


def worker(args: argparse.Namespace) -> int:
    """One config in one loop, in this process; its reading appended to the raw file as one line of JSON."""
    import deepspeed
    import torch

    c = configs(args.smoke)[args.index]
    seq = c.seq_or(pa.SEQ)
    if torch.cuda.is_available() and not args.smoke:
        torch.cuda.set_device(0)
    deepspeed.init_distributed()
    reading: dict[str, Any] = {"index": args.index, "loop": args.loop, "config": asdict(c), "seq_len": seq}
    try:
        got = {"bench": bench_loop, "script": script_loop, "trainer": trainer_loop}[args.loop](
            c, seq, args.smoke
        )
        device = got.pop("device", None)
        if device is not None and device.type == "cuda":
            got["max_allocated"] = torch.cuda.max_memory_allocated(device)
            got["max_reserved"] = torch.cuda.max_memory_reserved(device)
        reading.update(got, status="ok")
        reading["tokens_per_sec"] = round(c.micro_batch * c.grad_accum * seq / got["step_s"], 1)
    except Exception as e:  # an OOM or a failing loop is a reading too
        reading.update(
            status="error", error=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
        )
    with open(args.readings, "a") as fh:
        fh.write(json.dumps(reading) + "\n")
    print(
        f"[{args.index} {args.loop}] {reading['status']} {reading.get('tokens_per_sec', reading.get('error'))}",
        flush=True,
    )
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown: DeepSpeed's atexit work is not what is measured


def predicted_tokens_per_sec(c: Any, seq: int, hw: Any) -> float:
    with pa.built_with_cache(True):
        spec = pa.bench_spec(c.model)
    return float(
        pa.estimate_throughput(hw, spec, c.strategy(1), seq, buffers=pa.row_buffers(c)).tokens_per_sec
    )


def _row(loops: dict[str, dict[str, Any]], hw: Any) -> list[str]:
    """One config's table row: the planner, each loop's tokens/s, the loops' ratios to the bench, the errors."""
    c = Config(**{**loops[next(iter(loops))]["config"], "tags": ()})
    seq = c.seq_or(pa.SEQ)
    pred = predicted_tokens_per_sec(c, seq, hw)
    tok = {
        k: loops[k]["tokens_per_sec"] if k in loops and loops[k]["status"] == "ok" else None for k in LOOPS
    }
    cells = ["-" if tok[k] is None else f"{tok[k]:,.0f}" for k in LOOPS]
    bench = tok["bench"]
    ratios = [
        "-" if tok[k] is None or bench is None else f"{tok[k] / bench:.3f}" for k in ("script", "trainer")
    ]
    errors = ["-" if tok[k] is None else f"{(pred / tok[k] - 1) * 100:+.1f} %" for k in LOOPS]
    label = pa._label({"config": asdict(c), "seq_len": seq, "world": 1})
    return [label, f"{pred:,.0f}", *cells, *ratios, *errors]


def markdown(doc: dict[str, Any]) -> str:
    by: dict[int, dict[str, dict[str, Any]]] = {}
    for r in doc["readings"]:
        by.setdefault(r["index"], {})[r["loop"]] = r
    hw = pa.HardwareReport.from_dict(doc["hardware"])  # the machine the readings were taken on
    rows = [_row(loops, hw) for _, loops in sorted(by.items())]
    lines = md_heading(
        f"Training loops: bench vs script vs HF Trainer ({doc['gpu']}, {doc['date']})",
        f"torch {doc['versions'].get('torch')}, deepspeed {doc['versions'].get('deepspeed')}, transformers "
        f"{doc['versions'].get('transformers')}. One process per config and loop. The bench loop: plan_accuracy's "
        f"{pa.WARMUP_STEPS} warm-up steps ({pa.WARMUP_STEPS_STAGE3} at stage 3) and the median of {pa.TIMED_STEPS} "
        f"timed; the script and the Trainer: {doc['warmup']} warm-up ({doc.get('warmup_stage3', doc['warmup'])} at "
        f"stage 3) and the mean of {doc['timed']} timed. Planner: tokens/s with the calibration as it is now; error = "
        "predicted / measured - 1.",
    )
    lines += md_table(
        ["config", "planner", "bench", "script", "trainer", "script/bench", "trainer/bench", "err bench",
         "err script", "err trainer"],
        rows,
    )  # fmt: skip
    failed = [r for r in doc["readings"] if r["status"] != "ok"]
    if failed:
        lines += ["", "Failed readings:", *[f"- {r['index']} {r['loop']}: {r.get('error')}" for r in failed]]
    return "\n".join(lines) + "\n"


def _versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in ("torch", "deepspeed", "transformers", "accelerate"):
        try:
            out[name] = __import__(name).__version__
        except Exception:
            out[name] = None
    return out


def launch(args: argparse.Namespace) -> int:
    import torch

    smoke = args.smoke or not torch.cuda.is_available()
    cs = configs(smoke)
    indices = [int(x) for x in args.indices.split(",")] if args.indices else list(range(len(cs)))
    bad = [i for i in indices if not 0 <= i < len(cs)]
    if bad:
        print(f"trainer_loop: --indices {bad} out of range: 0..{len(cs) - 1}", file=sys.stderr)
        return 2
    doc: dict[str, Any] = {
        "date": dt.date.today().isoformat(),
        "smoke": smoke,
        "gpu": torch.cuda.get_device_name(0) if not smoke else f"CPU ({platform.machine()})",
        "versions": _versions(),
        "hardware": (pa.smoke_hardware(1) if smoke else pa.bench_hardware(1)).to_dict(),
        "warmup": _steps(smoke)[0],
        "warmup_stage3": _steps(smoke, 3)[0],
        "timed": _steps(smoke)[1],
        "readings": [],
    }
    env = repo_env(
        RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.master_port)
    )
    if smoke:
        env["CUDA_VISIBLE_DEVICES"] = ""
    with tempfile.TemporaryDirectory() as tmp:
        readings = Path(tmp) / "readings.jsonl"
        for i in indices:
            for loop in LOOPS:
                cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--index", str(i), "--loop", loop,
                       "--readings", str(readings)] + (["--smoke"] if smoke else [])  # fmt: skip
                try:
                    run_in_group(cmd, cwd=ROOT, env=env, timeout=args.config_timeout_s)
                except subprocess.TimeoutExpired:
                    with open(readings, "a") as fh:
                        fh.write(json.dumps({"index": i, "loop": loop, "status": "error", "error": "timed out",
                                             "config": asdict(cs[i])}) + "\n")  # fmt: skip
        if readings.exists():
            doc["readings"] = [json.loads(line) for line in readings.read_text().splitlines() if line.strip()]
    text = markdown(doc)
    print(text)
    write_result(args.out, result_stem("trainer_loop", doc, args.label), doc, text)
    return 0 if all(r["status"] == "ok" for r in doc["readings"]) else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="CPU, a tiny GPT-2: check that the script works")
    ap.add_argument("--indices", default="", help="comma-separated indices of CONFIGS (default: all)")
    ap.add_argument("--label", default="", help="appended to the result files' name")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--config-timeout-s", type=float, default=150.0)
    ap.add_argument("--master-port", type=int, default=29571)
    ap.add_argument(
        "--analyze", type=Path, help="a raw JSON: write its markdown again with the planner as it is now"
    )
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--index", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--loop", choices=LOOPS, help=argparse.SUPPRESS)
    ap.add_argument("--readings", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    if args.analyze:
        doc = json.loads(args.analyze.read_text())
        text = markdown(doc)
        print(text)
        args.analyze.with_suffix(".md").write_text(text)
        return 0
    return launch(args)


if __name__ == "__main__":
    sys.exit(main())
