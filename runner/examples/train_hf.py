"""Training a Hugging Face causal LM under DeepSpeed: LoRA (the default) written the way dswiz's hint says
(peft.LoraConfig + get_peft_model, then deepspeed.initialize on the trainable parameters), or every weight
(--finetune full). The model is built from a config.json (no download; in the config's precision, on the GPU
where there is one), so it runs anywhere: on GPUs (NCCL) and on CPU (gloo).

    dswiz config --yes --model ./tiny/config.json --finetune lora --out cfg ...
    dswiz launch --config cfg train_hf.py --model-config ./tiny/config.json --steps 10

Activation checkpointing is switched on in the model (gradient_checkpointing_enable) when the DeepSpeed config has
an activation_checkpointing section, as dswiz writes it for a plan that checkpoints. The loss is the model's own
(labels=input_ids), on synthetic, learnable data (each token is followed by the next one).

Rank 0 prints the trainable-parameter count, one loss dict per logged step (as the HF Trainer does), and at the end
whether the frozen base weights stayed exactly as they were (LoRA).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model-config", required=True, help="an HF config.json to build the model from")
    p.add_argument(
        "--finetune", choices=("lora", "full"), default="lora", help="LoRA adapters, or every weight"
    )
    p.add_argument("--lora-rank", type=int, default=8)
    p.add_argument("--lora-alpha", type=int, default=8)
    p.add_argument("--lora-targets", default="", help="comma-separated module names (default: PEFT's)")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--log-every", type=int, default=5)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--local_rank", "--local-rank", type=int, default=int(os.environ.get("LOCAL_RANK", -1)))
    p.add_argument("--deepspeed_config", "--deepspeed-config", default=None)
    return p.parse_args(argv)


def rank0_print(*parts: object) -> None:
    if int(os.environ.get("RANK", "0")) == 0:
        print(*parts, flush=True)


def main(argv: list[str] | None = None) -> None:
    import deepspeed
    from transformers import AutoConfig, AutoModelForCausalLM

    args = parse_args(argv)
    if not args.deepspeed_config:
        sys.exit("train_hf.py: pass --deepspeed_config FILE (dswiz launch does)")
    with open(args.deepspeed_config) as fh:
        ds_config = json.load(fh)
    if torch.cuda.is_available():  # before the process group, so NCCL binds each rank to its own GPU
        torch.cuda.set_device(max(args.local_rank, 0))
    deepspeed.init_distributed()
    torch.manual_seed(args.seed)
    with open(args.model_config) as fh:
        cfg_dict = json.load(fh)
    config = AutoConfig.for_model(cfg_dict.pop("model_type"), **cfg_dict)
    dtype = torch.bfloat16 if ds_config.get("bf16", {}).get("enabled") else None
    if torch.cuda.is_available():
        with torch.device("cuda", torch.cuda.current_device()):
            model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    else:
        model = AutoModelForCausalLM.from_config(config)
    if "activation_checkpointing" in ds_config:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if args.finetune == "lora":
        from peft import LoraConfig, get_peft_model

        targets = [t for t in args.lora_targets.split(",") if t] or None
        model = get_peft_model(
            model,
            LoraConfig(
                r=args.lora_rank, lora_alpha=args.lora_alpha, target_modules=targets, task_type="CAUSAL_LM"
            ),
        )
        trainable, total = model.get_nb_trainable_parameters()
    else:
        trainable = total = sum(p.numel() for p in model.parameters())
    rank0_print(json.dumps({"trainable_params": trainable, "all_params": total}))
    frozen_before = {n: p.detach().cpu().clone() for n, p in model.named_parameters() if not p.requires_grad}
    params = [p for p in model.parameters() if p.requires_grad]
    # fused=True: the optimizer step dswiz's planner assumes (and the HF Trainer's default, adamw_torch_fused).
    client_opt = torch.optim.AdamW(params, lr=args.lr, fused=True) if "optimizer" not in ds_config else None
    engine, _, _, _ = deepspeed.initialize(
        args=argparse.Namespace(local_rank=args.local_rank, deepspeed_config=args.deepspeed_config),
        model=model,
        model_parameters=params,
        optimizer=client_opt,
    )
    micro, vocab = engine.train_micro_batch_size_per_gpu(), config.vocab_size
    gen = torch.Generator().manual_seed(args.seed + engine.global_rank)
    loss = torch.tensor(float("nan"))
    for step in range(1, args.steps + 1):
        for _ in range(engine.gradient_accumulation_steps()):
            start = torch.randint(0, vocab, (micro, 1), generator=gen)
            tokens = ((start + torch.arange(args.seq_len + 1)) % vocab).to(engine.device)
            loss = engine(input_ids=tokens[:, :-1], labels=tokens[:, :-1]).loss
            engine.backward(loss)
            engine.step()
        if step % args.log_every == 0 or step == args.steps:
            rank0_print({"loss": round(loss.item(), 4), "learning_rate": args.lr, "step": step})
    unchanged = all(
        torch.equal(p.detach().cpu().to(frozen_before[n].dtype), frozen_before[n].cpu())
        for n, p in engine.module.named_parameters()
        if n in frozen_before
    )
    rank0_print(json.dumps({"frozen_base_unchanged": unchanged, "final_loss": round(loss.item(), 4)}))
    # DeepSpeed 0.19.8 on CPU sometimes aborts at interpreter exit (docs/cpu-testing.md): leave cleanly.
    torch.distributed.barrier()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
