"""Train the tiny model under several DeepSpeed configs inside ONE `deepspeed` launch (start-up costs ~30-50 s on a
small CPU machine, so the configs share it). Each rank builds a fresh model and engine per config, runs a few
optimizer steps, and rank 0 appends one JSON line per config to --out:

    {"config": "stage3_offload.json", "ok": true, "zero_stage": 3, "dtype": "torch.bfloat16", "world_size": 2,
     "optimizer": "AdamW", "offload_optimizer": "cpu", "losses": [...], "micro_batch": 2, "grad_accum": 1}
    {"config": "fp16.json", "ok": false, "error": "ValueError: Type fp16 is not supported on your device."}

    deepspeed --num_gpus 2 tests/integration/ds_multi_config_driver.py --out results.jsonl --steps 3 a.json b.json
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import deepspeed  # noqa: E402
import torch  # noqa: E402

from runner.examples.train_tiny import TinyCausalLM, lm_loss, synthetic_batch  # noqa: E402

VOCAB, HIDDEN, LAYERS, HEADS, SEQ = 128, 32, 1, 2, 16


def run_one(path: Path, steps: int, rank: int) -> dict[str, object]:
    cfg = json.loads(path.read_text())
    torch.manual_seed(0)
    model = TinyCausalLM(VOCAB, HIDDEN, LAYERS, HEADS, SEQ)
    client_opt = None if "optimizer" in cfg else torch.optim.AdamW(model.parameters(), lr=1e-3)
    engine, _, _, _ = deepspeed.initialize(
        model=model, model_parameters=model.parameters(), optimizer=client_opt, config=cfg
    )
    try:
        micro = engine.train_micro_batch_size_per_gpu()
        gas = engine.gradient_accumulation_steps()
        gen = torch.Generator().manual_seed(1 + rank)
        losses = []
        for _ in range(steps):
            for _ in range(gas):
                tokens = synthetic_batch(micro, SEQ, VOCAB, gen).to(engine.device)
                loss = lm_loss(engine(tokens[:, :-1]), tokens[:, 1:])
                engine.backward(loss)
                engine.step()
            losses.append(round(float(loss.item()), 4))
        offload = cfg.get("zero_optimization", {}).get("offload_optimizer", {}).get("device", "none")
        return {
            "ok": all(loss == loss for loss in losses),  # no NaN
            "zero_stage": int(engine.zero_optimization_stage()),
            "dtype": str(next(p for p in engine.module.parameters()).dtype),
            "world_size": engine.world_size,
            "optimizer": type(engine.basic_optimizer).__name__,
            "offload_optimizer": offload,
            "micro_batch": micro,
            "grad_accum": gas,
            "train_batch": engine.train_batch_size(),
            "losses": losses,
        }
    finally:
        if hasattr(engine, "destroy"):
            engine.destroy()
        del engine, model
        gc.collect()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("configs", nargs="+", type=Path)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--local_rank", "--local-rank", type=int, default=-1)
    args = p.parse_args()
    deepspeed.init_distributed()
    rank = int(os.environ.get("RANK", "0"))
    for path in args.configs:
        try:
            result = run_one(path, args.steps, rank)
        except Exception as e:  # reported per config, then the next one runs
            result = {
                "ok": False,
                "error": f"{type(e).__name__}: {e}",
                "trace": traceback.format_exc()[-2000:],
            }
        if rank == 0:
            with args.out.open("a") as fh:
                fh.write(json.dumps({"config": path.name, **result}) + "\n")
        torch.distributed.barrier()
    # DeepSpeed 0.19.8 on CPU sometimes aborts a rank at interpreter exit (see train_tiny.leave_after_success).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
