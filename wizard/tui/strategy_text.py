"""The Strategy step's small words (rich text, no Textual): the advice above the table, and how a hand-made stage
change is kept valid; the strategy's own label is wizard.strategy's."""

from __future__ import annotations

from rich.text import Text

from wizard.planner import Candidate, Plan
from wizard.strategy import Strategy, offload_cell, stage_cell


def fmt_rate(tps: float | None) -> str:
    return "?" if tps is None else f"{tps:,.0f}"


def with_stage(s: Strategy, stage: int) -> Strategy:
    """Stage changed by hand: drop the offloads / ZeRO++ that the new stage cannot use (Strategy.problems)."""
    new = s.with_(zero_stage=stage)
    for reset in (
        {"offload_param": "none"},
        {"offload_optimizer": "none"},
        {"zero_quantized_weights": False, "zero_quantized_gradients": False, "zero_hpz_partition_size": 1},
    ):
        if not new.problems():
            break
        new = new.with_(**reset)
    return new


def group_label(group: str) -> str:
    return {"stage": "stage", "opt": "optimizer offload", "param": "parameter offload"}[group]


def advice_text(plan: Plan) -> Text:
    """Above the table: when nothing fits, the planner's "what would fit" advice as `dswiz plan` prints it, one
    line each; then the plan's notes."""
    text = Text()
    if plan.best is None:
        text.append("Nothing fits as asked. What would:", style="bold red")
        for line in plan.advice:
            text.append(f"\n  - {line}")
    for note in plan.notes:
        text.append(f"\n{note}" if text.plain else note, style="dim")
    return text


def gib(n: int | None) -> str:
    return "?" if n is None else f"{n / 2**30:.1f}"


def candidate_cells(c: Candidate, *, best: bool) -> dict[str, str | Text]:
    """One row of the candidates table, by column (the columns `dswiz plan` prints, in its words)."""
    s, p = c.strategy, c.predicted
    return {
        "": "★" if best else "",
        "ZeRO": stage_cell(s),
        "offload": offload_cell(s),
        "ckpt": "yes" if s.activation_checkpointing else "-",
        "prec": s.precision,
        "batch": f"{s.micro_batch_size}x{s.gradient_accumulation_steps}",
        "GPU GiB": Text(gib(p.gpu_needed_bytes), style="red" if "gpu" in c.limits else ""),
        "RAM GiB": Text(gib(p.cpu_bytes), style="red" if "cpu" in c.limits else ""),
        "NVMe GiB": gib(p.nvme_bytes) if p.nvme_bytes else "-",
        "tok/s": fmt_rate(p.tokens_per_sec),
        "fits": Text("yes", style="green") if c.fits else Text("no", style="red"),
    }
