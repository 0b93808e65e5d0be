"""How the model is trained: full fine-tuning, LoRA (PEFT) or QLoRA (a 4-bit NF4 base via bitsandbytes, LoRA on
top). A frozen fact carried by ``wizard.model.ModelSpec`` (so the plan sidecar and launch's OOM re-plan keep it);
the accounting lives in ``wizard.planner.finetune``.

Defaults follow the installed libraries: ``peft.LoraConfig`` (peft 0.21.2, tuners/lora/config.py) has r=8 and
lora_alpha=8; an empty target list means PEFT's own per-architecture default
(peft/utils/constants.py, TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING). QLoRA (arXiv:2305.14314) uses NF4
with double quantization of the quantization constants, which is what ``BitsAndBytesConfig(load_in_4bit=True,
bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True)`` asks for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

from wizard.errors import DswizError

FineTuneMode = Literal["full", "lora", "qlora"]
FINETUNE_MODES: tuple[FineTuneMode, ...] = ("full", "lora", "qlora")
ALL_LINEAR = "all-linear"  # PEFT's shorthand: every linear layer except the output head
DEFAULT_LORA_RANK = 8  # peft.LoraConfig.r
DEFAULT_LORA_ALPHA = 8  # peft.LoraConfig.lora_alpha


@dataclass(frozen=True)
class FineTune:
    """Which parameters train and how the frozen base is stored."""

    mode: FineTuneMode = "full"
    lora_rank: int = DEFAULT_LORA_RANK
    lora_alpha: int = DEFAULT_LORA_ALPHA
    lora_targets: tuple[str, ...] = ()  # empty: PEFT's default for the architecture; ("all-linear",) allowed
    double_quant: bool = True  # QLoRA: quantize the quantization constants too (bnb_4bit_use_double_quant)

    @property
    def uses_lora(self) -> bool:
        return self.mode != "full"

    @property
    def quantized(self) -> bool:
        return self.mode == "qlora"

    def label(self) -> str:
        if not self.uses_lora:
            return "full fine-tuning"
        targets = ",".join(self.lora_targets) if self.lora_targets else "PEFT's default targets"
        return f"{'QLoRA' if self.quantized else 'LoRA'} r={self.lora_rank} ({targets})"

    def flag_words(self) -> list[str]:
        """The ``--finetune``/``--lora-*`` flags (wizard.cli_options) that ask for this again; none for full."""
        if not self.uses_lora:
            return []
        words = [
            "--finetune",
            self.mode,
            "--lora-rank",
            str(self.lora_rank),
            "--lora-alpha",
            str(self.lora_alpha),
        ]
        return words + (["--lora-targets", ",".join(self.lora_targets)] if self.lora_targets else [])

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["lora_targets"] = list(self.lora_targets)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> FineTune:
        """Read ``to_dict`` back; None (a sidecar written before fine-tuning modes existed) is full fine-tuning."""
        if d is None:
            return cls()
        if not isinstance(d, Mapping):
            raise DswizError(
                f"fine-tuning settings {d!r} are not an object", "re-write the plan with dswiz config"
            )
        return make_finetune(
            str(d.get("mode", "full")),
            rank=d.get("lora_rank"),
            alpha=d.get("lora_alpha"),
            targets=d.get("lora_targets") or (),
            double_quant=bool(d.get("double_quant", True)),
        )


FULL = FineTune()


def parse_targets(text: str | None) -> tuple[str, ...]:
    """``q_proj,v_proj`` (module names, suffix-matched as PEFT does) or ``all-linear``; empty: PEFT's default."""
    if not text:
        return ()
    names = tuple(t.strip() for t in text.split(",") if t.strip())
    if ALL_LINEAR in names and len(names) > 1:
        raise DswizError(
            f"--lora-targets {text!r} mixes all-linear with module names", "give either all-linear or names"
        )
    return names


def make_finetune(
    mode: str,
    *,
    rank: Any = None,
    alpha: Any = None,
    targets: Any = (),
    double_quant: bool = True,
) -> FineTune:
    """A checked FineTune from user input (flags, prompts, a sidecar); DswizError naming the fix otherwise."""
    if mode not in FINETUNE_MODES:
        raise DswizError(f"unknown fine-tuning mode {mode!r}", "use --finetune full, lora or qlora")
    r = DEFAULT_LORA_RANK if rank is None else rank
    a = DEFAULT_LORA_ALPHA if alpha is None else alpha
    for name, v in (("--lora-rank", r), ("--lora-alpha", a)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1 or v > 65536:
            raise DswizError(f"{name} {v!r} is not a whole number from 1 to 65536", f"e.g. {name} 16")
    if isinstance(targets, str):
        targets = parse_targets(targets)
    if not isinstance(targets, (list, tuple)) or not all(isinstance(t, str) and t for t in targets):
        raise DswizError(
            f"LoRA targets {targets!r} are not module names", "e.g. --lora-targets q_proj,v_proj"
        )
    return FineTune(mode, r, a, tuple(targets), double_quant)
