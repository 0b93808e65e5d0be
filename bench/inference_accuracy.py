"""How right is `dswiz plan --mode inference`? Real ZeRO-3 inference forward passes (no optimizer, eval mode,
torch.no_grad, a loss over every position as evaluation does) of GPT-2-family models vs the planner's predictions.

    # On the GPU machine (one launcher start per config), ~3-6 minutes:
    python3 bench/inference_accuracy.py --gpus 1 --budget-s 400 --out $OUT
    # The LLaMA-style 7B at seq 2048 (a 24 GiB card needs the parameters on the CPU or a small micro-batch):
    python3 bench/inference_accuracy.py --models llama-7b --seq 2048 --label llama7b --budget-s 400 --out $OUT
    # Here, on CPU: the real launcher, 1 gloo rank, a tiny GPT-2, 2 configs (proves the script before the GPU):
    python3 bench/inference_accuracy.py --smoke --out /tmp/ia

Grid, in priority order (stops starting configs once --budget-s is spent; every finished row is saved at once):
  for each model (default gpt2-medium and gpt2-xl; --models), parameters on the GPU (none) and on the CPU (cpu;
  NVMe needs libaio, absent there):
  R  the planner's largest micro-batch for a 24 GiB card (--caps), run under that cap (set_per_process_memory_fraction): must
     not OOM; and twice it under the same cap: should OOM (or measure above the cap);
  S  micro-batch 1, 8 and 32 uncapped: memory (max allocated / reserved, device-level) and tokens/s vs predicted.
Each config in a process of its own (an engine leaks its model states into the next config of the same process:
docs/measurements.md), started by the real DeepSpeed launcher: the model (GPT-2 or LLaMA-style, from the preset's
shape) built inside deepspeed.zero.Init (so no rank ever holds it whole, as dswiz tells users to), bf16, seq 1024
(--seq), 3 warm-up forwards, then the median of 5 timed forwards. Results:
<out>/inference_accuracy-<date>-<1gpu|smoke>[-label].json (+ .md), a row added as each config ends.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import importlib.util
import itertools
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))  # _common, also when this file is loaded by a test

from _common import repo_env, run_in_group  # noqa: E402

from wizard.hardware.report import HardwareReport  # noqa: E402
from wizard.model import load_model_spec  # noqa: E402
from wizard.planner import PlanRequest, evaluate, max_micro_batch  # noqa: E402
from wizard.planner.memory import device_overhead  # noqa: E402
from wizard.strategy import Strategy  # noqa: E402

GiB = 1024**3
SEQ, SMOKE_SEQ = 1024, 32
MODELS = ("gpt2-medium", "gpt2-xl")
OFFLOADS = ("none", "cpu")
CAP_GIB = 24
SWEEP_MICRO_BATCHES = (1, 8, 32)  # the S tier
# ZeRO-3's parameter coordinator prefetches by a trace of the order its modules ran in: the first pass only turns
# recording on, the second records, and prefetching by the trace starts with the third (DeepSpeed 0.19.8,
# runtime/zero/partitioned_param_coordinator.py reset_step). The rows of 2026-12-01/02 ran one warm-up forward; their
# first timed forward took 3-5x the next two, and the median of three settled on the slower of the steady two.
WARMUP, TIMED = 3, 5


@functools.cache
def _plan_accuracy() -> Any:
    """bench/plan_accuracy.py's helpers (hardware as the planner sees it, versions, atomic save)."""
    spec = importlib.util.spec_from_file_location("plan_accuracy", ROOT / "bench" / "plan_accuracy.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["plan_accuracy"] = module
    spec.loader.exec_module(module)
    return module


def doc_use_cache(doc: dict[str, Any]) -> bool:
    """Whether a raw file's models were built with use_cache (the KV cache of an eval forward): files say so since
    2026-12-02; before that day's change to bench/plan_accuracy.py's USE_CACHE the bench built them without it."""
    return bool(doc.get("use_cache", str(doc.get("date", "")) >= "2026-12-02"))


@dataclass(frozen=True)
class Config:
    tier: str
    model: str
    offload_param: str
    micro_batch: int
    cap_gib: int | None

    def strategy(self, world: int) -> Strategy:
        return Strategy(
            zero_stage=3,
            mode="inference",
            offload_param=self.offload_param,  # type: ignore[arg-type]
            micro_batch_size=self.micro_batch,
            gpus_per_node=world,
        )


@dataclass
class Row:
    config: dict[str, Any]
    predicted: dict[str, Any]
    status: str = "pending"  # ok | oom | error
    error: str | None = None
    max_allocated: int | None = None
    max_reserved: int | None = None
    outside_allocator: int | None = None
    forward_s: list[float] = field(default_factory=list)
    tokens_per_sec: float | None = None
    init_s: float | None = None


def card(c: Config, world: int) -> int | None:
    """The card a capped GPU stands for: the cap is the allocator's; the CUDA context and NCCL, as the planner counts
    them, sit outside it (as bench/plan_accuracy.py's card_for_cap)."""
    if c.cap_gib is None:
        return None
    return c.cap_gib * GiB + device_overhead(c.strategy(world))


def predict(hw: HardwareReport, c: Config, world: int, seq: int, use_cache: bool = True) -> dict[str, Any]:
    """The planner's figures for ``c``, for a model built with ``use_cache`` (doc_use_cache)."""
    request = PlanRequest(mode="inference", seq_len=seq, gpu_memory_bytes=card(c, world))
    pa = _plan_accuracy()
    with pa.built_with_cache(use_cache):
        cand = evaluate(hw, pa.bench_spec(c.model), c.strategy(world), request)
    p = cand.predicted
    return {
        "allocated": p.gpu_allocated_bytes,
        "reserved": p.gpu_reserved_bytes,
        "device": p.gpu_bytes,
        "tokens_per_sec": round(p.tokens_per_sec, 1),
        "fits": cand.fits,
        "max_micro_batch": cand.max_micro_batch,
    }


def build_grid(
    hw: HardwareReport,
    world: int,
    smoke: bool,
    models: tuple[str, ...] = MODELS,
    seq: int = SEQ,
    caps: tuple[int, ...] = (CAP_GIB,),
    sweep: tuple[int, ...] = SWEEP_MICRO_BATCHES,
    twice: bool = True,
) -> list[Config]:
    """The R tier (the largest micro-batch the planner lets fit each cap, then twice it unless ``twice`` is off),
    then the S tier (``sweep`` micro-batches uncapped), for each model and parameter placement."""
    if smoke:
        return [Config("S", "gpt2-tiny", off, 2, None) for off in OFFLOADS]
    grid: list[Config] = []
    for cap in caps:
        for model in models:
            for off in OFFLOADS:
                probe = Config("R", model, off, 1, cap)
                top = max_micro_batch(
                    hw,
                    load_model_spec(model),
                    probe.strategy(world),
                    seq,
                    gpu_memory_bytes=card(probe, world),
                    limit=512,
                )
                if top:
                    grid += [Config("R", model, off, top, cap)]
                    grid += [Config("R", model, off, 2 * top, cap)] if twice else []
    grid += [Config("S", m, off, b, None) for m in models for off in OFFLOADS for b in sweep]
    return grid


def ds_config(c: Config, smoke: bool) -> dict[str, Any]:
    """What `dswiz config --yes --mode inference` writes (wizard/config/build.py), minus the observability keys."""
    zero: dict[str, Any] = {"stage": 3, "overlap_comm": True}
    if c.offload_param != "none":
        zero["offload_param"] = {"device": c.offload_param, "pin_memory": not smoke}
    cfg: dict[str, Any] = {"train_micro_batch_size_per_gpu": c.micro_batch, "zero_optimization": zero}
    cfg["bf16"] = {"enabled": True}
    return cfg


def run_config(c: Config, seq: int, smoke: bool, row: Row) -> None:
    import deepspeed
    import torch

    cuda = torch.cuda.is_available() and not smoke
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    spec = load_model_spec("layers=2,hidden=64,heads=4,vocab=256" if smoke else c.model)
    vocab = spec.vocab
    baseline = 0
    if cuda:
        baseline = _plan_accuracy().cap_device_memory(device, c.cap_gib)
    engine = model = None
    start = time.perf_counter()
    cfg = ds_config(c, smoke)
    try:
        config, factory = _plan_accuracy().hf_model_config(spec, seq)
        torch.manual_seed(0)
        # TorchDynamo imported for the first time inside zero.Init raises (runner/verdict.py KNOWN_EXCEPTIONS): the
        # model class's first use imports it, so import it before.
        import torch._dynamo

        with deepspeed.zero.Init(config_dict_or_path=cfg, dtype=torch.bfloat16):
            model = factory(config)
        model.eval()
        engine, _, _, _ = deepspeed.initialize(model=model, config=cfg)
        engine.eval()
        row.init_s = round(time.perf_counter() - start, 3)
        gen = torch.Generator(device="cpu").manual_seed(1)
        ids = torch.randint(0, vocab, (c.micro_batch, seq), generator=gen).to(engine.device)
        with torch.no_grad():
            for i in range(WARMUP + TIMED):
                if cuda:
                    torch.cuda.synchronize(device)
                t0 = time.perf_counter()
                engine(input_ids=ids, labels=ids)
                if cuda:
                    torch.cuda.synchronize(device)
                if i >= WARMUP:
                    row.forward_s.append(round(time.perf_counter() - t0, 5))
        row.tokens_per_sec = round(c.micro_batch * seq / statistics.median(row.forward_s), 1)
        row.status = "ok"
    except torch.OutOfMemoryError as e:
        row.status, row.error = "oom", str(e).splitlines()[0][:300]
    except Exception as e:  # a config that fails must not end the run
        row.status, row.error = (
            "error",
            f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300],
        )
    finally:
        pa = _plan_accuracy()
        if cuda:
            row.max_allocated, row.max_reserved, row.outside_allocator = pa.device_memory_peaks(
                device, baseline
            )
        pa.destroy_engine(engine)
        del engine, model
        pa.release_device_memory(device, cuda)


def _err(measured: float | None, predicted: float | None) -> str:
    if not measured or predicted is None:
        return "-"
    return f"{(predicted - measured) / measured * 100:+.1f} %"


def _line(i: int, n: int, row: Row) -> str:
    c, p = row.config, row.predicted
    cap = f" cap {c['cap_gib']} GiB" if c["cap_gib"] else ""
    text = (
        f"[{i + 1}/{n}] {c['tier']} {c['model']} params->{c['offload_param']} mbs {c['micro_batch']}{cap}: "
    )
    text += row.status
    if row.max_allocated is not None:
        text += (
            f", allocated {row.max_allocated / GiB:.2f} GiB (pred {p['allocated'] / GiB:.2f}, "
            f"{_err(row.max_allocated, p['allocated'])}), reserved {(row.max_reserved or 0) / GiB:.2f} GiB "
            f"(pred {p['reserved'] / GiB:.2f}, {_err(row.max_reserved, p['reserved'])})"
        )
    if row.tokens_per_sec:
        text += (
            f", {row.tokens_per_sec:,.0f} tok/s (pred {p['tokens_per_sec']:,.0f}, "
            f"{_err(row.tokens_per_sec, p['tokens_per_sec'])})"
        )
    return text + (f" -- {row.error}" if row.error else "") + f" [planner: fits={p['fits']}]"


def markdown(doc: dict[str, Any]) -> str:
    where = "smoke" if doc["smoke"] else f"{doc['world']} GPU"
    lines = [
        f"# inference_accuracy {doc['date']} ({where})",
        "",
        f"seq {doc['seq_len']}, bf16, ZeRO-3 inference (DeepSpeedZeRoOffload), forward + loss under no_grad.",
        "",
        "| tier | model | params | mbs | cap | status | allocated GiB (pred, err) | reserved GiB (pred, err) "
        "| device GiB (pred, err) | tok/s (pred, err) | planner fits |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["rows"]:
        c, p = r["config"], r["predicted"]
        alloc = res = dev = tps = "-"
        if r["max_reserved"] is not None and r.get("outside_allocator") is not None and p.get("device"):
            used = r["max_reserved"] + r["outside_allocator"]
            dev = f"{used / GiB:.2f} ({p['device'] / GiB:.2f}, {_err(used, p['device'])})"
        if r["max_allocated"] is not None:
            alloc = f"{r['max_allocated'] / GiB:.2f} ({p['allocated'] / GiB:.2f}, {_err(r['max_allocated'], p['allocated'])})"
            res = f"{r['max_reserved'] / GiB:.2f} ({p['reserved'] / GiB:.2f}, {_err(r['max_reserved'], p['reserved'])})"
        if r["tokens_per_sec"]:
            tps = f"{r['tokens_per_sec']:,.0f} ({p['tokens_per_sec']:,.0f}, {_err(r['tokens_per_sec'], p['tokens_per_sec'])})"
        lines.append(
            f"| {c['tier']} | {c['model']} | {c['offload_param']} | {c['micro_batch']} | {c['cap_gib'] or '-'} "
            f"| {r['status']} | {alloc} | {res} | {dev} | {tps} | {p['fits']} |"
        )
    return "\n".join(lines) + "\n"


FIT_NAMES = (
    "RESERVED_FIXED_BYTES_INFERENCE (GiB)",
    "FRAGMENTATION_SHARE_INFERENCE",
    "FRAGMENTATION_SHARE_INFERENCE_PARAM_OFFLOAD",
    "FRAGMENTATION_SHARE_KV_CACHE",
)
# The grid --analyze searches, per FIT_NAMES entry.
FIT_GRID = (
    [i / 20 for i in range(21)],
    [i / 20 for i in range(10, 41)],
    [i / 10 for i in range(10, 45)],
    [i / 20 for i in range(21)],
)


# The inference throughput constants (wizard/planner/calibration.py) --analyze refits to the rows' tokens/s.
TPS_FIT_NAMES = ("INFERENCE_LAUNCH_SHARE", "INFERENCE_STAGE3_HOOK_SHARE", "INFERENCE_TRAFFIC_SHARE")


def analyze(paths: list[Path]) -> dict[str, Any]:
    """Every ok row of raw files, predicted again by today's planner (for the model as that file built it), and the
    allocator-cache constants refit to them on a grid (FIT_GRID): RESERVED_FIXED_BYTES_INFERENCE +
    FRAGMENTATION_SHARE_INFERENCE(_PARAM_OFFLOAD) x one layer's transient per sample + FRAGMENTATION_SHARE_KV_CACHE x
    the KV cache per sample (models built with use_cache); the loss squares the device-memory errors, and a setting
    that lets a capped run that ran out of memory fit (its predicted allocation plus that cache, with the 5 % margin,
    within the cap) is not taken. Rows whose reserved reached the cap (within 1 GiB) are left out of the loss: there
    the allocator gave cache back."""
    from wizard.planner import calibration as cal
    from wizard.planner.memory import inference_layer_bytes_per_token, kv_cache_bytes_per_token

    rows, ooms = [], []
    for path in paths:
        doc = json.loads(path.read_text())
        hw, seq, use_cache = HardwareReport.from_dict(doc["hardware"]), doc["seq_len"], doc_use_cache(doc)
        for r in doc["rows"]:
            c = Config(**r["config"])
            spec = _plan_accuracy().bench_spec(c.model)
            sizes = {
                "layer": inference_layer_bytes_per_token(spec, seq) * seq * c.micro_batch,
                "kv": kv_cache_bytes_per_token(spec) * seq * c.micro_batch if use_cache else 0,
            }
            if r["status"] == "oom" and c.cap_gib:
                ooms.append({"config": r["config"], **sizes,
                             "predicted": predict(hw, c, doc["world"], seq, use_cache)})  # fmt: skip
            if r["status"] != "ok" or not r.get("max_reserved") or r.get("outside_allocator") is None:
                continue
            p = predict(hw, c, doc["world"], seq, use_cache)
            rows.append({"file": path.name, "config": r["config"], "row": r, "predicted": p, **sizes,
                         "world": doc["world"], "use_cache": use_cache, "hw": hw, "seq": seq,
                         "censored": bool(c.cap_gib and r["max_reserved"] > (c.cap_gib - 1) * GiB)})  # fmt: skip

    def cached(x: dict[str, Any], fixed: float, share: float, share_off: float, kv: float) -> float:
        k = share_off if x["config"]["offload_param"] != "none" else share
        return fixed + k * x["layer"] + kv * x["kv"]

    def cache_errors(*constants: float) -> list[float]:
        out = []
        for x in rows:
            if x["censored"]:
                continue
            r = x["row"]
            used = r["max_reserved"] + r["outside_allocator"]
            out.append((r["max_allocated"] + cached(x, *constants) + r["outside_allocator"]) / used - 1)
        return out

    def lets_an_oom_fit(*constants: float) -> bool:
        return any(
            (x["predicted"]["allocated"] + cached(x, *constants)) * (1 + cal.DEFAULT_SAFETY_MARGIN)
            <= x["config"]["cap_gib"] * GiB
            for x in ooms
        )

    best: tuple[float, ...] | None = None
    for fixed_gib, share, share_off, kv in itertools.product(*FIT_GRID):
        if lets_an_oom_fit(fixed_gib * GiB, share, share_off, kv):
            continue
        loss = sum(e * e for e in cache_errors(fixed_gib * GiB, share, share_off, kv))
        if best is None or loss < best[0]:
            best = (loss, fixed_gib, share, share_off, kv)
    assert best is not None
    now = (cal.RESERVED_FIXED_BYTES_INFERENCE / GiB, cal.FRAGMENTATION_SHARE_INFERENCE,
           cal.FRAGMENTATION_SHARE_INFERENCE_PARAM_OFFLOAD, cal.FRAGMENTATION_SHARE_KV_CACHE)  # fmt: skip

    def per_row(x: dict[str, Any]) -> dict[str, Any]:
        measured, predicted = x["row"]["tokens_per_sec"], x["predicted"]["tokens_per_sec"]
        error = round(predicted / measured - 1, 4)
        return {
            "file": x["file"],
            **x["config"],
            "tokens_per_sec": measured,
            "predicted": predicted,
            "error": error,
        }

    def summary(errs: list[float]) -> dict[str, float]:
        return {"median": statistics.median(abs(e) for e in errs), "max": max(abs(e) for e in errs)}

    timed = [x for x in rows if x["row"].get("tokens_per_sec")]

    def predicted_tps() -> list[float]:
        return [
            predict(x["hw"], Config(**x["config"]), x["world"], x["seq"], x["use_cache"])["tokens_per_sec"]
            for x in timed
        ]

    tps_fit = _plan_accuracy()._fit_log(
        TPS_FIT_NAMES, predicted_tps, [x["row"]["tokens_per_sec"] for x in timed]
    )
    return {
        "rows": len(rows),
        "per_row": [per_row(x) for x in timed],
        "tokens_per_sec_fit": tps_fit,
        "censored": sum(x["censored"] for x in rows),
        "device_error_now": summary(cache_errors(now[0] * GiB, *now[1:])),
        "now_lets_an_oom_fit": lets_an_oom_fit(now[0] * GiB, *now[1:]),
        "fit": dict(zip(FIT_NAMES, best[1:], strict=True)),
        "device_error_fit": summary(cache_errors(best[1] * GiB, *best[2:])),
        "allocated_error_now": summary(
            [x["predicted"]["allocated"] / x["row"]["max_allocated"] - 1 for x in rows]
        ),
        "tokens_per_sec_error_now": summary(
            [x["predicted"]["tokens_per_sec"] / x["row"]["tokens_per_sec"] - 1 for x in rows]
        ),
    }


def _models(args: argparse.Namespace) -> tuple[str, ...]:
    return tuple(m for m in args.models.split(",") if m)


def grid_of(args: argparse.Namespace, hw: HardwareReport, world: int) -> list[Config]:
    """The grid the command line asks for: the launcher and each worker build it here, from the same flags."""
    seq = SMOKE_SEQ if args.smoke else args.seq
    return build_grid(hw, world, args.smoke, _models(args), seq, _caps(args), _sweep(args), not args.no_twice)


def worker_args(args: argparse.Namespace, index: int, name: str) -> list[str]:
    """The worker's arguments: it rebuilds the grid from them, so every flag that shapes the grid goes along (the
    2026-12-02 gpt2-kv run passed neither --sweep nor --no-twice, and its workers ran the default grid's first 10
    configs: tests/unit/test_bench_inference_accuracy.py holds this)."""
    out = ["--worker", "--index", str(index), "--out", str(args.out), "--name", name, "--models", args.models,
           "--seq", str(args.seq), "--caps", args.caps, "--sweep", args.sweep]  # fmt: skip
    return out + ["--smoke"] * args.smoke + ["--no-twice"] * args.no_twice


def _sweep(args: argparse.Namespace) -> tuple[int, ...]:
    return tuple(int(x) for x in args.sweep.split(",") if x.strip())


def _caps(args: argparse.Namespace) -> tuple[int, ...]:
    return tuple(int(c) for c in args.caps.split(",") if c)


def worker(args: argparse.Namespace) -> int:
    """One config of the grid (--index) in this process; its row is added to the result file."""
    import deepspeed
    import torch
    import torch.distributed as dist

    pa = _plan_accuracy()
    smoke = args.smoke
    if torch.cuda.is_available() and not smoke:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    deepspeed.init_distributed()
    world = dist.get_world_size()
    hw = pa.smoke_hardware(world) if smoke else pa.bench_hardware(world)
    seq = SMOKE_SEQ if smoke else args.seq
    grid = grid_of(args, hw, world)
    out = Path(args.out) / args.name
    c = grid[args.index]
    predicted = predict(hw, c if not smoke else replace_model(c), world, seq, pa.USE_CACHE)
    row = Row(config=asdict(c), predicted=predicted)
    run_config(c, seq, smoke, row)
    dist.barrier()
    if dist.get_rank() == 0:
        doc: dict[str, Any] = json.loads(out.read_text()) if out.is_file() else {
            "bench": "bench/inference_accuracy.py", "argv": sys.argv[1:], "date": dt.date.today().isoformat(),
            "host": platform.node(), "world": world, "seq_len": seq, "smoke": smoke, "hardware": hw.to_dict(),
            "versions": pa._versions(), "calibration": pa._calibration_snapshot(), "use_cache": pa.USE_CACHE,
            "rows": [],
        }  # fmt: skip
        doc["rows"].append(asdict(row))
        pa._save(out, doc)
        out.with_suffix(".md").write_text(markdown(doc))
        print(_line(args.index, len(grid), row), flush=True)
    return 0


def replace_model(c: Config) -> Config:
    """Smoke rows predict for a real preset of the same family (the tiny model has no preset)."""
    return Config(c.tier, "gpt2", c.offload_param, c.micro_batch, c.cap_gib)


def launch(args: argparse.Namespace) -> int:
    """The grid, one DeepSpeed launcher start per config, until --budget-s is spent."""
    gpus = 1 if args.smoke else args.gpus
    tag = ("smoke" if args.smoke else f"{gpus}gpu") + (f"-{args.label}" if args.label else "")
    name = f"inference_accuracy-{dt.date.today().isoformat()}-{tag}.json"
    env = repo_env()
    if args.smoke:
        env.setdefault("CUDA_VISIBLE_DEVICES", "")
    pa = _plan_accuracy()
    hw = pa.smoke_hardware(gpus) if args.smoke else pa.bench_hardware(gpus)
    grid = grid_of(args, hw, gpus)
    (Path(args.out) / name).unlink(missing_ok=True)
    print(
        f"inference_accuracy: {gpus} rank(s), {len(grid)} configs, budget {args.budget_s:.0f} s", flush=True
    )
    rc = 0
    for i in range(len(grid)):
        if time.time() - args.t0 > args.budget_s:
            print(f"budget spent after {i} of {len(grid)} configs", flush=True)
            break
        cmd = [
            sys.executable, "-m", "deepspeed.launcher.runner", "--num_gpus", str(gpus),
            "--master_port", str(args.master_port), "--no_local_rank", str(Path(__file__).resolve()),
            *worker_args(args, i, name),
        ]  # fmt: skip
        rc = max(rc, run_in_group(cmd, cwd=ROOT, env=env, timeout=None).returncode)
    print(f"wrote {Path(args.out) / name} and its .md", flush=True)
    return rc


def parser() -> argparse.ArgumentParser:
    """The command line (a function, so that tests parse what the launcher passes to its workers)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gpus", type=int, default=1)
    p.add_argument("--smoke", action="store_true", help="CPU, a tiny GPT-2, 2 configs")
    p.add_argument("--out", default=str(ROOT / "bench" / "results"))
    p.add_argument("--budget-s", type=float, default=400.0, help="start no config after this many seconds")
    p.add_argument(
        "--models", default=",".join(MODELS), help="comma-separated presets (gpt2-*, llama-7b, ...)"
    )
    p.add_argument("--seq", type=int, default=SEQ, help="tokens per sample")
    p.add_argument("--caps", default=str(CAP_GIB), help="comma-separated card sizes in GiB for the R tier")
    p.add_argument(
        "--sweep",
        default=",".join(map(str, SWEEP_MICRO_BATCHES)),
        help="comma-separated micro-batches of the S tier (uncapped; empty: none)",
    )
    p.add_argument(
        "--no-twice", action="store_true", help="R tier: skip twice the largest micro-batch (the OOM check)"
    )
    p.add_argument("--label", default="", help="added to the result file's name")
    p.add_argument(
        "--analyze",
        nargs="+",
        type=Path,
        metavar="RAW_JSON",
        help="predict the ok rows of these raw files again, refit the allocator-cache constants, print both, stop",
    )
    p.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--master-port", type=int, default=29561)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--name", default="inference_accuracy.json", help=argparse.SUPPRESS)
    p.add_argument("--t0", type=float, default=time.time(), help=argparse.SUPPRESS)
    return p


def main() -> int:
    args = parser().parse_args()
    if args.analyze:
        print(json.dumps(analyze(args.analyze), indent=1))
        return 0
    return worker(args) if args.worker else launch(args)


if __name__ == "__main__":
    sys.exit(main())
