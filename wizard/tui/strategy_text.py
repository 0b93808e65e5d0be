"""What the Strategy step says about a strategy, and how a hand-made change is kept valid (no Textual here)."""

from __future__ import annotations

from wizard.strategy import Strategy


def describe(s: Strategy) -> str:
    parts = [f"ZeRO-{s.zero_stage}"]
    if s.offload_optimizer != "none":
        parts.append(f"optimizer→{s.offload_optimizer}")
    if s.offload_param != "none":
        parts.append(f"params→{s.offload_param}")
    parts.append(s.precision)
    parts.append(f"micro {s.micro_batch_size} × GAS {s.gradient_accumulation_steps}")
    if s.activation_checkpointing:
        parts.append("checkpointing")
    return ", ".join(parts)


def fmt_rate(tps: float | None) -> str:
    return "?" if tps is None else f"{tps:,.0f}"


def with_stage(s: Strategy, stage: int) -> Strategy:
    """Stage changed by hand: drop the offloads / ZeRO++ that the new stage cannot use (Strategy.problems)."""
    new = s.with_(zero_stage=stage)
    for reset in (
        {"offload_param": "none"},
        {"offload_optimizer": "none"},
        {"zero_quantized_weights": False, "zero_hpz_partition_size": 1},
    ):
        if not new.problems():
            break
        new = new.with_(**reset)
    return new


def uses_nvme(s: Strategy) -> bool:
    return "nvme" in (s.offload_optimizer, s.offload_param)


def group_label(group: str) -> str:
    return {"stage": "stage", "opt": "optimizer offload", "param": "parameter offload"}[group]
