"""The decision dswiz helps a user make: one DeepSpeed training (or inference) strategy.

``Strategy`` is what the planner ranks, what the wizard edits, what the config writers render and what the launcher
advises on. It holds choices only, no predictions (those live on ``wizard.planner.Candidate``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

OffloadDevice = Literal["none", "cpu", "nvme"]
Precision = Literal["bf16", "fp16", "fp32"]
Mode = Literal["train", "inference"]

OFFLOAD_DEVICES: tuple[OffloadDevice, ...] = ("none", "cpu", "nvme")
PRECISIONS: tuple[Precision, ...] = ("bf16", "fp16", "fp32")


@dataclass(frozen=True)
class Strategy:
    zero_stage: int = 2
    offload_optimizer: OffloadDevice = "none"
    offload_param: OffloadDevice = "none"  # only meaningful at stage 3
    precision: Precision = "bf16"
    micro_batch_size: int = 1  # per GPU
    gradient_accumulation_steps: int = 1
    activation_checkpointing: bool = False
    # ZeRO++ (stage 3 only): hpZ keeps a secondary 16-bit weight partition inside each node.
    zero_quantized_weights: bool = False
    zero_quantized_gradients: bool = False
    zero_hpz_partition_size: int = 1
    nodes: int = 1
    gpus_per_node: int = 1
    mode: Mode = "train"

    @property
    def world_size(self) -> int:
        """Data-parallel world size (dswiz plans pure data parallelism)."""
        return self.nodes * self.gpus_per_node

    @property
    def global_batch_size(self) -> int:
        """DeepSpeed's train_batch_size = micro x accumulation x world size (DeepSpeed 0.19.8
        runtime/config.py, DeepSpeedConfig._batch_assertion: it refuses any other train_batch_size)."""
        return self.micro_batch_size * self.gradient_accumulation_steps * self.world_size

    @property
    def weight_bytes(self) -> int:
        """Bytes of one weight (and of one gradient) in the strategy's precision: 2 in bf16 / fp16, 4 in fp32."""
        return 4 if self.precision == "fp32" else 2

    @property
    def steps_on_host(self) -> bool:
        """The optimizer steps on the host's cores (CPU Adam): training with the optimizer offloaded to the CPU or to
        NVMe. What the planner prices by the cores a rank gets, and what job.sbatch asks cores for."""
        return self.mode == "train" and self.offload_optimizer != "none"

    @property
    def offloads_to_nvme(self) -> bool:
        return "nvme" in (self.offload_optimizer, self.offload_param)

    def with_(self, **changes: Any) -> Strategy:
        return replace(self, **changes)

    @property
    def kind(self) -> tuple[object, ...]:
        """What the strategy is apart from its batch numbers: two strategies of one kind differ only in micro-batch
        and accumulation (the OOM re-plan keeps the kind; a probe measures each kind once)."""
        return (
            self.zero_stage,
            self.offload_optimizer,
            self.offload_param,
            self.precision,
            self.activation_checkpointing,
            self.uses_zeropp,
        )

    @property
    def uses_zeropp(self) -> bool:
        """ZeRO++: quantized weights or gradients, or a secondary (hpZ) partition inside the node."""
        return (
            self.zero_quantized_weights or self.zero_quantized_gradients or self.zero_hpz_partition_size > 1
        )

    def problems(self) -> list[str]:
        """Combinations DeepSpeed rejects or silently changes, in words (empty when valid).

        The planner never proposes these, the wizard shows them disabled with the reason.
        """
        out: list[str] = []
        if self.zero_stage not in (0, 1, 2, 3):
            out.append(f"ZeRO stage must be 0, 1, 2 or 3, not {self.zero_stage}")
        if self.offload_param != "none" and self.zero_stage != 3:
            out.append("parameter offload only works at ZeRO stage 3 (below it DeepSpeed ignores it)")
        if self.offload_optimizer != "none" and self.zero_stage == 0:
            out.append("optimizer offload needs ZeRO stage 1, 2 or 3")
        if self.offload_optimizer == "nvme" and self.zero_stage in (1, 2):
            out.append(
                "NVMe optimizer offload only works at stage 3 (at stage 1/2 DeepSpeed silently uses CPU)"
            )
        if self.offload_param == "nvme" and self.offload_optimizer == "none" and self.mode == "train":
            # Training: stage 3 sets up its NVMe swapper from offload_optimizer. ZeRO-Inference has no optimizer
            # (DeepSpeedZeRoOffload swaps the parameters alone).
            out.append("NVMe parameter offload needs the optimizer offloaded too (cpu or nvme)")
        if self.uses_zeropp and self.zero_stage != 3:
            out.append("ZeRO++ (quantized weights or gradients, hpZ) only acts at stage 3")
        if self.zero_hpz_partition_size > 1 and self.zero_hpz_partition_size != self.gpus_per_node:
            out.append("hpZ partition size should equal the number of GPUs per node")
        if self.micro_batch_size < 1 or self.gradient_accumulation_steps < 1:
            out.append("micro-batch size and gradient accumulation steps must be at least 1")
        if self.nodes < 1 or self.gpus_per_node < 1:
            out.append("nodes and GPUs per node must be at least 1")
        if self.mode == "inference":
            out += self._inference_problems()
        return out

    def _inference_problems(self) -> list[str]:
        out: list[str] = []
        if self.zero_stage != 3:
            # DeepSpeed 0.19.8 engine._configure_zero_optimizer: "zero stage {1,2} requires an optimizer".
            out.append(
                "ZeRO inference only uses stage 3 (stages 1-2 need an optimizer, stage 0 shards nothing)"
            )
        if self.offload_optimizer != "none":
            out.append("inference has no optimizer to offload (offload the parameters instead)")
        if self.activation_checkpointing:
            out.append("activation checkpointing only saves memory for a backward pass; inference has none")
        if self.zero_quantized_gradients:
            out.append("ZeRO++ quantized gradients need gradients; inference has none")
        if self.gradient_accumulation_steps != 1:
            out.append("gradient accumulation needs gradients; inference runs one forward per micro-batch")
        return out

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Strategy:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in known})


# ----------------------------------------------------------------------------------------------- words


def batch_for_global(
    target: int, world: int, micro: int | None, accumulation: int | None, *, target_said: str, also: str
) -> tuple[int, int] | None:
    """Where a global batch is asked for and one of micro-batch / accumulation is fixed: (micro-batch,
    accumulation) with the other derived, as DeepSpeed derives it from train_batch_size. None where neither or both
    are fixed (the caller says whether both agree). DswizError where no whole number does it: ``target_said`` names
    the target as the user gave it, ``also`` is a further way out."""
    from wizard.errors import DswizError

    if (micro is None) == (accumulation is None):
        return None
    given, name = (micro, "--micro-batch") if micro is not None else (accumulation, "--grad-accum")
    assert given is not None
    per = given * world
    if target % per:
        raise DswizError(
            f"{target_said} is not a multiple of {name} x GPUs = {given} x {world}",
            f"a {name} that divides {target // world}, or {also}",
        )
    return (given, target // per) if micro is not None else (target // per, given)


def strategy_label(s: Strategy) -> str:
    """The short name of a strategy, as plans, advice and tables print it: "ZeRO-3 optimizer->cpu ZeRO++ ckpt"."""
    parts = [f"ZeRO-{s.zero_stage}"]
    parts += [f"{what}->{device}" for what, device in _offloads(s)]
    if s.uses_zeropp:
        parts.append("ZeRO++")
    if s.activation_checkpointing:
        parts.append("ckpt")
    return " ".join(parts)


def strategy_description(s: Strategy) -> str:
    """The long form, with precision and batch: "ZeRO-3, optimizer→cpu, bf16, micro 4 × GAS 2, checkpointing"."""
    parts = [f"ZeRO-{s.zero_stage}"]
    parts += [f"{what}→{device}" for what, device in _offloads(s)]
    parts.append(s.precision)
    parts.append(f"micro {s.micro_batch_size} × GAS {s.gradient_accumulation_steps}")
    if s.activation_checkpointing:
        parts.append("checkpointing")
    return ", ".join(parts)


def stage_cell(s: Strategy) -> str:
    """The stage for a table cell: "0 (DDP)" (plain data parallelism, the baseline), "2", "3++" (with ZeRO++)."""
    if s.zero_stage == 0:
        return "0 (DDP)"
    return f"{s.zero_stage}{'++' if s.uses_zeropp else ''}"


def offload_cell(s: Strategy) -> str:
    """Where a strategy offloads, for a table cell: "-", "opt cpu", "opt+param nvme", "opt cpu, param nvme"."""
    opt, par = s.offload_optimizer, s.offload_param
    if opt == "none" and par == "none":
        return "-"
    if opt == par:
        return f"opt+param {opt}"
    return ", ".join(([f"opt {opt}"] if opt != "none" else []) + ([f"param {par}"] if par != "none" else []))


def _offloads(s: Strategy) -> list[tuple[str, OffloadDevice]]:
    pairs: list[tuple[str, OffloadDevice]] = [("optimizer", s.offload_optimizer), ("params", s.offload_param)]
    return [(what, device) for what, device in pairs if device != "none"]
