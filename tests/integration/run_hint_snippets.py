"""Runs the code snippets of wizard.hints for real, in one process, on CPU, one rank: each "after" snippet (and the
"before" snippets that the hints say fail) with a tiny model, a DeepSpeed config holding the optimizer/scheduler the
case says, and real accelerate / DeepSpeed / transformers. Prints one JSON line per case. Used by
tests/integration/test_hints_run.py (a subprocess, so DeepSpeed's process group does not live in pytest).

    python run_hint_snippets.py WORKDIR
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from wizard.hints import CONSUMERS, OPTIMIZER_SOURCES, SCHEDULER_SOURCES, code_hints  # noqa: E402

STEPS = 3


class TinyRegressor(nn.Module):
    """Returns its loss, the way a training script's model call would."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(8, 8)
        self.config = type(
            "Config", (), {"hidden_size": 8}
        )()  # accelerate reads hidden_size for "auto" buckets

    def forward(
        self, x: torch.Tensor | None = None, inputs: torch.Tensor | None = None
    ) -> torch.Tensor | dict[str, torch.Tensor]:
        if inputs is not None:  # the Trainer calls model(**batch) and wants {"loss": ...}
            return {"loss": self.net(inputs).pow(2).mean()}
        return self.net(x).pow(2).mean()


class DictDataset(torch.utils.data.Dataset):
    def __init__(self, n: int) -> None:
        self.data = torch.randn(n, 8, generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"inputs": self.data[i]}


def ds_config(consumer: str, opt: str, sched: str) -> dict:
    """What dswiz's writers put in: "auto" for the values accelerate / the Trainer fill, numbers for plain DeepSpeed."""
    auto = consumer != "deepspeed"
    cfg: dict = {
        "train_micro_batch_size_per_gpu": "auto" if consumer == "trainer" else 2,
        "gradient_accumulation_steps": "auto" if consumer == "trainer" else 1,
        "zero_optimization": {"stage": 2},
    }
    if consumer == "trainer":
        cfg["train_batch_size"] = "auto"
    if opt == "config":
        lr = "auto" if auto else 1e-3
        cfg["optimizer"] = {
            "type": "AdamW",
            "params": {"lr": lr, "weight_decay": "auto" if auto else 0.0, "torch_adam": True},
        }
    if sched == "config":
        params = (
            {k: "auto" for k in ("warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "total_num_steps")}
            if auto
            else {
                "warmup_min_lr": 0.0,
                "warmup_max_lr": 1e-3,
                "warmup_num_steps": 1,
                "total_num_steps": STEPS,
            }
        )
        cfg["scheduler"] = {"type": "WarmupDecayLR", "params": params}
    return cfg


def reset_accelerate() -> None:
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()


def run_case(consumer: str, opt: str, sched: str, snippet: str, workdir: Path) -> dict:
    name = f"{consumer}-{opt}-{sched}"
    config_path = workdir / f"{name}.json"
    config_path.write_text(json.dumps(ds_config(consumer, opt, sched)))
    torch.manual_seed(0)
    model = TinyRegressor()
    ns: dict = {
        "model": model,
        "train_loader": torch.utils.data.DataLoader(torch.randn(2 * STEPS, 8), batch_size=2),
        "train_dataset": DictDataset(2 * STEPS),
        "num_training_steps": STEPS,
        "__name__": "__snippet__",
    }
    before = [p.detach().clone() for p in model.parameters()]
    os.environ["ACCELERATE_USE_DEEPSPEED"] = "true" if consumer == "accelerate" else "false"
    os.environ["ACCELERATE_DEEPSPEED_CONFIG_FILE"] = str(config_path)
    sys.argv = ["train.py", "--deepspeed_config", str(config_path)]
    reset_accelerate()
    snippet = snippet.replace("ds_config.json", str(config_path)).replace(
        'output_dir="out"', f'output_dir="{workdir / name}"'
    )
    snippet = snippet.replace(
        "per_device_train_batch_size=8",
        f"per_device_train_batch_size=2, max_steps={STEPS}, report_to=[], disable_tqdm=True",
    )
    try:
        exec(compile(snippet, f"<{name}>", "exec"), ns)
        if consumer == "accelerate":  # the snippet prepares; the script's loop is unchanged by the hint
            accelerator, optimizer, scheduler = ns["accelerator"], ns["optimizer"], ns.get("scheduler")
            for batch in ns["train_loader"]:
                loss = ns["model"](batch)
                accelerator.backward(loss)
                optimizer.step()
                if scheduler is not None:
                    scheduler.step()
                optimizer.zero_grad()
        engine = ns.get("engine") or ns["model"]
        if consumer == "trainer":
            engine = ns["trainer"].model_wrapped
        inner = getattr(engine, "module", engine)
        params = [p.detach().float() for p in inner.parameters()]
        # ZeRO-2 keeps full parameters on every rank: a changed weight proves the optimizer stepped.
        changed = any(not torch.equal(a, b) for a, b in zip(before, params, strict=True))
        basic = getattr(engine, "basic_optimizer", None) or getattr(engine, "optimizer", None)
        sched_obj = getattr(engine, "lr_scheduler", None) or ns.get("scheduler")
        sched_obj = getattr(sched_obj, "scheduler", sched_obj)  # accelerate's AcceleratedScheduler wrapper
        return {
            "case": name,
            "ok": True,
            "engine": type(engine).__name__,
            "weights_changed": changed,
            "optimizer": type(basic).__name__,
            "scheduler": type(sched_obj).__name__ if sched_obj is not None else None,
            "lr": basic.param_groups[0]["lr"] if basic is not None else None,
        }
    except Exception as e:
        return {
            "case": name,
            "ok": False,
            "error": type(e).__name__,
            "message": str(e),
            "tb": traceback.format_exc()[-2000:],
        }


def main() -> int:
    workdir = Path(sys.argv[1])
    cases = [(c, o, s) for c in CONSUMERS for o in OPTIMIZER_SOURCES for s in SCHEDULER_SOURCES]
    only = os.environ.get("HINT_CASES")
    if only:
        cases = [c for c in cases if "-".join(c) in only.split(",")]
    for consumer, opt, sched in cases:
        hints = code_hints(consumer, opt, sched)
        result = run_case(consumer, opt, sched, hints.after, workdir)
        result["snippet"] = "after"
        print(json.dumps(result), flush=True)
    # The usual code with an optimizer in the DeepSpeed config: the failure the finding describes.
    hints = code_hints("accelerate", "config", "script")
    result = run_case("accelerate", "config", "script", hints.before, workdir)
    result["snippet"] = "before"
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
