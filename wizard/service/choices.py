"""What the user has chosen so far, shared by the full-screen wizard and the line prompts.

Plain data: no decisions are made here (those come from the planner through ``wizard.service``), only the answers
and the one invariant the wizard promises to keep -- the batch arithmetic (global = micro x accumulation x world).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from wizard.config.launchers import DEFAULT_LAUNCHER, MULTINODE_LAUNCHERS, MultinodeLauncher
from wizard.errors import DswizError
from wizard.hardware.report import HardwareReport
from wizard.planner.calibration import DEFAULT_SAFETY_MARGIN
from wizard.strategy import Mode, Strategy
from wizard.tuning import FULL, FineTune
from wizard.units import fmt_bytes

if TYPE_CHECKING:  # the loader pulls in pydantic: only an imported file needs it at run time
    from wizard.config.load import LoadedConfig
    from wizard.config.schema import Consumer

LAUNCHERS: tuple[MultinodeLauncher, ...] = MULTINODE_LAUNCHERS
CONSUMERS: tuple[Consumer, ...] = ("deepspeed", "accelerate", "trainer")
DEFAULT_OUT_DIR = Path("dswiz-config")


@dataclass
class Choices:
    hardware_spec: str | None = None  # None: this machine, as detected
    hardware: HardwareReport | None = None
    model_text: str = ""
    seq_len: int | None = None  # None: the model's context, at most 2048 (PlanRequest.resolved_seq_len)
    global_batch: int | None = None  # the user's target; None: let the planner pick (never the plan's answer)
    mode: Mode = "train"
    finetune: FineTune = (
        FULL  # as asked (--finetune/--lora-*, the Model step); the ModelSpec carries it resolved
    )
    strategy: Strategy | None = None
    gradient_clipping: float = 1.0
    save_16bit: bool = True  # stage 3 training: gather the 16-bit weights into one file on save
    consumer: Consumer = "deepspeed"  # who reads the config: deepspeed, accelerate or trainer
    launcher: MultinodeLauncher = (
        DEFAULT_LAUNCHER  # how a multi-node job is started (wizard/config/launchers.py)
    )
    hostfile_text: str = ""
    master_addr: str = ""
    master_port: int = 29500
    nvme_path: str = ""  # NVMe offload's directory (nvme_path); asked only when something goes to NVMe
    # DeepSpeed's --no_local_rank in launch.sh: "asked" (--no-local-rank), "folder" (kept from the launch.sh of the
    # folder --from imports; dropped where the launch would not pass --local_rank anyway), None: not passed
    no_local_rank: Literal["asked", "folder"] | None = None
    # What of each card the plan may use (--gpu-memory, --margin; the Hardware step): None plans for the card's whole
    # memory; the margin is the share kept free
    gpu_memory_bytes: int | None = None
    safety_margin: float = DEFAULT_SAFETY_MARGIN
    out_dir: Path = DEFAULT_OUT_DIR
    imported_from: Path | None = None
    imported: LoadedConfig | None = None  # --from FILE: written back changed only where the choices changed
    imported_ds_text: str | None = None  # its DeepSpeed JSON as it was on disk (key order, indentation)
    written: list[Path] = field(default_factory=list)

    @property
    def world_size(self) -> int:
        return self.strategy.world_size if self.strategy else 1

    def set_topology(self, *, nodes: int, gpus_per_node: int) -> None:
        """Nodes or GPUs per node changed: keep micro-batch and accumulation, the global batch follows."""
        if self.strategy is None:
            return
        self.strategy = self.strategy.with_(nodes=max(1, nodes), gpus_per_node=max(1, gpus_per_node))


def gpu_memory_for(
    asked: int | None,
    hardware: HardwareReport | None,
    *,
    what: str = "--gpu-memory",
    hardware_field: str = "with --hardware",
) -> int | None:
    """The memory per GPU to plan for when ``asked`` (--gpu-memory, or the wizard's field ``what``, whose hardware is
    given in ``hardware_field``): less of each card
    than it has. A card's memory is sold rounded (a "24 GB" RTX 4090 is 23.99 GiB, an "80 GB" H100 79.6 GiB), so up
    to 2 % more than the smallest card is taken as the card; more than that is a mistake (a plan for a 1 TiB H200
    fits what no H200 can run)."""
    card = hardware.min_gpu_memory_bytes if hardware is not None else None
    if not asked or not card or asked <= card:
        return asked
    if asked <= card * 1.02:
        return card
    name = hardware.gpus[0].name if hardware is not None and hardware.gpus else "the GPU"
    raise DswizError(
        f"{what} {fmt_bytes(asked)} is more than the {name} holds ({fmt_bytes(card)} per GPU)",
        f"give at most {fmt_bytes(card)} (it plans for part of each card), or describe the card you mean "
        f"{hardware_field}",
    )


def parse_positive(text: str, what: str, *, allow_empty: bool = False, example: int = 8) -> int | None:
    text = text.strip().replace("_", "").replace(",", "")
    if not text and allow_empty:
        return None
    try:
        value = int(text)
    except ValueError:
        raise DswizError(
            f"{what} must be a whole number, not {text!r}", f"type a whole number, e.g. {example}"
        ) from None
    if value < 1:
        raise DswizError(f"{what} must be at least 1", f"type a positive {what}")
    return value
