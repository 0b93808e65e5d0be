"""The Strategy step's small words and how a hand-made stage change is kept valid (no Textual here); the
strategy's own label is wizard.strategy's."""

from __future__ import annotations

from wizard.strategy import Strategy


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


def group_label(group: str) -> str:
    return {"stage": "stage", "opt": "optimizer offload", "param": "parameter offload"}[group]
