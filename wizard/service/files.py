"""The files every front door writes, built one way: the config writers' options, the plan sidecar, the code hints,
the linter's findings on the files before they are written, and the atomic write itself.

``dswiz config`` (from flags), the full-screen wizard and the line prompts (from ``Choices``) all call these, so a
written config set does not depend on the door it came through.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from wizard.config.launchers import PER_NODE_LAUNCHERS, MultinodeLauncher
from wizard.config.sidecar import SIDECAR_NAME, PlanSidecar, dump_sidecar
from wizard.errors import DswizError
from wizard.findings import Finding
from wizard.fsio import WriteResult, settle_file_set, write_file_set
from wizard.hardware.report import HardwareReport
from wizard.hints import config_hint_lines
from wizard.model import ModelSpec
from wizard.planner import Candidate, PlanRequest
from wizard.replan import make_sidecar
from wizard.strategy import Strategy

# wizard.config's schema, build, load, reimport and check build pydantic models when imported (~0.5 s): imported
# where first used, so a front door that has not got to its files yet does not wait for them.
if TYPE_CHECKING:
    from typing_extensions import Unpack  # typed **kwargs; typing.Unpack is Python 3.11+

    from wizard.config.build import WriteOptions
    from wizard.config.load import LoadedConfig
    from wizard.config.schema import AccelerateMode, Consumer, SlurmJob


class WriteAnswers(TypedDict, total=False):
    """What a front door asked about the files (``WriteOptions`` fields); a field left out keeps its default, or
    for an imported file, the file's value."""

    consumer: Consumer
    nvme_path: str | None
    hosts: tuple[str, ...]
    master_addr: str | None
    master_port: int
    launcher: MultinodeLauncher
    optimizer: Literal["auto", "deepspeed", "script"]
    lr: float
    torch_adam: bool
    local_rank_arg: bool
    steps_per_print: int
    accelerate_mode: AccelerateMode
    gradient_clipping: float
    save_16bit_model: bool
    expandable_segments: bool
    slurm: SlurmJob


def write_options(
    *,
    out_dir: Path,
    model: ModelSpec | None,
    hardware: HardwareReport | None,
    imported: LoadedConfig | None = None,
    **answers: Unpack[WriteAnswers],
) -> WriteOptions:
    """The config writers' options: the answers, the MoE block of ``model``, the DeepSpeed that will read the
    config (``installed_deepspeed_version``), and the
    folder the files go to -- absolute, because accelerate opens the JSON and hostfile by that path relative to
    where it is launched. For an imported file (``--from``), the options it implies with the answers on top."""
    from wizard.config.build import WriteOptions
    from wizard.config.reimport import options_from_config

    wanted: dict[str, Any] = {
        **answers,
        "deepspeed_version": installed_deepspeed_version(hardware),
        # the node's, not this process's share: the batch job asks Slurm for them
        "host_cores": hardware.host.cores if hardware is not None else None,
        "threads_per_core": hardware.host.threads_per_core if hardware is not None else 1,
        "moe_leaf_modules": moe_leaf_modules(model),
        **({"finetune": model.finetune} if model is not None else {}),
        "config_dir": str(out_dir.resolve()),
    }
    if imported is not None:
        return options_from_config(imported.config, **wanted)
    return WriteOptions(**wanted)


def moe_leaf_modules(model: ModelSpec | None) -> tuple[str, ...]:
    """The MoE block ZeRO-3 must fetch whole, from the model's type (Mixtral, Qwen2-MoE); () for dense models."""
    if model is None or not model.is_moe or not model.moe_layer_cls_name:
        return ()
    return (model.moe_layer_cls_name,)


def installed_deepspeed_version(hardware: HardwareReport | None) -> str | None:
    """The DeepSpeed that will read the config (decides whether log_level is written): the hardware report's,
    else the one installed next to dswiz (from package metadata, without importing it), else unknown."""
    if hardware is not None and hardware.software.deepspeed:
        return hardware.software.deepspeed
    try:
        return metadata.version("deepspeed")
    except metadata.PackageNotFoundError:
        return None


def sidecar_text(
    *,
    model_arg: str,
    model: ModelSpec,
    hardware_arg: str | None,
    hardware: HardwareReport,
    request: PlanRequest,
    candidate: Candidate,
    config_args: Sequence[str] = (),
) -> tuple[str, str]:
    """(file name, text) of the plan sidecar ``dswiz launch`` compares the run with: the chosen candidate and the
    prediction it already carries."""
    sidecar: PlanSidecar = make_sidecar(
        model_arg=model_arg,
        model=model,
        hardware_arg=hardware_arg,
        hardware=hardware,
        request=request,
        candidate=candidate,
        config_args=config_args,
    )
    return SIDECAR_NAME, dump_sidecar(sidecar)


def code_hint_lines(
    consumer: str, ds_config: Mapping[str, Any], out_dir: Path, strategy: Strategy | None = None
) -> list[str]:
    """What the user's script must change for the consumer and this DeepSpeed config: the explanation and a short
    diff (wizard.hints); for inference, how the script runs it."""
    from wizard.config.build import inference_note
    from wizard.config.schema import ACCELERATE_YAML_NAME, DS_CONFIG_NAME

    if strategy is not None and strategy.mode == "inference":
        return [f"script ({consumer}): {inference_note(consumer, strategy.micro_batch_size)}"]
    return config_hint_lines(
        consumer,
        dict(ds_config),
        config_file=str(out_dir / DS_CONFIG_NAME),
        accelerate_config=str(out_dir / ACCELERATE_YAML_NAME),
    )


def ds_config_of(files: Mapping[str, str]) -> dict[str, Any] | None:
    """The DeepSpeed JSON among rendered files (None when missing or unreadable)."""
    from wizard.config.schema import DS_CONFIG_NAME

    try:
        value = json.loads(files.get(DS_CONFIG_NAME, "{}"))
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def lint_files(
    files: Mapping[str, str],
    world_size: int,
    *,
    hardware: HardwareReport | None = None,
    launcher: str | None = None,
    out_dir: Path | None = None,
    consumer: Consumer | None = None,
) -> list[Finding]:
    """The linter's findings for the files about to be written: exactly what ``dswiz check DIR`` would say once
    they are written to ``out_dir`` (the same ``wizard.config.check.lint_path``, run on a scratch copy in which
    the files' absolute paths to ``out_dir`` -- accelerate's deepspeed_config_file -- point at the copy)."""
    from wizard.config.check import lint_path

    target = str(out_dir.resolve()) if out_dir is not None else None
    with tempfile.TemporaryDirectory(prefix="dswiz-review-") as scratch:
        for name, text in files.items():
            if target is not None:
                text = text.replace(target + "/", scratch + "/")
            (Path(scratch) / name).write_text(text, encoding="utf-8")
        found = lint_path(
            Path(scratch), consumer=consumer, world_size=world_size, hardware=hardware, launcher=launcher
        )

        def back(text: str | None) -> str | None:
            return text.replace(scratch, target) if text is not None and target is not None else text

        return [
            dataclasses.replace(
                f,
                what=back(f.what) or "",
                why=back(f.why) or "",
                fix=back(f.fix) or "",
                location=back(f.location),
            )
            for f in found
        ]


def write_files(out_dir: Path, files: Mapping[str, str], *, force: bool) -> list[WriteResult]:
    """The files as one set (wizard.fsio.write_file_set: all new or all old after a kill; launch.sh executable);
    with ``force`` an existing different file is kept as a backup (the last few of each are kept)."""
    modes = {name: 0o755 for name in files if name.endswith(".sh")}
    return write_file_set(out_dir, files, force=force, modes=modes)


def existing_files(out_dir: Path, names: Iterable[str]) -> dict[str, str]:
    """What is already on disk under those names, for the diff (unreadable files count as absent); a write that
    was killed half-way is finished or undone first, so the diff is against one whole set (where that cannot be
    done, the write says why: this only shows what is there)."""
    with contextlib.suppress(DswizError):
        settle_file_set(out_dir)
    out = {}
    for name in names:
        try:
            out[name] = (out_dir / name).read_text()
        except (OSError, UnicodeDecodeError):
            continue
    return out


def launch_command(
    out_dir: Path, script: str = "train.py", *, strategy: Strategy | None, launcher: str
) -> str:
    """What to run next. A multi-node job whose launcher runs on every node (nossh, standard) is started on each
    node with that node's rank."""
    if strategy is not None and strategy.nodes > 1 and launcher in PER_NODE_LAUNCHERS:
        return f"dswiz launch --config {out_dir} --node-rank K {script}   (on every node; K = 0 on the first host)"
    return f"dswiz launch --config {out_dir} {script}"
