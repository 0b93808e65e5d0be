"""The max-batch table as every front door shows it (`dswiz plan --max-batch`, the wizard's Strategy step): one line
per stage and offload choice, without and with activation checkpointing side by side."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from wizard.planner import MaxBatchRow
from wizard.strategy import offload_cell, stage_cell


@dataclass(frozen=True)
class MaxBatchPair:
    """One line of the table: the planner's rows for one stage / offload / ZeRO++ / precision choice."""

    stage: str  # "0 (DDP)" (plain data parallelism, the baseline), "2", "3++" (with ZeRO++)
    offload: str  # offload_cell: "-", "opt cpu", "opt+param nvme"
    plain: MaxBatchRow | None  # without activation checkpointing
    checkpointed: MaxBatchRow | None

    def rows(self, with_checkpointing: bool) -> tuple[MaxBatchRow | None, ...]:
        return (self.plain, self.checkpointed) if with_checkpointing else (self.plain,)


def max_batch_pairs(rows: Iterable[MaxBatchRow]) -> list[MaxBatchPair]:
    """The rows paired by checkpointing, in the planner's order."""
    groups: dict[tuple[object, ...], dict[bool, MaxBatchRow]] = {}
    for row in rows:
        s = row.strategy
        key = (s.zero_stage, s.offload_optimizer, s.offload_param, s.uses_zeropp, s.precision)
        groups.setdefault(key, {})[s.activation_checkpointing] = row
    out = []
    for pair in groups.values():
        first = next(iter(pair.values())).strategy
        out.append(MaxBatchPair(stage_cell(first), offload_cell(first), pair.get(False), pair.get(True)))
    return out
