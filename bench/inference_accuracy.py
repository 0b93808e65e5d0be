"""How right is `dswiz plan --mode inference`? Real ZeRO-3 inference forward passes (no optimizer, eval mode,
torch.no_grad, a loss over every position as evaluation does) of GPT-2-family models vs the planner's predictions.

    # On the GPU machine (one launcher start, configs in-process), ~3-6 minutes:
    python3 bench/inference_accuracy.py --gpus 1 --budget-s 400 --out $OUT
    # Here, on CPU: the real launcher, 1 gloo rank, a tiny GPT-2, 2 configs (proves the script before the GPU):
    python3 bench/inference_accuracy.py --smoke --out /tmp/ia

Grid, in priority order (stops starting configs once --budget-s is spent; every finished row is saved at once):
  for gpt2-medium and gpt2-xl, parameters on the GPU (none) and on the CPU (cpu; NVMe needs libaio, absent there):
  R  the planner's largest micro-batch for a 24 GiB card, run under that cap (set_per_process_memory_fraction): must
     not OOM; and twice it under the same cap: should OOM (or measure above the cap);
  S  micro-batch 1, 8 and 32 uncapped: memory (max allocated / reserved, device-level) and tokens/s vs predicted.
Each config: the model built inside deepspeed.zero.Init (so no rank ever holds it whole, as dswiz tells users to),
bf16, seq 1024, 1 warm-up forward, then the median of 3 timed forwards. Between configs: engine.destroy(), gc,
empty_cache. Results: <out>/inference_accuracy-<date>-<1gpu|smoke>.json (+ .md), printed as they come.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import importlib.util
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

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
WARMUP, TIMED = 1, 3


@functools.cache
def _plan_accuracy() -> Any:
    """bench/plan_accuracy.py's helpers (hardware as the planner sees it, versions, atomic save)."""
    spec = importlib.util.spec_from_file_location("plan_accuracy", ROOT / "bench" / "plan_accuracy.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["plan_accuracy"] = module
    spec.loader.exec_module(module)
    return module


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


def predict(hw: HardwareReport, c: Config, world: int, seq: int) -> dict[str, Any]:
    request = PlanRequest(mode="inference", seq_len=seq, gpu_memory_bytes=card(c, world))
    cand = evaluate(hw, load_model_spec(c.model), c.strategy(world), request)
    p = cand.predicted
    return {
        "allocated": p.gpu_allocated_bytes,
        "reserved": p.gpu_reserved_bytes,
        "device": p.gpu_bytes,
        "tokens_per_sec": round(p.tokens_per_sec, 1),
        "fits": cand.fits,
        "max_micro_batch": cand.max_micro_batch,
    }


def build_grid(hw: HardwareReport, world: int, smoke: bool) -> list[Config]:
    if smoke:
        return [Config("S", "gpt2-tiny", off, 2, None) for off in OFFLOADS]
    grid: list[Config] = []
    for model in MODELS:
        for off in OFFLOADS:
            probe = Config("R", model, off, 1, CAP_GIB)
            top = max_micro_batch(
                hw,
                load_model_spec(model),
                probe.strategy(world),
                SEQ,
                gpu_memory_bytes=card(probe, world),
                limit=512,
            )
            if top:
                grid += [Config("R", model, off, top, CAP_GIB), Config("R", model, off, 2 * top, CAP_GIB)]
    grid += [Config("S", m, off, b, None) for m in MODELS for off in OFFLOADS for b in (1, 8, 32)]
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
    from transformers import GPT2Config, GPT2LMHeadModel

    cuda = torch.cuda.is_available() and not smoke
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    if smoke:
        layers, hidden, heads, vocab = 2, 64, 4, 256
    else:
        spec = load_model_spec(c.model)
        layers, hidden, heads, vocab = spec.layers, spec.hidden, spec.heads, spec.vocab
    baseline = 0
    if cuda:
        baseline = _plan_accuracy().cap_device_memory(device, c.cap_gib)
    engine = model = None
    start = time.perf_counter()
    cfg = ds_config(c, smoke)
    try:
        config = GPT2Config(
            n_layer=layers, n_embd=hidden, n_head=heads, vocab_size=vocab, n_positions=seq, use_cache=False
        )
        torch.manual_seed(0)
        with deepspeed.zero.Init(config_dict_or_path=cfg, dtype=torch.bfloat16):
            model = GPT2LMHeadModel(config)
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
        "| tok/s (pred, err) | planner fits |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["rows"]:
        c, p = r["config"], r["predicted"]
        alloc = res = tps = "-"
        if r["max_allocated"] is not None:
            alloc = f"{r['max_allocated'] / GiB:.2f} ({p['allocated'] / GiB:.2f}, {_err(r['max_allocated'], p['allocated'])})"
            res = f"{r['max_reserved'] / GiB:.2f} ({p['reserved'] / GiB:.2f}, {_err(r['max_reserved'], p['reserved'])})"
        if r["tokens_per_sec"]:
            tps = f"{r['tokens_per_sec']:,.0f} ({p['tokens_per_sec']:,.0f}, {_err(r['tokens_per_sec'], p['tokens_per_sec'])})"
        lines.append(
            f"| {c['tier']} | {c['model']} | {c['offload_param']} | {c['micro_batch']} | {c['cap_gib'] or '-'} "
            f"| {r['status']} | {alloc} | {res} | {tps} | {p['fits']} |"
        )
    return "\n".join(lines) + "\n"


def worker(args: argparse.Namespace) -> int:
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
    seq = SMOKE_SEQ if smoke else SEQ
    grid = build_grid(hw, world, smoke)
    out = Path(args.out) / args.name
    doc: dict[str, Any] = {
        "bench": "bench/inference_accuracy.py",
        "argv": sys.argv[1:],
        "date": dt.date.today().isoformat(),
        "host": platform.node(),
        "world": world,
        "seq_len": seq,
        "smoke": smoke,
        "hardware": hw.to_dict(),
        "versions": pa._versions(),
        "calibration": pa._calibration_snapshot(),
        "rows": [],
    }
    rank = dist.get_rank()
    if rank == 0:
        print(
            f"inference_accuracy: {world} rank(s), {len(grid)} configs, budget {args.budget_s:.0f} s",
            flush=True,
        )
    for i, c in enumerate(grid):
        if time.time() - args.t0 > args.budget_s:
            if rank == 0:
                doc["stopped_at"] = {"index": i, "left": len(grid) - i}
                print(f"budget spent after {i} of {len(grid)} configs", flush=True)
            break
        predicted = predict(hw, c, world, seq) if not smoke else predict(hw, replace_model(c), world, seq)
        row = Row(config=asdict(c), predicted=predicted)
        run_config(c, seq, smoke, row)
        dist.barrier()
        if rank == 0:
            doc["rows"].append(asdict(row))
            pa._save(out, doc)
            out.with_suffix(".md").write_text(markdown(doc))
            print(_line(i, len(grid), row), flush=True)
    if rank == 0:
        pa._save(out, doc)
        out.with_suffix(".md").write_text(markdown(doc))
        print(f"wrote {out} and {out.with_suffix('.md')}", flush=True)
    return 0


def replace_model(c: Config) -> Config:
    """Smoke rows predict for a real preset of the same family (the tiny model has no preset)."""
    return Config(c.tier, "gpt2", c.offload_param, c.micro_batch, c.cap_gib)


def launch(args: argparse.Namespace) -> int:
    gpus = 1 if args.smoke else args.gpus
    name = f"inference_accuracy-{dt.date.today().isoformat()}-{'smoke' if args.smoke else f'{gpus}gpu'}.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    if args.smoke:
        env.setdefault("CUDA_VISIBLE_DEVICES", "")
    cmd = [
        sys.executable, "-m", "deepspeed.launcher.runner", "--num_gpus", str(gpus),
        "--master_port", str(args.master_port), "--no_local_rank", str(Path(__file__).resolve()),
        "--worker", "--out", str(args.out), "--name", name, "--budget-s", str(args.budget_s), "--t0", str(args.t0),
    ]  # fmt: skip
    if args.smoke:
        cmd.append("--smoke")
    print(" ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=ROOT, env=env, check=False).returncode


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gpus", type=int, default=1)
    p.add_argument("--smoke", action="store_true", help="CPU, a tiny GPT-2, 2 configs")
    p.add_argument("--out", default=str(ROOT / "bench" / "results"))
    p.add_argument("--budget-s", type=float, default=400.0)
    p.add_argument("--master-port", type=int, default=29561)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--name", default="inference_accuracy.json", help=argparse.SUPPRESS)
    p.add_argument("--t0", type=float, default=time.time(), help=argparse.SUPPRESS)
    args = p.parse_args()
    return worker(args) if args.worker else launch(args)


if __name__ == "__main__":
    sys.exit(main())
