"""What DeepSpeed sends per optimizer step, stage by stage, beside what the planner counts (no GPU needed).

    python3 bench/comm_volume.py             # every case, writes bench/results/comm_volume-<date>.{json,md}
    python3 bench/comm_volume.py --quick     # seven cases (the test suite's)
    python3 bench/comm_volume.py --out DIR --label NAME
    python3 bench/comm_volume.py --repredict bench/results/comm_volume-2026-12-05.json   # today's planner, no ranks

Trains small models under the real `deepspeed` launcher with two ranks (CPU, gloo), DeepSpeed's comms logger on, and
reads every collective of the last optimizer step: each call's op and message size. The bytes each GPU sends are
what a ring moves per call -- all-reduce 2 (N-1)/N of the buffer; reduce-scatter and reduce (N-1)/N of the input;
all-gather (N-1) x the shard -- summed over the step, beside ``wizard.planner.throughput.communication_volume`` for
the same model (its HF config read as the planner reads it), strategy and ZeRO settings. It also counts the
parameters still gathered when the forward of that step ends, beside ``zero3.stage3_kept_for_backward``.

The shapes are real models' shrunk to ~300-600 thousand parameters, with ZeRO-3's prefetch bucket, max live
parameters and reuse distance shrunk by the same factor from DeepSpeed's defaults (5e7, 1e9, 1e9), so that the
coordinator meets the same proportions as at full size: which modules fit in the prefetch bucket, which share of
the model stays gathered. Parameter persistence is off (DeepSpeed's default keeps tensors under 1e5 elements
gathered; in a shrunk model that would be every tensor; in a real one, the norms and biases only).

Exit status 1 where a case's predicted volume is off by more than 2 %, or its kept count by more than 3 % of the
model (it moves in whole modules, each about 1 % of these shrunk ones).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import (  # noqa: E402
    head_commit,
    md_heading,
    md_table,
    quantize_linears_,
    repo_env,
    run_in_group,
    write_result,
)

from runner.preflight import free_port  # noqa: E402

TOLERANCE = 0.02
# What stays gathered moves in whole modules: at these sizes one MLP projection is 1 % of the model.
KEPT_TOLERANCE = 0.03
WORLD = 2
MICRO_BATCH, SEQ = 2, 32
DEFAULT_PREFETCH, DEFAULT_LIVE, DEFAULT_REUSE = 50_000_000, 1_000_000_000, 1_000_000_000
LORA_RANK = 2


def _llama(hidden: int, ffn: int, layers: int, heads: int, kv: int, vocab: int) -> dict[str, Any]:
    return {
        "model_type": "llama", "hidden_size": hidden, "intermediate_size": ffn, "num_hidden_layers": layers,
        "num_attention_heads": heads, "num_key_value_heads": kv, "vocab_size": vocab,
        "max_position_embeddings": SEQ, "tie_word_embeddings": False,
    }  # fmt: skip


# name -> (HF config, the real model's parameter count it stands for): hidden 32, the other dimensions in the real
# model's proportions.
SHAPES: dict[str, tuple[dict[str, Any], float]] = {
    # LLaMA-7B: hidden 4096, ffn 11008, 32 layers, vocab 32000
    "llama-7b/16000": (_llama(32, 86, 32, 4, 4, 256), 6.74e9),
    # TinyLlama-1.1B: hidden 2048, ffn 5632, 22 layers, 32 heads with 4 KV heads, vocab 32000
    "llama-1b/4100": (_llama(32, 88, 22, 8, 1, 500), 1.1e9),
    # GPT-2 XL: hidden 1600, 48 layers, vocab 50257 (Conv1D modules, tied head)
    "gpt2-xl/2500": (
        {
            "model_type": "gpt2",
            "n_embd": 32,
            "n_layer": 48,
            "n_head": 4,
            "vocab_size": 1005,
            "n_positions": SEQ,
        },
        1.56e9,
    ),
    # Pythia-1.4B (GPT-NeoX): hidden 2048, ffn 8192, 24 layers, 16 heads, vocab 50304, parallel residual, untied
    "pythia-1.4b/4000": (
        {
            "model_type": "gpt_neox",
            "hidden_size": 32,
            "intermediate_size": 128,
            "num_hidden_layers": 24,
            "num_attention_heads": 4,
            "vocab_size": 786,
            "max_position_embeddings": SEQ,
            "rotary_pct": 0.25,
            "use_parallel_residual": True,
            "tie_word_embeddings": False,
        },
        1.41e9,
    ),
    # Qwen1.5-MoE-A2.7B: hidden 2048, 24 layers of 60 experts (ffn 1408, 4 per token) and a gated shared expert
    # (ffn 5632), 16 heads, vocab 151936, untied
    "qwen1.5-moe/4000": (
        {
            "model_type": "qwen2_moe",
            "hidden_size": 32,
            "intermediate_size": 88,
            "moe_intermediate_size": 24,  # a multiple of 8: grouped_mm wants 16-byte strides
            "shared_expert_intermediate_size": 88,
            "num_experts": 60,
            "num_experts_per_tok": 4,
            "decoder_sparse_step": 1,
            "num_hidden_layers": 24,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
            "vocab_size": 2374,
            "max_position_embeddings": SEQ,
            "tie_word_embeddings": False,
        },
        14.3e9,
    ),
    # Mixtral-8x7B: hidden 4096, 32 layers of 8 experts (ffn 14336, 2 per token), 32 heads with 8 KV heads, vocab
    # 32000, untied
    "mixtral/16000": (
        {
            "model_type": "mixtral",
            "hidden_size": 32,
            "intermediate_size": 112,
            "num_local_experts": 8,
            "num_experts_per_tok": 2,
            "num_hidden_layers": 32,
            "num_attention_heads": 4,
            "num_key_value_heads": 1,
            "vocab_size": 250,
            "max_position_embeddings": SEQ,
            "tie_word_embeddings": False,
        },
        46.7e9,
    ),
}


def _case(
    shape: str,
    stage: int,
    gas: int = 1,
    ckpt: bool = False,
    prefetch: float = DEFAULT_PREFETCH,
    all_reduce: bool = True,
    finetune: str = "full",
    targets: str = "",
    live: float = DEFAULT_LIVE,
    reuse: float = DEFAULT_REUSE,
) -> dict[str, Any]:
    """``prefetch``: stage3_prefetch_bucket_size at the real model's size (0: off). ``finetune``: full, lora (LoRA
    on PEFT's default targets, or ``targets`` such as all-linear; the rest frozen) or qlora (and the frozen linear
    layers NF4, stored as bf16 elements). ``live``, ``reuse``: stage3_max_live_parameters and
    stage3_max_reuse_distance at the real model's size."""
    return {
        "shape": shape,
        "stage": stage,
        "gas": gas,
        "ckpt": ckpt,
        "prefetch": prefetch,
        "all_reduce": all_reduce,
        "finetune": finetune,
        "targets": targets,
        "live": live,
        "reuse": reuse,
    }


# The HF Trainer fills an "auto" stage3_prefetch_bucket_size with 0.9 hidden^2 (transformers' integrations/deepspeed.py)
TRAINER_PREFETCH_7B = 0.9 * 4096**2


CASES = [
    _case("llama-7b/16000", 0, gas=2),
    _case("llama-7b/16000", 1, gas=2),
    _case("llama-7b/16000", 2, gas=2),
    _case("llama-7b/16000", 2, all_reduce=False),
    _case("llama-7b/16000", 3),
    _case("llama-7b/16000", 3, gas=2, ckpt=True),
    _case("llama-7b/16000", 3, prefetch=0),
    _case("llama-7b/16000", 3, prefetch=TRAINER_PREFETCH_7B),
    _case("llama-1b/4100", 2),
    _case("llama-1b/4100", 3),
    _case("llama-1b/4100", 3, ckpt=True),
    _case("gpt2-xl/2500", 3),
    _case("gpt2-xl/2500", 3, gas=2, ckpt=True),
    _case("llama-7b/16000", 2, finetune="lora"),
    _case("llama-7b/16000", 3, finetune="lora"),
    _case("llama-7b/16000", 3, ckpt=True, finetune="lora"),
    _case("llama-7b/16000", 2, finetune="qlora"),
    _case("llama-7b/16000", 3, finetune="qlora"),
    _case("llama-7b/16000", 3, gas=2, ckpt=True, finetune="qlora"),
    _case("llama-1b/4100", 3, finetune="qlora"),
    _case("gpt2-xl/2500", 3, finetune="lora"),
    _case("gpt2-xl/2500", 3, ckpt=True, finetune="lora"),
    _case("llama-1b/4100", 3, ckpt=True, finetune="lora"),
    _case("llama-7b/16000", 3, ckpt=True, finetune="lora", live=2e9),
    _case("llama-7b/16000", 3, ckpt=True, finetune="lora", live=0.5e9),
    _case("llama-7b/16000", 3, ckpt=True, finetune="lora", reuse=2e9),
    _case("llama-7b/16000", 3, finetune="lora", targets="all-linear"),
    _case("llama-7b/16000", 3, ckpt=True, finetune="lora", targets="all-linear"),
    _case("llama-7b/16000", 3, ckpt=True, finetune="qlora", targets="all-linear"),
    _case("pythia-1.4b/4000", 3, finetune="lora"),
    _case("pythia-1.4b/4000", 3, ckpt=True, finetune="lora"),
    _case("qwen1.5-moe/4000", 3),
    _case("qwen1.5-moe/4000", 3, finetune="lora", targets="q_proj,v_proj"),
    _case("qwen1.5-moe/4000", 3, ckpt=True, finetune="lora", targets="q_proj,v_proj"),
    _case("qwen1.5-moe/4000", 3, ckpt=True, finetune="lora", targets="all-linear"),
    _case("qwen1.5-moe/4000", 3, ckpt=True, finetune="qlora", targets="q_proj,v_proj"),
    _case("mixtral/16000", 3, finetune="lora", targets="q_proj,v_proj"),
    _case("mixtral/16000", 3, ckpt=True, finetune="lora", targets="q_proj,v_proj"),
]
QUICK = [
    _case("llama-7b/16000", 2, gas=2),
    _case("llama-7b/16000", 2, all_reduce=False),
    _case("llama-7b/16000", 3, gas=2, ckpt=True),
    _case("llama-1b/4100", 3),
    _case("llama-7b/16000", 3, ckpt=True, finetune="qlora"),
    _case("llama-1b/4100", 3, finetune="qlora"),
    _case("qwen1.5-moe/4000", 3, ckpt=True, finetune="lora", targets="q_proj,v_proj"),
]


def zero_settings(case: dict[str, Any], params: int) -> dict[str, Any]:
    """The case's zero_optimization section: its stage, and at stage 3 DeepSpeed's buffer defaults shrunk in the
    proportion of the shape (``params``, its 16-bit model's count) to the model it stands for."""
    zero: dict[str, Any] = {"stage": case["stage"]}
    if not case["all_reduce"]:
        zero["use_multi_rank_bucket_allreduce"] = False
    if case["stage"] == 3:
        scale = params / SHAPES[case["shape"]][1]
        zero.update(
            stage3_param_persistence_threshold=0,
            stage3_prefetch_bucket_size=round(case["prefetch"] * scale),
            stage3_max_live_parameters=round(case.get("live", DEFAULT_LIVE) * scale),
            stage3_max_reuse_distance=round(case.get("reuse", DEFAULT_REUSE) * scale),
        )
    return zero


def hf_model(config: dict[str, Any]) -> Any:
    from transformers import AutoConfig, AutoModelForCausalLM

    given = dict(config)
    return AutoModelForCausalLM.from_config(
        AutoConfig.for_model(given.pop("model_type"), use_cache=False, **given)
    )


def finetune_model(model: Any, finetune: str, targets: str = "") -> Any:
    """The model as PEFT trains it: LoRA adapters on PEFT's default targets, everything else frozen; for QLoRA the frozen
    linear layers NF4 first (bitsandbytes on the CPU), packed into bf16 elements as ZeRO-3 partitions them."""
    import torch
    from peft import LoraConfig, get_peft_model

    model = model.to(torch.bfloat16)
    if finetune == "qlora":
        quantize_linears_(model, torch.bfloat16, True, torch.bfloat16)
    model.requires_grad_(False)
    # PEFT's default targets (LLaMA: q_proj, v_proj) unless named
    names: Any = targets.split(",") if targets and targets != "all-linear" else targets or None
    lora = LoraConfig(r=LORA_RANK, lora_alpha=2 * LORA_RANK, target_modules=names)
    return get_peft_model(model, lora, autocast_adapter_dtype=False)


# ---- the ranks (run by the deepspeed launcher)


def _logged() -> dict[str, dict[int, int]]:
    import deepspeed.comm as dist

    return {
        op: {int(size): rec[0] for size, rec in sizes.items()}
        for op, sizes in dist.comms_logger.comms_dict.items()
    }


def _since(before: dict[str, dict[int, int]], after: dict[str, dict[int, int]]) -> dict[str, dict[int, int]]:
    out: dict[str, dict[int, int]] = {}
    for op, sizes in after.items():
        for size, n in sizes.items():
            if n - before.get(op, {}).get(size, 0):
                out.setdefault(op, {})[size] = n - before.get(op, {}).get(size, 0)
    return out


def run_case(case: dict[str, Any], rank: int, steps: int = 4) -> dict[str, Any]:
    import deepspeed
    import torch
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus

    torch.manual_seed(0)
    config, _ = SHAPES[case["shape"]]
    model = hf_model(config)
    full_params = sum(p.numel() for p in model.parameters())
    if case["finetune"] != "full":
        model = finetune_model(model, case["finetune"], case.get("targets", ""))
    if case["ckpt"]:
        model.gradient_checkpointing_enable()
    params = sum(
        p.numel() for p in model.parameters()
    )  # as DeepSpeed partitions them (4-bit packed for QLoRA)
    ds = {
        "train_micro_batch_size_per_gpu": MICRO_BATCH,
        "gradient_accumulation_steps": case["gas"],
        "zero_optimization": zero_settings(case, full_params),
        "bf16": {"enabled": True},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "torch_adam": True}},
        "comms_logger": {"enabled": True, "prof_all": True, "verbose": False},
    }
    trainable = [p for p in model.parameters() if p.requires_grad]
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=trainable, config=ds)
    gen = torch.Generator().manual_seed(1 + rank)
    vocab = config["vocab_size"]
    kept = None
    peak = [0]  # the most elements gathered or in flight after any module's forward (the recomputed ones too)

    def gathered() -> int:
        live = (ZeroParamStatus.AVAILABLE, ZeroParamStatus.INFLIGHT)
        return sum(p.ds_numel for p in engine.module.parameters() if p.ds_status in live)

    def sample(*_: Any) -> None:
        peak[0] = max(peak[0], gathered())

    hooks = [m.register_forward_hook(sample) for m in engine.module.modules()] if case["stage"] == 3 else []
    try:
        for _step in range(steps):
            before, peak[0] = _logged(), 0
            for _ in range(case["gas"]):
                ids = torch.randint(0, vocab, (MICRO_BATCH, SEQ), generator=gen).to(engine.device)
                out = engine(input_ids=ids, labels=ids)
                if case["stage"] == 3:
                    kept = sum(
                        p.ds_numel
                        for p in engine.module.parameters()
                        if p.ds_status == ZeroParamStatus.AVAILABLE
                    )
                engine.backward(out.loss)
                engine.step()
            last = _since(before, _logged())
        peak_gathered = peak[0] if hooks else None
        return {
            **case,
            "params": params,
            "zero": ds["zero_optimization"],
            "ops": last,
            "kept": kept,
            "peak_gathered": peak_gathered,
        }
    finally:
        for hook in hooks:
            hook.remove()
        engine.destroy()


def worker(cases_file: Path, out: Path) -> None:
    import deepspeed
    import torch

    deepspeed.init_distributed()
    rank = int(os.environ.get("RANK", "0"))
    for case in json.loads(cases_file.read_text()):
        result = run_case(case, rank)
        if rank == 0:
            with out.open("a") as fh:
                fh.write(json.dumps(result) + "\n")
        torch.distributed.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # DeepSpeed 0.19.8 on CPU sometimes aborts a rank at interpreter exit


# ---- the launcher side


def sent_per_gpu(ops: dict[str, dict[int, int]], world: int = WORLD) -> float:
    """Bytes each GPU sends for these logged calls (op -> message bytes -> calls), as a ring runs each op. DeepSpeed
    logs an all-gather's input (the shard), a reduce-scatter's input (the whole buffer)."""
    ring = (world - 1) / world
    factor = {
        "all_reduce": 2 * ring,
        "all_reduce_coalesced": 2 * ring,
        "reduce_scatter_tensor": ring,
        "reduce_scatter": ring,
        "reduce": ring,
        "broadcast": ring,
        "all_gather_into_tensor": world - 1,
        "all_gather": world - 1,
    }
    total = 0.0
    for op, sizes in ops.items():
        if op not in factor:
            raise SystemExit(f"comm_volume: DeepSpeed logged an op this script does not count: {op}")
        total += factor[op] * sum(int(size) * n for size, n in sizes.items())
    return total


def predicted(result: dict[str, Any]) -> dict[str, Any]:
    """The planner's figures for a rank's result: bytes each GPU sends per optimizer step, the planner's parameter
    count and, at stage 3, the elements kept gathered for backward and the gathered working set at its peak."""
    from wizard.model import spec_from_config
    from wizard.planner import with_finetune
    from wizard.planner.buffers import DEFAULT_BUFFERS, ZeroBuffers
    from wizard.planner.memory import estimate_memory
    from wizard.planner.throughput import communication_volume
    from wizard.planner.zero3 import stage3_elements, stage3_kept_for_backward
    from wizard.strategy import Strategy
    from wizard.tuning import make_finetune

    config, _ = SHAPES[result["shape"]]
    spec = spec_from_config(config, name=result["shape"], source="bench/comm_volume.py")
    if result["finetune"] != "full":
        ft = make_finetune(
            result["finetune"], rank=LORA_RANK, alpha=2 * LORA_RANK, targets=result.get("targets", "")
        )
        spec = with_finetune(spec, ft)
    zero = result["zero"]
    buffers = ZeroBuffers(
        prefetch_elements=zero.get("stage3_prefetch_bucket_size", DEFAULT_BUFFERS.prefetch_elements),
        max_live_parameters=zero.get("stage3_max_live_parameters", DEFAULT_BUFFERS.max_live_parameters),
        max_reuse_distance=zero.get("stage3_max_reuse_distance", DEFAULT_BUFFERS.max_reuse_distance),
        gradient_all_reduce=zero.get("use_multi_rank_bucket_allreduce", True),
    )
    s = Strategy(
        zero_stage=result["stage"],
        gpus_per_node=WORLD,
        micro_batch_size=MICRO_BATCH,
        gradient_accumulation_steps=result["gas"],
        activation_checkpointing=result["ckpt"],
        precision="bf16",
    )
    out: dict[str, Any] = {
        "sends": communication_volume(spec, s, buffers).per_step(result["gas"]),
        "params": stage3_elements(spec, s),
    }
    if result["stage"] == 3:
        items = dict(estimate_memory(spec, s, SEQ, buffers).gpu_items)
        out["kept"] = stage3_kept_for_backward(spec, s, buffers)
        out["peak_gathered"] = items.get("gathered parameters", 0) // s.weight_bytes
    return out


def compare(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for r in results:
        planner = predicted(r)
        measured = sent_per_gpu(r["ops"])
        row = {
            "case": label(r),
            "params": r["params"],
            "planner_params": planner["params"],
            "sent_bytes": measured,
            "predicted_bytes": planner["sends"],
            "error": planner["sends"] / measured - 1 if measured else None,
            "ops": r["ops"],
        }
        if r.get("kept") is not None and "kept" in planner:
            row.update(kept=r["kept"], predicted_kept=planner["kept"])
            row["kept_error"] = (planner["kept"] - r["kept"]) / r["params"]
        if r.get("peak_gathered") is not None and "peak_gathered" in planner:
            row.update(peak_gathered=r["peak_gathered"], predicted_peak_gathered=planner["peak_gathered"])
            row["peak_gathered_error"] = (planner["peak_gathered"] - r["peak_gathered"]) / r["params"]
        rows.append(row)
    return rows


def label(c: dict[str, Any]) -> str:
    parts = [c["shape"], f"z{c['stage']}", f"ga{c['gas']}"]
    if c["ckpt"]:
        parts.append("ckpt")
    if c["prefetch"] != DEFAULT_PREFETCH:
        parts.append(f"prefetch {c['prefetch']:.3g}")
    if not c["all_reduce"]:
        parts.append("reduce to owners")
    if c.get("live", DEFAULT_LIVE) != DEFAULT_LIVE:
        parts.append(f"live {c['live']:.3g}")
    if c.get("reuse", DEFAULT_REUSE) != DEFAULT_REUSE:
        parts.append(f"reuse {c['reuse']:.3g}")
    if c["finetune"] != "full":
        parts.append(
            ("QLoRA" if c["finetune"] == "qlora" else "LoRA")
            + (f" {c['targets']}" if c.get("targets") else "")
        )
    return " ".join(parts)


def launch(cases: list[dict[str, Any]], timeout: float) -> list[dict[str, Any]]:
    """Run ``cases`` in one `deepspeed` launch of two ranks; their results (rank 0's)."""
    with tempfile.TemporaryDirectory(prefix="dswiz-comm-") as tmp:
        cases_file, out = Path(tmp) / "cases.json", Path(tmp) / "results.jsonl"
        cases_file.write_text(json.dumps(cases))
        launcher = Path(sys.executable).parent / "deepspeed"
        cmd = [str(launcher) if launcher.exists() else "deepspeed", "--num_gpus", str(WORLD)]
        cmd += ["--master_port", str(free_port()), __file__, "--worker", str(cases_file), "--raw", str(out)]
        try:  # in a process group of its own: a timeout stops the ranks too, not only the launcher
            proc = run_in_group(cmd, cwd=ROOT, env=repo_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                timeout=timeout)  # fmt: skip
        except subprocess.TimeoutExpired:
            done = len(out.read_text().splitlines()) if out.exists() else 0
            raise SystemExit(
                f"comm_volume: {done} of {len(cases)} cases done in {timeout:.0f} s; give more with --timeout-s"
            ) from None
        output = proc.stdout
        results = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
        if proc.returncode != 0 or len(results) != len(cases):
            raise SystemExit(
                f"comm_volume: the deepspeed launch failed (exit {proc.returncode}):\n{output[-3000:]}"
            )
        return results


def markdown(doc: dict[str, Any]) -> str:
    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x * 100:+.2f} %"

    lines = md_heading(
        "Communication per optimizer step: DeepSpeed's comms logger beside the planner",
        f"{doc['date']}, {doc['host']}; DeepSpeed {doc['deepspeed']}, torch {doc['torch']}, transformers "
        f"{doc['transformers']}; {WORLD} CPU ranks (gloo), micro-batch {MICRO_BATCH}, sequence {SEQ}, bf16. "
        "Bytes each GPU sends in the last of 4 optimizer steps, as a ring runs each logged call; kept: parameters "
        "still gathered when that step's (last) forward ended. Errors: planner / measured - 1; kept as a share "
        "of the model.",
        "`python3 bench/comm_volume.py"
        + (" --quick" if doc["quick"] else "")
        + "`"
        + (
            f"; re-predicted by the planner of {doc['repredicted']['date']} (commit "
            f"{doc['repredicted']['commit']}) beside the readings of {doc['repredicted']['from']}"
            if doc.get("repredicted")
            else ""
        ),
    )
    lines += md_table(
        [
            "case",
            "parameters",
            "sent (KiB)",
            "planner (KiB)",
            "error",
            "kept",
            "planner kept",
            "kept error",
            "peak gathered",
            "planner",
            "peak error",
        ],
        [
            (
                r["case"],
                f"{r['params']:,}",
                f"{r['sent_bytes'] / 1024:,.1f}",
                f"{r['predicted_bytes'] / 1024:,.1f}",
                pct(r["error"]),
                f"{r['kept']:,}" if "kept" in r else "-",
                f"{r['predicted_kept']:,}" if "kept" in r else "-",
                pct(r.get("kept_error")),
                f"{r['peak_gathered']:,}" if "peak_gathered" in r else "-",
                f"{r['predicted_peak_gathered']:,}" if "peak_gathered" in r else "-",
                pct(r.get("peak_gathered_error")),
            )
            for r in doc["rows"]
        ],
    )
    verdict = "yes" if doc["within_tolerance"] else "NO"
    lines += ["", f"Volume within {TOLERANCE:.0%}, kept within {KEPT_TOLERANCE:.0%}: {verdict}", ""]
    return "\n".join(lines)


def within_tolerance(rows: list[dict[str, Any]]) -> bool:
    """Every compared row's volume within TOLERANCE and its kept count within KEPT_TOLERANCE of the model."""
    return all(
        abs(r["error"]) <= TOLERANCE and abs(r.get("kept_error", 0.0)) <= KEPT_TOLERANCE
        for r in rows
        if r["error"] is not None
    )


def repredict(path: Path, out: Path) -> Path:
    """A result file's readings (what the ranks sent, kept and gathered) beside what the planner says now:
    ``<stem>-repredicted.json`` (+ .md). No rank runs; each row's case is found again by its label."""
    doc = json.loads(path.read_text())
    by_label = {label(c): c for c in CASES + QUICK}
    results = []
    for row in doc["rows"]:
        case = by_label.get(row["case"])
        if case is None:
            raise SystemExit(f"comm_volume: {path.name}: no case is labelled {row['case']!r} any more")
        full = sum(p.numel() for p in hf_model(SHAPES[case["shape"]][0]).parameters())
        results.append({**case, "params": row["params"], "zero": zero_settings(case, full), "ops": row["ops"],
                        "kept": row.get("kept"), "peak_gathered": row.get("peak_gathered")})  # fmt: skip
    doc["rows"] = compare(results)
    doc["within_tolerance"] = within_tolerance(doc["rows"])
    doc["repredicted"] = {"from": path.name, "date": dt.date.today().isoformat(), "commit": head_commit()}
    text = markdown(doc)
    write_result(out, f"{path.stem}-repredicted", doc, text)
    return out / f"{path.stem}-repredicted.json"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="seven cases (the test suite's)")
    ap.add_argument(
        "--match", default="", help="only the cases whose label contains this (or any of a,b,...), e.g. QLoRA"
    )
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--label", default="")
    ap.add_argument(
        "--timeout-s", type=float, default=2400, help="for the whole launch (about 40 s a case here)"
    )
    ap.add_argument(
        "--repredict",
        type=Path,
        metavar="FILE",
        help="a result file: its readings beside the planner's figures now (no rank runs)",
    )
    ap.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--raw", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--local_rank", "--local-rank", type=int, default=-1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.raw)
        return 0
    if args.repredict:
        print(f"wrote {repredict(args.repredict, args.out)} and .md")
        return 0
    import deepspeed
    import torch
    import transformers

    wanted = args.match.split(",")
    cases = [c for c in (QUICK if args.quick else CASES) if any(w in label(c) for w in wanted)]
    if not cases:
        ap.error(
            f"no case's label contains {args.match!r}; the labels: " + ", ".join(label(c) for c in CASES)
        )
    rows = compare(launch(cases, args.timeout_s))
    within = within_tolerance(rows)
    doc = {
        "date": dt.date.today().isoformat(),
        "host": platform.node(),
        "deepspeed": deepspeed.__version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "quick": args.quick,
        "smoke": False,
        "tolerance": TOLERANCE,
        "kept_tolerance": KEPT_TOLERANCE,
        "within_tolerance": within,
        "rows": rows,
    }
    text = markdown(doc)
    print(text)
    stem = (
        f"comm_volume-{doc['date']}"
        + ("-quick" if args.quick else "")
        + (f"-{args.label}" if args.label else "")
    )
    write_result(args.out, stem, doc, text)
    return 0 if within else 1


if __name__ == "__main__":
    sys.exit(main())
