"""A tiny causal language model trained with DeepSpeed: the demo's job, and a script to try `dswiz launch` on.

It runs anywhere DeepSpeed runs: on GPUs (NCCL) and on CPU (gloo), under the `deepspeed` launcher or under
`accelerate launch` (detected from the environment accelerate sets). The data is synthetic and learnable (each
token is followed by the next one, modulo the vocabulary), so the loss visibly falls.

    deepspeed --num_gpus 2 train_tiny.py --deepspeed_config ds_config.json --steps 50
    accelerate launch --config_file accelerate.yaml train_tiny.py --steps 50

Rank 0 prints one dict per logged step, the way the HF Trainer does, so monitors can read the loss:
    {'loss': 3.21, 'learning_rate': 0.001, 'epoch': 0.1, 'step': 10}

Options for testing failure handling: --fail-at-step N [--fail-rank R] raises on that rank, --sleep-per-step S slows
steps down, --save-dir DIR saves a DeepSpeed checkpoint at the end, --dump-weights FILE makes rank 0 save the full
trained weights (gathered from the ZeRO-3 shards) with torch.save, to compare with `dswiz consolidate`, --eval-only
runs forward passes only (ZeRO inference).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn


class TinyCausalLM(nn.Module):
    """GPT-style: token + position embeddings, pre-LN transformer blocks, tied LM head."""

    def __init__(self, vocab: int, hidden: int, layers: int, heads: int, seq_len: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, hidden)
        self.pos = nn.Embedding(seq_len, hidden)
        block = nn.TransformerEncoderLayer(
            hidden, heads, dim_feedforward=4 * hidden, dropout=0.0, batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(hidden)
        for emb in (self.tok, self.pos):  # GPT-2's init: a tied head on N(0, 1) embeddings starts at loss ~50
            nn.init.normal_(emb.weight, std=0.02)
        self.register_buffer(
            "causal", torch.triu(torch.full((seq_len, seq_len), float("-inf")), 1), persistent=False
        )

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        s = ids.shape[1]
        x = self.tok(ids) + self.pos(torch.arange(s, device=ids.device))
        x = self.blocks(x, mask=self.causal[:s, :s].to(x.dtype), is_causal=True)
        return self.norm(x) @ self.tok.weight.t()  # tied head


def synthetic_batch(batch: int, seq_len: int, vocab: int, generator: torch.Generator) -> torch.Tensor:
    start = torch.randint(0, vocab, (batch, 1), generator=generator)
    return (start + torch.arange(seq_len + 1)) % vocab  # next token = this token + 1


def lm_loss(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tokens.reshape(-1))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=30, help="optimizer steps to run (default 30)")
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument(
        "--lr", type=float, default=1e-3, help="lr for the script's own optimizer (no optimizer in config)"
    )
    p.add_argument("--log-every", type=int, default=5, help="print the loss dict every N steps (rank 0)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--fail-at-step", type=int, default=None, help="raise RuntimeError at this step (testing)")
    p.add_argument("--fail-rank", type=int, default=None, help="only this rank fails (default: all)")
    p.add_argument("--sleep-per-step", type=float, default=0.0, help="seconds to sleep each step (testing)")
    p.add_argument("--save-dir", default=None, help="save a DeepSpeed checkpoint here at the end")
    p.add_argument(
        "--dump-weights", default=None, help="rank 0 saves the full trained state dict here (torch.save)"
    )
    p.add_argument("--eval-only", action="store_true", help="forward passes only (ZeRO-3 inference)")
    p.add_argument("--local_rank", "--local-rank", type=int, default=int(os.environ.get("LOCAL_RANK", -1)))
    # What DeepSpeed's add_config_arguments adds, plus the HF-style spelling: --deepspeed FILE.
    p.add_argument("--deepspeed_config", "--deepspeed-config", default=None)
    p.add_argument("--deepspeed", nargs="?", const=True, default=None, help="enable DeepSpeed / config file")
    args = p.parse_args(argv)
    if isinstance(args.deepspeed, str) and not args.deepspeed_config:
        args.deepspeed_config = args.deepspeed
    return args


def rank0_print(*parts: object) -> None:
    if int(os.environ.get("RANK", "0")) == 0:
        print(*parts, flush=True)


def build(args: argparse.Namespace) -> TinyCausalLM:
    torch.manual_seed(args.seed)
    return TinyCausalLM(args.vocab, args.hidden, args.layers, args.heads, args.seq_len)


def maybe_fail(args: argparse.Namespace, step: int) -> None:
    if args.fail_at_step is not None and step == args.fail_at_step:
        rank = int(os.environ.get("RANK", "0"))
        if args.fail_rank is None or args.fail_rank == rank:
            raise RuntimeError(f"injected failure at step {step} on rank {rank} (--fail-at-step)")


def log_step(step: int, loss: float, lr: float, total: int) -> None:
    entry = {"loss": round(loss, 4), "learning_rate": lr, "epoch": round(step / total, 4), "step": step}
    rank0_print(entry)


def dump_full_weights(engine, path: str) -> None:
    """Rank 0 saves the full weights. Under ZeRO-3 each rank holds a slice of every parameter:
    GatheredParameters assembles them on all ranks for the duration of the block (all ranks must enter it)."""
    import deepspeed

    with deepspeed.zero.GatheredParameters(list(engine.module.parameters()), modifier_rank=None):
        if engine.global_rank == 0:
            state = {k: v.detach().cpu().clone() for k, v in engine.module.state_dict().items()}
            torch.save(state, path)
            print(f"full weights saved to {path}", flush=True)


def train_with_deepspeed(args: argparse.Namespace) -> None:
    import deepspeed

    if not args.deepspeed_config:
        sys.exit("train_tiny.py: pass --deepspeed_config FILE (or --deepspeed FILE)")
    with open(args.deepspeed_config) as fh:
        ds_config = json.load(fh)
    deepspeed.init_distributed()
    model = build(args)
    rank0_print(f"model: {sum(p.numel() for p in model.parameters()):,} parameters")
    client_opt = None
    if "optimizer" not in ds_config and not args.eval_only:
        client_opt = torch.optim.AdamW(model.parameters(), lr=args.lr, fused=True)  # the step dswiz plans
    engine, _, _, _ = deepspeed.initialize(
        args=argparse.Namespace(local_rank=args.local_rank, deepspeed_config=args.deepspeed_config),
        model=model,
        model_parameters=None if args.eval_only else model.parameters(),
        optimizer=client_opt,
    )
    micro = engine.train_micro_batch_size_per_gpu()
    gas = engine.gradient_accumulation_steps()
    gen = torch.Generator().manual_seed(args.seed + engine.global_rank)
    rank0_print(f"micro_batch={micro} grad_accum={gas} world={engine.world_size} steps={args.steps}")
    if args.eval_only:
        engine.eval()
        # What runs the forward passes: without an optimizer, ZeRO-3 builds DeepSpeedZeRoOffload (no gradients).
        rank0_print(f"inference: {type(engine.optimizer).__name__}, module.training={engine.module.training}")
        with torch.no_grad():
            for step in range(1, args.steps + 1):
                tokens = synthetic_batch(micro, args.seq_len, args.vocab, gen).to(engine.device)
                loss = lm_loss(engine(tokens[:, :-1]), tokens[:, 1:])
                if step % args.log_every == 0 or step == args.steps:
                    rank0_print({"eval_loss": round(loss.item(), 4), "step": step})
        return
    for step in range(1, args.steps + 1):
        maybe_fail(args, step)
        for _ in range(gas):
            tokens = synthetic_batch(micro, args.seq_len, args.vocab, gen).to(engine.device)
            loss = lm_loss(engine(tokens[:, :-1]), tokens[:, 1:])
            engine.backward(loss)
            engine.step()
        if args.sleep_per_step:
            time.sleep(args.sleep_per_step)
        if step % args.log_every == 0 or step == args.steps:
            lr = engine.get_lr()[0] if engine.get_lr() else args.lr
            log_step(step, loss.item(), lr, args.steps)
    if args.save_dir:
        engine.save_checkpoint(args.save_dir, tag="final")
        rank0_print(f"checkpoint saved to {os.path.join(args.save_dir, 'final')}")
    if args.dump_weights:
        dump_full_weights(engine, args.dump_weights)
    final = loss.item()
    rank0_print(
        f"done: {args.steps} steps, final loss {final:.4f}" + (" (nan!)" if math.isnan(final) else "")
    )


def train_with_accelerate(args: argparse.Namespace) -> None:
    from accelerate import Accelerator
    from accelerate.utils import DummyOptim, DummyScheduler

    accelerator = Accelerator()
    ds_plugin = accelerator.state.deepspeed_plugin
    ds_config = ds_plugin.deepspeed_config if ds_plugin is not None else {}
    model = build(args)
    if "optimizer" in ds_config:
        optimizer = DummyOptim(model.parameters(), lr=args.lr)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, fused=True)
    micro = ds_config.get("train_micro_batch_size_per_gpu", 4)
    micro = micro if isinstance(micro, int) else 4
    data = [
        synthetic_batch(micro, args.seq_len, args.vocab, torch.Generator().manual_seed(i)) for i in range(8)
    ]
    loader = torch.utils.data.DataLoader(data, batch_size=None)
    if "scheduler" in ds_config:
        scheduler = DummyScheduler(optimizer, total_num_steps=args.steps, warmup_num_steps=0)
        model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    else:
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    rank0_print(
        f"accelerate: {accelerator.num_processes} process(es) per rank group, distributed={accelerator.distributed_type}"
    )
    model.train()
    step = 0
    while step < args.steps:
        for tokens in loader:
            step += 1
            maybe_fail(args, step)
            with accelerator.accumulate(model):
                loss = lm_loss(model(tokens[:, :-1]), tokens[:, 1:])
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
            if args.sleep_per_step:
                time.sleep(args.sleep_per_step)
            if step % args.log_every == 0 or step == args.steps:
                log_step(step, loss.item(), args.lr, args.steps)
            if step >= args.steps:
                break
    rank0_print(f"done: {args.steps} steps, final loss {loss.item():.4f}")


def leave_after_success() -> None:
    """Wait for every rank, flush, and on CPU leave without C++ static destructors.

    DeepSpeed 0.19.8 on the CPU (gloo + its shm op) sometimes aborts a rank at interpreter exit after the work is
    done ("terminate called without an active exception", about 1 run in 10), which turns a finished job into a
    failed one. Only reached after success: a failure still raises and exits with its traceback. GPU runs exit
    normally."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    if not torch.cuda.is_available():
        os._exit(0)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true":
        train_with_accelerate(args)
    else:
        train_with_deepspeed(args)
    leave_after_success()


if __name__ == "__main__":
    main()
