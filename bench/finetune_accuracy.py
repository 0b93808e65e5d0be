"""How right is `dswiz plan --finetune lora|qlora`? LoRA and QLoRA training steps of LLaMA-style models built on the
GPU from config, under 24/48/80 GiB allocator caps, against the planner's predictions: device memory (<= 8 %),
tokens/s (<= 10 %), and whether the planner's recommendation runs without OOM.

    # On the GPU machine (torch + CUDA + transformers + peft; bitsandbytes for QLoRA; DeepSpeed optional), <= 8 min:
    python3 bench/finetune_accuracy.py --out $OUT
    # Here, on CPU, in seconds: a tiny LLaMA, LoRA and QLoRA, no DeepSpeed (proves the script and its report):
    python3 bench/finetune_accuracy.py --smoke --out /tmp/fa

Grid, in priority order (stops starting configs once --budget-s is spent; every finished row is saved at once):
llama-7b LoRA and QLoRA at 24/48/80 GiB and llama-33b (LLaMA-1 33B's shape) QLoRA at 24/48/80 and LoRA at 80,
breadth first (each model and mode once, then the other caps).
For each, the planner's recommendation for one H200 capped to that size (bf16, seq 2048, rank 16 on q_proj/v_proj),
run exactly: its ZeRO stage (through DeepSpeed when installed, else plain PyTorch AdamW on the adapters: recorded),
its micro-batch and checkpointing. One config per process (a previous engine's memory would inflate the next
one's peak: docs/measurements.md). In each: build the bf16 model on the GPU from config; for QLoRA swap every
linear layer but lm_head for a bitsandbytes NF4 Linear4bit (double quantization, as transformers' bitsandbytes
loader does), free the bf16 weights; then cap the allocator (set_per_process_memory_fraction), wrap with
peft.get_peft_model, 1 warm-up step, the median of 3 timed steps. Results: <out>/finetune_accuracy-<date>-<tag>.json
(+ .md), printed as they come. Without bitsandbytes the QLoRA rows are recorded as skipped (its CPU backend runs
the smoke's). ``--grid llama-7b:lora:16,...`` runs only those configs, ``--label`` names the result files; a fourth
field runs a strategy of your own under that cap instead of the planner's pick, beside the planner's prediction for
it (``llama-7b:lora:80:stage=3/param=cpu/mb=4/ckpt=1``); ``--timed N`` times N steps instead of 3.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))  # _common, also when this file is loaded by a test

from _common import (  # noqa: E402
    head_commit,
    load_bench_script,
    md_heading,
    md_table,
    quantize_linears_,
    repo_env,
    run_in_group,
)

from wizard.errors import DswizError  # noqa: E402
from wizard.hardware.report import HardwareReport  # noqa: E402
from wizard.model import ModelSpec, spec_from_config  # noqa: E402
from wizard.model_presets import PRESETS  # noqa: E402
from wizard.planner import PlanRequest, evaluate, plan, trainable_params, with_finetune  # noqa: E402
from wizard.strategy import Strategy  # noqa: E402
from wizard.tuning import make_finetune  # noqa: E402

GiB = 1024**3
SEQ, SMOKE_SEQ = 2048, 32
RANK, TARGETS = 16, "q_proj,v_proj"
CAPS = (24, 48, 80)
WARMUP, TIMED = 1, 3
MODELS: dict[str, dict[str, Any]] = {
    "llama-7b": PRESETS["llama-7b"],
    # LLaMA-1 33B (arXiv:2302.13971, table 2): 60 layers, hidden 6656, 52 heads
    "llama-33b": {**PRESETS["llama-7b"], "num_hidden_layers": 60, "hidden_size": 6656, "num_attention_heads": 52,
                  "num_key_value_heads": 52, "intermediate_size": 17920},
    "tiny-llama": {**PRESETS["llama-7b"], "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                   "num_key_value_heads": 4, "intermediate_size": 176, "vocab_size": 256},
}  # fmt: skip
GRID = [  # breadth first: each model and mode once before the other caps, so a cut-off run still covers both sizes
    ("llama-7b", "lora", 24), ("llama-7b", "qlora", 24), ("llama-33b", "qlora", 48), ("llama-33b", "lora", 80),
    ("llama-7b", "qlora", 48), ("llama-33b", "qlora", 24), ("llama-7b", "lora", 48), ("llama-7b", "qlora", 80),
    ("llama-33b", "qlora", 80), ("llama-7b", "lora", 80),
]  # fmt: skip
SMOKE_GRID = [("tiny-llama", "lora", None), ("tiny-llama", "qlora", None)]


@functools.cache
def _plan_accuracy() -> Any:
    """bench/plan_accuracy.py's helpers (this machine as the planner sees it, the cap, the peaks, versions, save)."""
    return load_bench_script("plan_accuracy")


@dataclass(frozen=True)
class Config:
    model: str
    finetune: str  # lora | qlora
    cap_gib: int | None  # None: uncapped (smoke)
    # the strategy run instead of the planner's pick: "stage=3/param=cpu/mb=6/ckpt=1" (FORCE_KEYS)
    force: str = ""
    targets: str = TARGETS  # the modules LoRA adapts, as PEFT's target_modules (comma-joined, or all-linear)

    def spec(self) -> ModelSpec:
        base = spec_from_config(MODELS[self.model], name=self.model, source="preset")
        return with_finetune(
            base, make_finetune(self.finetune, rank=RANK, alpha=2 * RANK, targets=self.targets)
        )


@dataclass
class Row:
    config: dict[str, Any]
    strategy: dict[str, Any] | None = None
    predicted: dict[str, Any] = field(default_factory=dict)
    status: str = "pending"  # ok | oom | error | skipped | does-not-fit
    error: str | None = None
    engine: str | None = None  # "deepspeed" or "torch"
    trainable_params: int | None = None  # what PEFT reported
    max_allocated: int | None = None
    max_reserved: int | None = None
    device_used: int | None = None  # cudaMemGetInfo total - free at the end (reserved + context + NCCL)
    step_s: list[float] = field(default_factory=list)
    tokens_per_sec: float | None = None


def card(c: Config) -> int | None:
    """The card a capped H200 stands for (plan_accuracy.card_for_cap: CUDA context and NCCL outside the cap)."""
    return None if c.cap_gib is None else _plan_accuracy().card_for_cap(0, c.cap_gib, 1)


def recommend(
    hw: HardwareReport, c: Config, seq: int, max_micro_batch: int = 1024
) -> tuple[Strategy | None, dict[str, Any]]:
    """The planner's recommendation for this config's card and what it predicts (None when nothing fits)."""
    spec = c.spec()
    request = PlanRequest(
        seq_len=seq,
        precisions=("bf16",),
        allow_nvme=False,
        gpu_memory_bytes=card(c),
        max_micro_batch=max_micro_batch,
    )
    if c.force:
        chosen: Strategy | None = forced_strategy(c.force)
    else:
        best = plan(hw, spec, request).best
        chosen = best.strategy if best is not None else None
    if chosen is None:
        return None, {"fits": False, "trainable_params": trainable_params(spec)}
    cand = evaluate(hw, spec, chosen, request)
    p = cand.predicted
    return chosen, {
        "fits": cand.fits,
        "allocated": p.gpu_allocated_bytes,
        "reserved": p.gpu_reserved_bytes,
        "device": p.gpu_bytes,
        "tokens_per_sec": round(p.tokens_per_sec, 1),
        "trainable_params": trainable_params(spec),
        "peak_phase": p.peak_phase,
    }


def _flag(value: str) -> bool:
    if value.lower() not in ("1", "0", "true", "false", "yes", "no"):
        raise ValueError(value)
    return value.lower() in ("1", "true", "yes")


def _offload(value: str) -> str:
    if value not in ("none", "cpu", "nvme"):
        raise ValueError(value)
    return value


# A grid item's fourth field: the Strategy fields it sets, key=value joined by "/".
FORCE_KEYS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "stage": ("zero_stage", int), "param": ("offload_param", _offload), "mb": ("micro_batch_size", int),
    "ckpt": ("activation_checkpointing", _flag),
}  # fmt: skip


def forced_strategy(force: str) -> Strategy:
    """The strategy a grid item's fourth field names, on bf16 one-GPU defaults (SystemExit names what is wrong:
    a key, a value, or a strategy DeepSpeed would refuse)."""
    changes: dict[str, Any] = {}
    for part in force.split("/"):
        key, _, value = part.partition("=")
        if key not in FORCE_KEYS or not value:
            raise SystemExit(f"--grid: {part!r} is not key=value with a key of {', '.join(FORCE_KEYS)}")
        field_name, convert = FORCE_KEYS[key]
        try:
            changes[field_name] = convert(value)
        except ValueError:
            raise SystemExit(f"--grid: {part!r}: {value!r} is no value for {key}") from None
    s = Strategy(precision="bf16").with_(**changes)
    if s.problems() or s.micro_batch_size < 1:
        raise SystemExit(f"--grid: {force!r}: {'; '.join(s.problems()) or 'the micro-batch is at least 1'}")
    return s


def build_grid(smoke: bool, only: str = "") -> list[Config]:
    """The grid, or ``only``'s configs: ``model:mode:cap[:force[:targets]]`` joined by commas (e.g. llama-7b:lora:16,
    or llama-7b:lora:80:stage=3/param=cpu/mb=4/ckpt=1 to run that strategy under an 80 GiB cap; a fifth field adapts
    other modules than q/v: all-linear, or names joined by "+", such as q_proj+k_proj+v_proj)."""
    if not only:
        return [Config(m, f, cap) for m, f, cap in (SMOKE_GRID if smoke else GRID)]
    out = []
    for item in only.split(","):
        parts = item.strip().split(":")
        if (
            len(parts) not in (3, 4, 5)
            or parts[0] not in MODELS
            or parts[1] not in ("lora", "qlora")
            or not parts[2].isdigit()
        ):
            raise SystemExit(
                f"--grid: {item!r} is not model:lora|qlora:GiB[:force[:targets]] with a model of {', '.join(MODELS)}"
            )
        force = parts[3] if len(parts) >= 4 else ""
        if force:
            forced_strategy(force)  # a bad key stops the run before any config starts
        targets = parts[4].replace("+", ",") if len(parts) == 5 else TARGETS
        config = Config(parts[0], parts[1], int(parts[2]), force, targets)
        try:
            config.spec()
        except DswizError as e:  # a target the model does not have stops the run here too
            raise SystemExit(f"--grid: {item!r}: {e}") from None
        out.append(config)
    return out


# ----------------------------------------------------------------------------------------------------- worker


def _deepspeed(cuda: bool) -> Any:
    """DeepSpeed, started for one rank, when installed and on a GPU; None: the model with torch AdamW (on CPU the
    smoke run checks the script, not DeepSpeed)."""
    if not cuda:
        return None
    try:
        import deepspeed
    except ImportError:
        return None
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    deepspeed.init_distributed(dist_backend="nccl")
    return deepspeed


def ds_config(s: Strategy) -> dict[str, Any]:
    zero: dict[str, Any] = {"stage": s.zero_stage}
    if s.offload_param != "none":  # the planner offers no optimizer offload for adapters
        zero["offload_param"] = {"device": s.offload_param, "pin_memory": True}
    return {
        "train_micro_batch_size_per_gpu": s.micro_batch_size,
        "gradient_accumulation_steps": 1,
        "zero_optimization": zero,
        "steps_per_print": 1_000_000,
        "bf16": {"enabled": True},
    }


def _engine(ds: Any, model: Any, s: Strategy, params: list[Any]) -> tuple[Any, str]:
    import torch

    opt = torch.optim.AdamW(params, lr=1e-5)
    if ds is None:
        return (model, opt), "torch"
    engine, _, _, _ = ds.initialize(model=model, model_parameters=params, optimizer=opt, config=ds_config(s))
    return engine, "deepspeed"


def _step(engine: Any, kind: str, ids: Any) -> None:
    if kind == "deepspeed":
        loss = engine(input_ids=ids, labels=ids).loss
        engine.backward(loss)
        engine.step()
    else:
        model, opt = engine
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


def run_config(c: Config, s: Strategy, seq: int, row: Row, timed: int = TIMED) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    cuda = torch.cuda.is_available()
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    cfg = dict(MODELS[c.model])
    config = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    dtype = torch.bfloat16 if cuda else torch.float32
    ds, pa = _deepspeed(cuda), _plan_accuracy()
    # LoRA at ZeRO-3 is built partitioned, as from_pretrained builds it under DeepSpeed's config (zero.Init): with
    # the parameters offloaded the whole model never fits the card.
    partitioned = ds is not None and s.zero_stage == 3 and c.finetune == "lora"
    if partitioned:
        pa.cap_device_memory(device, c.cap_gib)
    with ds.zero.Init(config_dict_or_path=ds_config(s)) if partitioned else device:
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    if c.finetune == "qlora":
        quantize_linears_(model, dtype, True, dtype if s.zero_stage == 3 else torch.uint8)
    for p in model.parameters():
        p.requires_grad_(False)
    if s.activation_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if cuda and not partitioned:
        pa.cap_device_memory(device, c.cap_gib)
    targets: Any = "all-linear" if c.targets == "all-linear" else c.targets.split(",")
    lora = LoraConfig(r=RANK, lora_alpha=2 * RANK, target_modules=targets, task_type="CAUSAL_LM")
    model = get_peft_model(
        model, lora, autocast_adapter_dtype=False
    )  # adapters in bf16, as DeepSpeed casts them
    row.trainable_params = int(model.get_nb_trainable_parameters()[0])
    params = [p for p in model.parameters() if p.requires_grad]
    engine, row.engine = _engine(ds, model, s, params)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, config.vocab_size, (s.micro_batch_size, seq), generator=gen).to(device)
    for i in range(WARMUP + timed):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        _step(engine, row.engine, ids)
        if cuda:
            torch.cuda.synchronize()
        if i >= WARMUP:
            row.step_s.append(time.perf_counter() - t0)
    row.tokens_per_sec = s.micro_batch_size * seq / statistics.median(row.step_s)
    if cuda:  # the peaks count from the cap on, with the model built before it already allocated
        row.max_allocated, row.max_reserved, outside = pa.device_memory_peaks(device, 0)
        row.device_used = row.max_reserved + outside


def worker(payload: str) -> int:
    """One config in this process; prints the finished row as one JSON line."""
    d = json.loads(payload)
    c, s, row = Config(**d["config"]), Strategy.from_dict(d["strategy"]), Row(**d["row"])
    try:
        run_config(c, s, d["seq"], row, d.get("timed", TIMED))
        row.status = "ok"
    except Exception as e:  # the row records what went wrong; the driver moves on
        oom = type(e).__name__ == "OutOfMemoryError" or "out of memory" in str(e)
        row.status, row.error = ("oom" if oom else "error"), f"{type(e).__name__}: {str(e)[:300]}"
    print("ROW " + json.dumps(asdict(row)), flush=True)
    return 0


# ----------------------------------------------------------------------------------------------------- driver


def has_module(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def run_one(c: Config, s: Strategy, seq: int, row: Row, timeout: float, timed: int = TIMED) -> Row:
    payload = json.dumps(
        {"config": asdict(c), "strategy": s.to_dict(), "row": asdict(row), "seq": seq, "timed": timed}
    )
    env = repo_env()  # the GPU machine's carried DeepSpeed and bitsandbytes stay importable
    try:
        out = run_in_group([sys.executable, __file__, "--worker", payload], cwd=ROOT, env=env, capture=True,
                           timeout=timeout)  # fmt: skip
    except subprocess.TimeoutExpired:
        row.status, row.error = "error", f"timed out after {timeout:.0f} s"
        return row
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("ROW ")]
    if not lines:
        row.status, row.error = "error", (out.stderr.strip().splitlines() or ["no output"])[-1][:300]
        return row
    return Row(**json.loads(lines[-1][4:]))


def _pct(measured: float | None, predicted: float | None) -> str:
    if not measured or not predicted:
        return ""
    return f"{(predicted - measured) / measured * 100:+.1f} %"


def markdown(doc: dict[str, Any]) -> str:
    header = ["model", "mode", "cap GiB", "strategy", "status", "trainable (PEFT / dswiz)", "device GiB (pred, err)",
              "tokens/s (pred, err)"]  # fmt: skip
    rows = []
    for r in doc["rows"]:
        c, p = r["config"], r["predicted"]
        s = r["strategy"] or {}
        label = (
            f"ZeRO-{s['zero_stage']}{' param:' + s['offload_param'] if s.get('offload_param', 'none') != 'none' else ''}"
            f" mbs {s['micro_batch_size']}{' ckpt' if s.get('activation_checkpointing') else ''}"
            + (" (forced)" if c.get("force") else "")
            + (f" on {c['targets']}" if c.get("targets", TARGETS) != TARGETS else "")
            if s
            else "-"
        )
        dev = (
            f"{r['device_used'] / GiB:.2f} ({p['device'] / GiB:.2f}, {_pct(r['device_used'], p['device'])})"
            if r.get("device_used") and p.get("device")
            else "-"
        )
        tps = (
            f"{r['tokens_per_sec']:,.0f} ({p['tokens_per_sec']:,.0f}, {_pct(r['tokens_per_sec'], p['tokens_per_sec'])})"
            if r.get("tokens_per_sec") and p.get("tokens_per_sec")
            else "-"
        )
        status = r["status"] + (f": {r['error']}" if r.get("error") else "")
        rows.append([c["model"], c["finetune"], c["cap_gib"] or "-", label, status,
                     f"{r.get('trainable_params') or '-'} / {p.get('trainable_params', '-')}", dev, tps])  # fmt: skip
    intro = (f"{doc['date']}, {doc['tag']}, seq {doc['seq_len']}, LoRA r={RANK} on {TARGETS} (unless a row says "
             f"otherwise); versions {doc['versions']}")  # fmt: skip
    if doc.get("repredicted"):
        again = doc["repredicted"]
        intro += (f". Predictions: the planner of {again['date']} (commit {again.get('commit', 'unknown')}) for "
                  f"{again['hardware']}, beside the measurements of {again['from']}")  # fmt: skip
    return (
        "\n".join([*md_heading("Fine-tune accuracy (LoRA / QLoRA)", intro), *md_table(header, rows)]) + "\n"
    )


def repredict(path: Path, hardware: str, out: Path) -> Path:
    """The rows of a result file, measured as they were, beside what the planner says now for the strategy each
    ran (on ``hardware``, a --hardware spec of the card they ran on): ``<stem>-repredicted.json`` (+ .md)."""
    from wizard.hardware.described import describe

    hw = describe(hardware)
    doc = json.loads(path.read_text())
    for r in doc["rows"]:
        if r.get("strategy"):
            c, s = Config(**r["config"]), Strategy.from_dict(r["strategy"])
            request = PlanRequest(seq_len=doc["seq_len"], precisions=("bf16",), allow_nvme=False,
                                  gpu_memory_bytes=card(c))  # fmt: skip
            p = evaluate(hw, c.spec(), s, request).predicted
            r["predicted"].update(allocated=p.gpu_allocated_bytes, reserved=p.gpu_reserved_bytes,
                                  device=p.gpu_bytes, tokens_per_sec=round(p.tokens_per_sec, 1))  # fmt: skip
    doc["repredicted"] = {"from": path.name, "hardware": hardware, "date": dt.date.today().isoformat(),
                          "commit": head_commit()}  # fmt: skip
    target = out / f"{path.stem}-repredicted.json"
    _plan_accuracy()._save(target, doc)
    target.with_suffix(".md").write_text(markdown(doc))
    return target


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny model, seconds: check the script works")
    ap.add_argument(
        "--budget-s", type=float, default=420.0, help="stop starting configs after this many seconds"
    )
    ap.add_argument(
        "--grid",
        default="",
        help="only these configs: model:lora|qlora:GiB[:stage=3/param=cpu/mb=4/ckpt=1], comma-separated",
    )
    ap.add_argument(
        "--timed",
        type=int,
        default=TIMED,
        choices=range(1, 101),
        metavar="N",
        help="timed steps per config, 1-100 (their median counts)",
    )
    ap.add_argument("--label", default="", help="added to the result files' name")
    ap.add_argument(
        "--repredict", type=Path, help="a result file: its rows beside the planner's current figures"
    )
    ap.add_argument("--hardware", default="1xH200", help="with --repredict: the card the rows ran on")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args.worker)
    if args.repredict:
        print(f"wrote {repredict(args.repredict, args.hardware, args.out)} and .md")
        return 0
    pa = _plan_accuracy()
    hw = pa.smoke_hardware(1) if args.smoke else pa.bench_hardware(1)
    seq = SMOKE_SEQ if args.smoke else SEQ
    tag = "smoke" if args.smoke else "1gpu"
    doc: dict[str, Any] = {"date": dt.date.today().isoformat(), "tag": tag, "seq_len": seq, "rows": [],
                           "versions": {**pa._versions(), "peft": _version("peft"), "bitsandbytes": _version("bitsandbytes")}}  # fmt: skip
    path = args.out / f"finetune_accuracy-{doc['date']}-{tag}{'-' + args.label if args.label else ''}.json"
    bnb = has_module("bitsandbytes")  # its CPU backend runs the smoke's QLoRA too
    t0 = time.monotonic()
    for c in build_grid(args.smoke, args.grid):
        s, predicted = recommend(hw, c, seq, max_micro_batch=4 if args.smoke else 1024)
        row = Row(config=asdict(c), strategy=s.to_dict() if s else None, predicted=predicted)
        if c.finetune == "qlora" and not bnb:
            row.status, row.error = "skipped", "bitsandbytes not installed: QLoRA not measured"
        elif s is None:
            row.status = "does-not-fit"
        elif time.monotonic() - t0 > args.budget_s:
            row.status, row.error = "skipped", "--budget-s spent"
        else:
            timeout = max(60.0, args.budget_s + 120 - (time.monotonic() - t0))
            row = run_one(c, s, seq, row, timeout=timeout, timed=args.timed)
        doc["rows"].append(asdict(row))
        pa._save(path, doc)
        path.with_suffix(".md").write_text(markdown(doc))
        print(f"{c.model} {c.finetune} cap {c.cap_gib}: {row.status} {row.error or ''} device {row.device_used} "
              f"(pred {predicted.get('device')}) tok/s {row.tokens_per_sec} (pred {predicted.get('tokens_per_sec')})",
              flush=True)  # fmt: skip
    print(f"wrote {path} and {path.with_suffix('.md')} in {time.monotonic() - t0:.0f} s")
    return 0


def _version(module: str) -> str | None:
    try:
        return str(__import__(module).__version__)
    except Exception:
        return None


if __name__ == "__main__":
    sys.exit(main())
